"""Drafter cost tables: a drafter's layers are built like the target's (a DeepSeek-V4 drafter keeps its MoE
block), its launch overhead is its share of the target's, and a DSpark table carries its heads' cost into the
simulator."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from hw_profile.cli import main
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import (
    ModelShape,
    dense_gemms,
    drafter_attention_window,
    drafter_shape,
    get_shape,
)
from hw_profile.kernels.roofline import RooflineParams, drafter_params, markov_head_costs, step_time_ms
from hw_profile.tables.step_table import StepTable
from simulator.inputs.config import load_scenario
from simulator.inputs.hardware import load_hardware


def write_table(tmp_path, *args: str) -> StepTable:
    out = tmp_path / "t.csv"
    with pytest.raises(SystemExit) as exc:
        main(["analytic", *args, "--out", str(out)])
        raise SystemExit(0)
    assert not exc.value.code
    return StepTable.read(out)


def test_a_v4_drafter_layer_keeps_the_targets_moe_block():
    v4 = get_shape("deepseek-v4-flash")
    d = drafter_shape(v4, 3)
    # every matmul parameter of a layer is attention or the feed-forward block: V4 has no dense MLP, so a drafter
    # made dense (the old rule) had attention only
    ffn = d.matmul_params - d.layers * d.attn_params_per_layer - d.head_params
    per_layer = (v4.shared_experts + v4.experts_per_token) * v4.expert_params + v4.hidden * v4.experts
    assert ffn == 3 * per_layer > 0
    assert (d.moe_layers, d.dense_layers, d.attention_kind) == (3, 0, "gqa")
    # its window-only attention keeps V4's projections (low-rank queries, one KV head, grouped low-rank output),
    # without the compressors and indexer: not a 64-head full-rank GQA layer (2.5x the parameters)
    q = v4.hidden * v4.q_lora_rank + v4.q_lora_rank * v4.heads * v4.head_dim
    o = v4.heads * v4.head_dim * v4.o_lora_rank + v4.o_groups * v4.o_lora_rank * v4.hidden
    assert d.attn_params_per_layer == q + v4.hidden * v4.head_dim + o < v4.attn_params_per_layer
    assert drafter_attention_window(v4) == 128 and drafter_attention_window(get_shape("qwen3-8b")) == 0
    # a dense target's drafter stays dense, of the target's MLP width
    q = drafter_shape(get_shape("qwen3-8b"), 3)
    assert not q.is_moe and q.mlp_params_per_layer == get_shape("qwen3-8b").mlp_params_per_layer


def test_drafter_launch_overhead_is_its_share_of_the_targets():
    assert drafter_params(RooflineParams(launch_ms=0.43), 3, 43).launch_ms == pytest.approx(0.03)
    assert drafter_params(RooflineParams(), 50, 43).launch_ms == RooflineParams().launch_ms


def test_analytic_drafter_table_pays_a_scaled_launch_and_records_window_and_heads(tmp_path):
    h800, v4 = get_gpu("H800"), get_shape("deepseek-v4-flash")
    table = write_table(tmp_path, "--gpu", "H800", "--model", "deepseek-v4-flash", "--dtype", "fp8",
                        "--drafter-layers", "3", "--launch-ms", "0.43")
    assert table.meta["roofline"]["launch_ms"] == pytest.approx(0.03)
    full, _ = step_time_ms(drafter_shape(v4, 3), h800, 1.0, 0.0, dtype="fp8", params=RooflineParams(launch_ms=0.43))
    assert full - table.grid.step_ms(1, 0) == pytest.approx(0.40, rel=1e-6)
    assert table.meta["attention_window"] == 128
    assert table.meta["drafter_of"] == {"model": "deepseek-v4-flash", "layers": 43}
    head = table.meta["sequential_head"]
    assert head == pytest.approx(markov_head_costs(h800, 256, v4.vocab, "fp8", hidden=v4.hidden))
    # the confidence head's (hidden + rank) vector comes on top of the Markov head's rank x vocab
    bare = markov_head_costs(h800, 256, v4.vocab, "fp8")
    assert head["per_position_ms"] / bare["per_position_ms"] == pytest.approx(1 + (4096 + 256) / (256 * 129280))
    assert head["confidence_head"] == 4096 + 256 and "confidence_head" not in bare


def test_markov_rank_zero_records_no_head(tmp_path):
    table = write_table(tmp_path, "--gpu", "H200", "--model", "qwen3-8b", "--drafter-layers", "2", "--markov-rank", "0")
    assert "sequential_head" not in table.meta and "attention_window" not in table.meta


def test_a_new_gpus_drafter_table_charges_dspark_its_heads_and_dflash_none(tmp_path, scenario_file):
    """The planner's route to a GPU without embedded tables: `analytic` for the target and for the drafter, named
    in hardware.drafter_tables. DSpark's heads were dropped there (only the embedded main sidecar carried them)."""
    target = tmp_path / "b200.csv"
    main_args = ["analytic", "--gpu", "B200", "--model", "qwen3-8b"]
    for extra, out in (([], target), (["--drafter-layers", "5"], tmp_path / "b200.drafter-5l.csv")):
        with pytest.raises(SystemExit) as exc:
            main([*main_args, *extra, "--out", str(out)])
            raise SystemExit(0)
        assert not exc.value.code
    drafter = json.loads((tmp_path / "b200.drafter-5l.json").read_text())["sequential_head"]
    scn = load_scenario(scenario_file(hardware={"table": str(target), "drafter_tables": {
        "dspark": str(tmp_path / "b200.drafter-5l.csv"), "dflash": str(tmp_path / "b200.drafter-5l.csv")}}))
    hw = load_hardware(scn, {"dspark", "dflash"})
    assert drafter["per_position_ms"] > 0 and drafter["per_row_position_ms"] > 0
    assert hw.draft["dspark"].seq_per_position_ms == pytest.approx(drafter["per_position_ms"])
    assert hw.draft["dspark"].seq_per_row_position_ms == pytest.approx(drafter["per_row_position_ms"])
    assert hw.draft["dflash"].seq_per_position_ms == 0.0 == hw.draft["dflash"].seq_per_row_position_ms
    # gamma 4, 8 rows: the backbone once over 32 tokens, then 4 head positions
    backbone = hw.draft["dspark"].grid.lookup(32, 1000.0)
    assert hw.draft["dspark"].ms(8, 4, 1000.0) == pytest.approx(
        backbone + 4 * max(drafter["per_position_ms"], 8 * drafter["per_row_position_ms"]))


def test_a_measured_dspark_drafter_table_times_its_heads(tiny_config, tmp_path, scenario_file):
    """sps --drafter-layers on a new device: the heads are timed there and reach the dspark drafter's cost."""
    pytest.importorskip("torch")
    from hw_profile.measure.profiler import ProfileConfig, profile

    cfg = ProfileConfig(model=str(tiny_config), requests=[1, 64], tokens_per_request=[4], contexts=[16],
                        dtype="fp32", warmup=2, repeats=7, threads=1, drafter_layers=1, markov_rank=64)
    out = tmp_path / "d.csv"
    head = profile(cfg, out, progress=False, log=lambda s: None).table.meta["sequential_head"]
    assert head["rank"] == 64 and head["confidence_head"] == 256 + 64
    measured = head["measured_ms"]
    assert set(measured) == {"1", "64"} and all(v > 0 for v in measured.values())
    assert head["per_position_ms"] == pytest.approx(measured["1"])
    assert head["per_row_position_ms"] == pytest.approx(measured["64"] / 64)
    # 64 rows multiply 64x the rows through the 64 x 8192 transition: never faster than one row
    assert measured["64"] > measured["1"]
    scn = load_scenario(scenario_file(hardware={"drafter_tables": {"dspark": str(out)}}))
    cost = load_hardware(scn, {"dspark"}).draft["dspark"]
    assert (cost.seq_per_position_ms, cost.seq_per_row_position_ms) == pytest.approx(
        (head["per_position_ms"], head["per_row_position_ms"]))
    cfg.markov_rank = 0
    assert "sequential_head" not in profile(cfg, tmp_path / "n.csv", progress=False, log=lambda s: None).table.meta


def test_eagle3_and_dflash_drafters_are_dense_whatever_the_target():
    """EAGLE-3 is one dense layer with a 32,000-token head, DFlash five dense layers with the target's head; of an
    MoE target both take its dense MLP width, and a target without one (DeepSeek-V4) has neither."""
    from hw_profile.errors import HwProfileError
    from hw_profile.estimate.estimate import drafter_shapes

    qwen_moe = get_shape("qwen3-30b-a3b")
    shapes = drafter_shapes(qwen_moe, ["mtp", "eagle3", "dflash"])
    mtp, eagle3, dflash = (shapes[name][0] for name in ("mtp", "eagle3", "dflash"))
    assert mtp.is_moe and not eagle3.is_moe and not dflash.is_moe
    assert (eagle3.layers, eagle3.vocab, dflash.layers, dflash.vocab) == (1, 32_000, 5, qwen_moe.vocab)
    layer = qwen_moe.attn_params_per_layer + 3 * qwen_moe.hidden * qwen_moe.intermediate
    h, qkv = qwen_moe.hidden, (qwen_moe.heads + 2 * qwen_moe.kv_heads) * qwen_moe.head_dim
    # EAGLE-3's q, k and v read the embedding beside the fused feature: h x qkv more weights in every pass
    assert eagle3.attn_input_multiple == 2 and dflash.attn_input_multiple == 1
    assert eagle3.matmul_params == layer + h * qkv + h * 32_000
    assert dflash.matmul_params == 5 * layer + qwen_moe.head_params
    # an MoE layer's active parameters (MTP's) are not a dense layer's: the two drafters differ in what they read
    assert mtp.matmul_params != layer + qwen_moe.head_params
    # of a dense target, EAGLE-3 is the target's layer under a smaller head
    q8 = get_shape("qwen3-8b")
    e = drafter_shapes(q8, ["eagle3"])["eagle3"][0]
    qkv8 = (q8.heads + 2 * q8.kv_heads) * q8.head_dim
    assert e.matmul_params == q8.attn_params_per_layer + q8.hidden * qkv8 + q8.mlp_params_per_layer + q8.hidden * 32_000
    # the wider input adds 8% to a pass's matmul weights here, as docs/hw-profile.md says
    assert q8.hidden * qkv8 / (e.matmul_params - q8.hidden * qkv8) == pytest.approx(0.078, abs=0.001)
    assert ("qkv", qkv8, 2 * q8.hidden, 1) in dense_gemms(e) and ("qkv", qkv8, q8.hidden, 1) not in dense_gemms(e)
    assert ModelShape(**e.to_dict()) == e  # the sidecar keeps the field
    for name in ("eagle3", "dflash"):
        with pytest.raises(HwProfileError, match=f"--drafters {name}: deepseek-v4-flash has no dense MLP width"):
            drafter_shapes(get_shape("deepseek-v4-flash"), [name])
    with pytest.raises(HwProfileError, match="known: mtp, dspark, eagle3, dflash"):
        drafter_shapes(q8, ["medusa"])


def test_an_estimated_eagle3_table_drives_an_eagle3_system(tmp_path, scenario_file):
    """`hw-profile estimate --drafters eagle3,dflash` writes both tables beside the target's and names them in its
    sidecar, so a scenario's eagle3 system drafts at the table's price: gamma passes of one token a request and
    its fusion projection."""
    out = tmp_path / "q.csv"
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", "qwen3-8b", "--gpu", "H20", "--kernels", "roofline", "--drafters",
              "eagle3,dflash", "--max-batch-tokens", "256", "--max-kv-tokens", "100000", "--out", str(out)])
        raise SystemExit(0)
    assert not exc.value.code
    meta = json.loads((tmp_path / "q.json").read_text())["drafter_tables"]
    assert set(meta) == {"eagle3", "dflash"}
    eagle3, dflash = (StepTable.read(tmp_path / meta[n]["table"]) for n in ("eagle3", "dflash"))
    assert eagle3.meta["model_shape"]["vocab"] == 32_000 and eagle3.meta["model_shape"]["layers"] == 1
    assert dflash.meta["model_shape"]["layers"] == 5
    # five layers and the full head read more than one layer and a 32k head, at any size
    assert dflash.grid.step_ms(1, 0) > eagle3.grid.step_ms(1, 0) > 0
    hw = load_hardware(load_scenario(scenario_file(hardware={"table": str(out)})), {"eagle3", "dflash"})
    fusion = hw.draft["eagle3"].fusion_share
    assert 0.1 < fusion < 0.2  # its shape fuses three target states: priced once a round, over what it takes in
    assert hw.draft["eagle3"].ms(8, 3, 4000.0) == pytest.approx(3 * eagle3.grid.lookup(8, 4000.0, 8)
                                                               + fusion * eagle3.grid.lookup(8, 0.0, 8))


def _k3_dspark_config(**changes) -> dict:
    """The fields of SGLang's Kimi-K3 DSpark training config (five dense layers of the target's width)."""
    cfg = {"model_type": "qwen3", "num_hidden_layers": 5, "hidden_size": 7168, "intermediate_size": 14336,
           "num_attention_heads": 64, "num_key_value_heads": 16, "head_dim": 64, "vocab_size": 163840,
           "tie_word_embeddings": False, "dflash_config": {"target_layer_ids": [7, 23, 51, 67, 83], "markov_rank": 256}}
    return {**cfg, **changes}


def test_a_drafters_own_config_replaces_the_built_in_layers():
    """--drafter-config: the checkpoint's layers (dense GQA here, where the built-in DSpark drafter of an MoE
    target copies three of its MoE layers), the target layers it fuses, its Markov rank; EAGLE-3 keeps its wider
    input and takes its draft vocabulary from the config."""
    from hw_profile.errors import HwProfileError
    from hw_profile.estimate.estimate import drafter_shapes

    k3 = get_shape("kimi-k3")
    built_in = drafter_shapes(k3, ["dspark"])["dspark"][0]
    shape, entry = drafter_shapes(k3, ["dspark"], {"dspark": _k3_dspark_config()})["dspark"]
    assert built_in.is_moe and built_in.layers == 3 and not shape.is_moe
    assert (shape.layers, shape.heads, shape.kv_heads, shape.head_dim, shape.intermediate) == (5, 64, 16, 64, 14336)
    assert shape.fusion_inputs == 5 and entry == {"markov_rank": 256}  # full attention: no window
    h = 7168
    layer = h * 64 * 64 + 2 * h * 16 * 64 + 64 * 64 * h + 3 * h * 14336  # q, k, v, o and the SwiGLU MLP
    assert shape.matmul_params == 5 * layer + h * 163840
    # DFlash's backbone (its dflash_config): each layer also projects the fused context's K and V
    assert shape.fused_context_kv and shape.fusion_params == 5 * h * h + 5 * 2 * h * 16 * 64
    assert shape.total_params < built_in.total_params / 20  # 3 MoE layers of 896 experts store far more
    # the deployment's KV type reaches the drafter's cache, as it reaches the built-in drafters'
    fp8 = replace(k3, kv_dtype="fp8")
    assert drafter_shapes(fp8, ["dspark"], {"dspark": _k3_dspark_config()})["dspark"][0].kv_dtype == "fp8"
    q8 = get_shape("qwen3-8b")
    eagle = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": q8.hidden, "intermediate_size": 12288,
             "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 151936, "draft_vocab_size": 32000}
    e, entry = drafter_shapes(q8, ["eagle3"], {"eagle3": eagle})["eagle3"]
    assert (e.vocab, e.attn_input_multiple, e.fusion_inputs, entry) == (32000, 2, 3, {})
    with pytest.raises(HwProfileError, match="--drafter-config dspark: hidden_size 4096 is not the target's"):
        drafter_shapes(k3, ["dspark"], {"dspark": _k3_dspark_config(hidden_size=4096)})
    with pytest.raises(HwProfileError, match="--drafter-config eagle3: not among --drafters"):
        drafter_shapes(k3, ["dspark"], {"eagle3": eagle})
    with pytest.raises(HwProfileError, match="--drafter-config dspark: config lacks 'num_attention_heads'"):
        drafter_shapes(k3, ["dspark"], {"dspark": {"hidden_size": 7168}})


def test_estimate_writes_a_configured_drafters_table(tmp_path, capsys):
    """`hw-profile estimate --drafter-config dspark=PATH`: the drafter's table is priced on the config's layers,
    its sidecar entry carries the config's Markov rank, the sidecars name the file; mistakes are one line."""
    config = tmp_path / "draft.json"
    config.write_text(json.dumps(_k3_dspark_config(dflash_config={"target_layer_ids": [1, 2], "markov_rank": 128})))
    base = ["estimate", "--model", "kimi-k3", "--gpu", "MI350X", "--engine", "sglang", "--gpus", "8",
            "--kernels", "roofline", "--drafters", "dspark", "--max-batch-tokens", "512", "--max-kv-tokens", "65536"]
    tables = {}
    for label, extra in (("built-in", []), ("config", ["--drafter-config", f"dspark={config}"])):
        out = tmp_path / label / "t.csv"
        with pytest.raises(SystemExit) as exc:
            main([*base, *extra, "--out", str(out)])
            raise SystemExit(0)
        assert not exc.value.code
        meta = json.loads(out.with_suffix(".json").read_text())
        tables[label] = (StepTable.read(out.with_name("t.drafter-dspark.csv")), meta)
    drafter, meta = tables["config"]
    assert drafter.meta["model_shape"]["layers"] == 5 and drafter.meta["model_shape"]["fusion_inputs"] == 2
    assert meta["drafter_tables"]["dspark"]["sequential_head"]["rank"] == 128
    assert meta["drafter_configs"] == {"dspark": str(config)}
    assert tables["built-in"][1]["drafter_tables"]["dspark"]["sequential_head"]["rank"] == 256
    # a dense 1B-a-GPU drafter reads less than three of the target's MoE layers at 512 tokens
    assert drafter.grid.step_ms(512, 0) < tables["built-in"][0].grid.step_ms(512, 0)
    for bad, message in ((f"eagle3={config}", "--drafter-config eagle3: not among --drafters (dspark)"),
                         ([f"dspark={config}", f"dspark={config}"], "--drafter-config dspark: given twice"),
                         ("dspark", "--drafter-config: expected NAME=PATH"),
                         (f"dspark={tmp_path / 'none.json'}", "--drafter-config dspark: no such file")):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            flags = [x for item in ([bad] if isinstance(bad, str) else bad) for x in ("--drafter-config", item)]
            main([*base, *flags, "--out", str(tmp_path / "x.csv")])
        err = capsys.readouterr().err
        assert exc.value.code and message in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
