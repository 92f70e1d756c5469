"""The engine on many run shapes: closed forms, invariants (checked on every run), determinism, preemption."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from simulator.core.policies import Policy
from simulator.errors import PolicyError
from tests.conftest import ROOT
from tests.simulator.engine_helpers import simulate


def constant_profile(tmp_path, alpha: float, gamma: int = 7):
    """A profile in which every draft token survives with probability alpha, independently of everything."""
    mu = [math.log(alpha / (1 - alpha))] * gamma
    doc = {
        "name": "constant",
        "variation": {"request_sd": 0.0, "step_sd": 0.0, "token_sd": 0.0},
        "domains": {"bench": "chat"},
        "drafters": {
            name: {"gamma": g, "head": {"kind": "confidence-head", "noise_sd": 0.5, "sharpness": 1.0},
                   "benchmarks": {"bench": {"tau": 0, "conditional": [alpha] * g, "mu": mu[:g]}}}
            for name, g in (("dspark", gamma), ("dflash", gamma), ("eagle3", gamma), ("mtp", 1))
        },
    }
    path = tmp_path / "constant.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize(("alpha", "k"), [(0.6, 1), (0.8, 3), (0.9, 5), (0.7, 7)])
def test_static_k_tau_matches_closed_form(tmp_path, scenario_file, alpha, k):
    path = scenario_file(
        acceptance={"profile": constant_profile(tmp_path, alpha)},
        systems=[f"static-{k}"],
        workload={"prompt": 64, "output": 4096, "mix": {"chat": 1}},
        frontier={"concurrency": [32]},
        run={"duration_s": 20.0, "warmup_s": 2.0},
    )
    row, sim = simulate(path)
    expect = (1 - alpha ** (k + 1)) / (1 - alpha)
    steps = sim.steps.frame()
    n = steps["decoding"].sum()
    sd = math.sqrt(np.var(np.minimum(np.random.default_rng(0).geometric(1 - alpha, 100_000) - 1, k) + 1) / n)
    # request-steps near a request's end verify fewer than k; with 4096-token outputs that is < 0.2% of steps
    assert abs(row["tau"] - expect) < 4 * sd + 0.002 * expect
    assert row["mean_verify_budget"] == pytest.approx(1 + k, abs=0.01)


def test_ar_and_mtp_budgets(scenario_file):
    path = scenario_file(systems=["ar", "mtp-1"], workload={"output": 512})
    ar, _ = simulate(path, "ar")
    mtp, _ = simulate(path, "mtp-1")
    assert ar["tau"] == 1.0 and ar["mean_verify_budget"] == 1.0
    assert mtp["mean_verify_budget"] == pytest.approx(2.0, abs=0.01)
    assert 1.8 < mtp["tau"] < 1.95  # MTP second-token acceptance 0.85-0.90


ALL_SYSTEMS = ["ar", "mtp-1", "static-3", "static-7", "threshold-0.7", "batch-table", "goodput-k", "dspark",
               "dspark-async", "oracle", "vllm-adaptive", "sglang-compact", "trtllm-adaptive",
               {"name": "dflash-thr", "drafter": "dflash", "policy": "threshold", "params": {"value": 0.5, "on": "a"}},
               {"name": "eagle3-dspark", "drafter": "eagle3", "gamma": 4, "policy": "dspark"}]
SHAPES = {
    "closed-small": {},
    "closed-large": {"frontier": {"concurrency": [200]}, "engine": {"max_running": 128, "max_batch_tokens": 8192}},
    "open-poisson-tide": {"frontier": None, "traffic": {"kind": "poisson", "segments": [
        {"duration_s": 2, "rate": 5}, {"duration_s": 2, "rate": 40}]}},
    "open-trace-2-replicas-rr": {"frontier": None, "hardware": {"replicas": 2, "router": "round-robin"},
                                 "traffic": {"kind": "trace", "rate_scale": 0.5,
                                             "trace": str(ROOT / "scenarios/traces/AzureLLMInferenceTrace_conv.csv")}},
    "tight-kv-preemption": {"engine": {"kv_capacity_tokens": 3000}, "frontier": {"concurrency": [24]},
                            "workload": {"prompt": 200, "output": {"dist": "uniform", "low": 50, "high": 600}}},
    "chunked-prefill": {"engine": {"max_batch_tokens": 600, "prefill_chunk": 128, "max_running": 32},
                        "workload": {"prompt": {"dist": "lognormal", "median": 900, "sigma": 0.8, "max": 3000}}},
    "3-replicas-least-loaded": {"hardware": {"replicas": 3}, "frontier": {"concurrency": [40]}},
    "disaggregated-prefill-tight-kv": {"engine": {"prefill": "disaggregated", "kv_capacity_tokens": 2500},
                                       "frontier": {"concurrency": [24]},
                                       "workload": {"output": {"dist": "uniform", "low": 1, "high": 500}}},
}


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES))
def test_invariants_hold_for_every_policy_and_shape(scenario_file, shape):
    path = scenario_file(systems=ALL_SYSTEMS, **SHAPES[shape])
    for i in range(len(ALL_SYSTEMS)):
        row, _ = simulate(path, i, quick=True)  # simulate() runs check_invariants
        assert row["steps"] > 0
        if shape.endswith(("tight-kv-preemption", "tight-kv")) and ALL_SYSTEMS[i] == "dspark":
            assert row["preemptions"] > 0, "the tight cache must force recompute preemptions"


def test_same_seed_same_numbers_and_different_seed_differs(scenario_file):
    path = scenario_file(systems=["dspark", "goodput-k"], frontier={"concurrency": [16]})
    a, sim_a = simulate(path, 0, seed=3)
    b, sim_b = simulate(path, 0, seed=3)
    c, _ = simulate(path, 0, seed=4)
    for key in a:
        if key != "wall_seconds":
            assert a[key] == b[key] or (a[key] != a[key] and b[key] != b[key]), key
    for col, vals in sim_a.steps.frame().items():
        assert np.array_equal(vals, sim_b.steps.frame()[col]), col
    assert a["throughput_per_gpu"] != c["throughput_per_gpu"]


def test_systems_at_one_load_point_share_the_workload(scenario_file):
    path = scenario_file(systems=["mtp-1", "dspark"], frontier=None,
                         traffic={"kind": "poisson", "rate": 20.0})
    _, a = simulate(path, 0, concurrency=None)
    _, b = simulate(path, 1, concurrency=None)
    ra, rb = a.requests.frame(), b.requests.frame()
    assert np.array_equal(ra["arrival"], rb["arrival"]) and np.array_equal(ra["prompt"], rb["prompt"])


def test_oracle_bounds_dspark_and_dspark_beats_static7_under_load(scenario_file):
    path = scenario_file(systems=["oracle", "dspark", "static-7"], frontier={"concurrency": [120]},
                         engine={"max_running": 128, "max_batch_tokens": 8192},
                         workload={"prompt": 256, "output": 512}, run={"duration_s": 12.0, "warmup_s": 2.0})
    oracle, _ = simulate(path, "oracle")
    dspark, _ = simulate(path, "dspark")
    static7, _ = simulate(path, "static-7")
    assert oracle["throughput_per_gpu"] > dspark["throughput_per_gpu"]
    assert dspark["throughput_per_gpu"] > static7["throughput_per_gpu"]
    assert dspark["mean_verify_budget"] < static7["mean_verify_budget"]


def test_dspark_budget_falls_with_load(scenario_file):
    path = scenario_file(systems=["dspark"], frontier={"concurrency": [4, 120]},
                         engine={"max_running": 128, "max_batch_tokens": 8192}, workload={"output": 512})
    low, _ = simulate(path, concurrency=4)
    high, _ = simulate(path, concurrency=120)
    assert low["mean_verify_budget"] > high["mean_verify_budget"] + 0.5


class ReturnsTooLong(Policy):
    """A researcher's policy with a bug: it ignores view.max_lengths."""

    def choose(self, view):
        return np.full(view.remaining.shape[0], view.gamma + 1)


class ReturnsFloats(ReturnsTooLong):
    def choose(self, view):
        return np.full(view.remaining.shape[0], 0.5)


@pytest.mark.parametrize(("cls", "match"), [("ReturnsTooLong", r"outside 0\.\.\d"), ("ReturnsFloats", "integer")])
def test_custom_policy_with_invalid_lengths_gets_a_clear_error(scenario_file, cls, match):
    path = scenario_file(systems=[{"name": "mine", "policy": f"tests.simulator.test_engine:{cls}"}])
    with pytest.raises(PolicyError, match=rf"policy 'mine'.*{match}"):
        simulate(path)


def test_custom_policy_from_module_path_runs(scenario_file, examples_on_path):
    """HalfBlock verifies l = min(ceil(0.5 x 7), remaining - 1) = min(4, remaining - 1). With nothing ever accepted
    (alpha 0) every request-step emits one token, so each 64-token request decodes its remaining 63 tokens in 63
    steps of budgets 5 (remaining 63..5), then 4, 3, 2, 1: a mean of (59 x 5 + 10) / 63 = 4.841 per request-step
    (the window cuts the users' lock-step cycles at its edges: 0.1% off)."""
    path = scenario_file(systems=[{"name": "half", "policy": "half_block:HalfBlock"}],
                         acceptance={"source": "geometric_source:GeometricSource", "options": {"alpha": 0.0}})
    row, _ = simulate(path)
    assert row["tau"] == 1.0
    assert row["mean_verify_budget"] == pytest.approx((59 * 5 + 4 + 3 + 2 + 1) / 63, rel=0.002)


def test_disaggregated_prefill_moves_prefill_off_the_decode_replica(scenario_file):
    path = scenario_file(systems=["mtp-1"], workload={"prompt": 2000, "output": 200},
                         frontier={"concurrency": [32]}, engine={"max_running": 64, "max_batch_tokens": 8192})
    colo, sim_c = simulate(path)
    disagg, sim_d = simulate(path, sets=("engine.prefill=disaggregated",))
    assert sim_c.steps.frame()["prefill_tokens"].sum() > 0
    assert sim_d.steps.frame()["prefill_tokens"].sum() == 0  # no preemption here: nothing recomputed locally
    assert disagg["throughput_per_gpu"] > 1.2 * colo["throughput_per_gpu"]
    assert disagg["tps_per_user"] > colo["tps_per_user"]


def test_sliding_window_drafter_reads_at_most_its_window():
    from hw_profile.tables.step_table import StepTimeGrid
    from simulator.core.drafters import DRAFTER_KINDS, DraftCost

    b = np.array([1.0, 1e4, 1.0, 1e4])
    k = np.array([0.0, 0.0, 1e6, 1e6])
    grid = StepTimeGrid.from_points(b, k, 1.0 + 0.001 * b + 0.00001 * k)
    full = DraftCost(DRAFTER_KINDS["dspark"], grid)
    windowed = DraftCost(DRAFTER_KINDS["dspark"], grid, attention_window=128)
    rows, gamma, kv = 10, 5, 40_000.0
    assert windowed.ms(rows, gamma, kv) == pytest.approx(1.0 + 0.001 * 50 + 0.00001 * 1280)
    assert full.ms(rows, gamma, kv) == pytest.approx(1.0 + 0.001 * 50 + 0.00001 * kv)


def test_a_drafters_passes_are_corrected_for_the_tokens_per_request_they_compute():
    """A drafter table priced at 2 tokens per request: an autoregressive drafter's passes compute 1 each (less),
    a parallel drafter's one pass the whole block (more); a windowed drafter over its window only."""
    from dataclasses import replace

    from hw_profile.tables.step_table import StepTimeGrid, VerifyAttention
    from simulator.core.drafters import DRAFTER_KINDS, DraftCost

    grid = StepTimeGrid.from_points(np.array([1.0, 1e4]), np.array([0.0, 1e6]), np.ones(2))
    charged = replace(grid, verify=VerifyAttention(2.0, 1.0, 4.0))
    rows, gamma, kv = 10, 5, 40_000.0
    # eagle3: gamma passes of one token a request: each saves kv x (max(1, 4) - max(1, 8)) ns
    assert DraftCost(DRAFTER_KINDS["eagle3"], charged).ms(rows, gamma, kv) == pytest.approx(
        gamma * (1.0 + kv * (4.0 - 8.0) * 1e-6))
    # dspark: one pass over gamma tokens a request
    assert DraftCost(DRAFTER_KINDS["dspark"], charged).ms(rows, gamma, kv) == pytest.approx(
        1.0 + kv * (4.0 * gamma - 8.0) * 1e-6)
    windowed = DraftCost(DRAFTER_KINDS["dspark"], charged, attention_window=128)
    assert windowed.ms(rows, gamma, kv) == pytest.approx(1.0 + rows * 128 * (4.0 * gamma - 8.0) * 1e-6)
    # without the block, the table alone
    assert DraftCost(DRAFTER_KINDS["dspark"], grid).ms(rows, gamma, kv) == 1.0


def test_an_autoregressive_drafters_first_pass_takes_in_the_last_steps_target_tokens_but_not_their_head():
    """EAGLE-3 and MTP-k (vLLM's proposer): gamma passes of one token a request, the first over every token the
    target processed in the step before, whose extra tokens pay the table's per-token cost less the head's share; a
    parallel drafter and a step after no more tokens than rows are unchanged."""
    from hw_profile.tables.step_table import StepTimeGrid
    from simulator.core.drafters import DRAFTER_KINDS, DraftCost

    b = np.array([1.0, 1e4, 1.0, 1e4])
    k = np.array([0.0, 0.0, 1e6, 1e6])
    grid = StepTimeGrid.from_points(b, k, 1.0 + 0.001 * b)  # 1 ms a pass plus 1 us a token
    rows, gamma, kv = 10, 3, 40_000.0
    for name, g in (("eagle3", gamma), ("mtp", 1), ("mtp", gamma)):
        share = 0.25 if name == "eagle3" else 1.0
        cost = DraftCost(DRAFTER_KINDS[name], grid, first_pass_share=share)
        one = 1.0 + 0.001 * rows
        assert cost.ms(rows, g, kv) == pytest.approx(g * one)
        assert cost.ms(rows, g, kv, fed=rows) == pytest.approx(g * one)
        assert cost.ms(rows, g, kv, fed=250) == pytest.approx(g * one + 0.001 * 240 * share)
    dspark = DraftCost(DRAFTER_KINDS["dspark"], grid, first_pass_share=0.25)
    assert dspark.ms(rows, gamma, kv, fed=250) == dspark.ms(rows, gamma, kv)
    # EAGLE-3's fusion projection: over every token the first pass takes in, a pass's cost there without context
    # (the grid prices none here) scaled by its share of a pass's weights
    fused = DraftCost(DRAFTER_KINDS["eagle3"], grid, first_pass_share=0.25, fusion_share=0.2)
    one = 1.0 + 0.001 * rows
    assert fused.ms(rows, gamma, kv) == pytest.approx(gamma * one + 0.2 * one)
    assert fused.ms(rows, gamma, kv, fed=250) == pytest.approx(
        gamma * one + 0.001 * 240 * 0.25 + 0.2 * (1.0 + 0.001 * 250))
    # DFlash's, a parallel drafter's: its block pass (gamma + 1 tokens a request) and the fusion over what it took in
    dflash = DraftCost(DRAFTER_KINDS["dflash"], grid, fusion_share=0.1)
    block = 1.0 + 0.001 * rows * (gamma + 1)
    assert dflash.ms(rows, gamma, kv, fed=250) == pytest.approx(block + 0.1 * (1.0 + 0.001 * 250))
    assert dflash.ms(rows, gamma, kv) == pytest.approx(block + 0.1 * one)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_each_mtp_step_drafts_over_the_tokens_the_step_before_took_in(scenario_file, tmp_path, engine):
    """In a run, MTP-1's draft cost each step is its table's pass at the decoding rows plus, less the head's share,
    what taking in the previous step's tokens adds (the first step after none: one a request): every token the
    target processed on vLLM's table, the accepted ones and prompt chunks on SGLang's."""
    import json
    import shutil

    from tests.conftest import H200_TABLE

    table = tmp_path / "t.csv"
    shutil.copy(H200_TABLE, table)
    meta = json.loads(H200_TABLE.with_suffix(".json").read_text())
    meta["engine_costs"] = {"engine": engine}
    for entry in meta["drafter_tables"].values():
        entry["table"] = str(H200_TABLE.parent / entry["table"])
    table.with_suffix(".json").write_text(json.dumps(meta))
    path = scenario_file(systems=["mtp-1"], workload={"output": 256}, frontier={"concurrency": [48]},
                         hardware={"table": str(table)},
                         engine={"max_running": 64, "max_batch_tokens": 8192, "prefill": "colocated"})
    _, sim = simulate(path, "mtp-1")
    st = sim.steps.frame()
    cost = sim.prices.draft
    assert 0.0 < cost.first_pass_share < 1.0  # the bundled MTP table records its shape: a layer under its head
    took = st["batch_tokens"] if engine == "vllm" else st["accepted"] + st["decoding"] + st["prefill_tokens"]
    assert cost.takes_in == {"vllm": "processed", "sglang": "accepted"}[engine]
    fed = np.concatenate([[0], np.asarray(took)[:-1]])
    expect = [cost.ms(int(r), 1, float(k), int(f)) for r, k, f in zip(st["decoding"], st["kv_tokens"], fed,
                                                                       strict=True)]
    np.testing.assert_allclose(st["draft_ms"], expect, rtol=1e-12)
    # never less than a pass at the rows; more after a step of prompt chunks (the drafter takes in the prompts)
    base = np.array([cost.ms(int(r), 1, float(k)) for r, k in zip(st["decoding"], st["kv_tokens"], strict=True)])
    assert np.all(st["draft_ms"] >= base) and np.any((st["draft_ms"] > base + 1.0) & (fed > 1000))


def test_the_first_pass_leaves_out_the_drafters_head_by_its_shape():
    """The share a first pass's extra tokens pay is the drafter's matrix work outside its head, from the shape its
    table records: one Qwen3-8B layer under a 32,000-token head for EAGLE-3; all of it without a recorded shape."""
    from hw_profile.hardware.shapes import drafter_shape, get_shape
    from hw_profile.tables.sidecar import Sidecar

    def first_pass_share(meta):
        return Sidecar.of(meta).drafter.first_pass_share

    q8 = get_shape("qwen3-8b")
    eagle3 = drafter_shape(q8, 1, vocab=32_000)
    layer = q8.attn_params_per_layer + q8.mlp_params_per_layer
    assert first_pass_share({"model_shape": eagle3.to_dict()}) == pytest.approx(layer / (layer + 4096 * 32_000))
    assert first_pass_share({}) == 1.0
    # a drafter calibrated as a share of its target keeps the fit's rule: one token a request
    assert first_pass_share({"model_shape": eagle3.to_dict(), "calibration": {"draft_share": {"layers": 43}}}) == 0


def test_the_fusion_of_the_targets_states_is_priced_by_its_share_of_a_pass():
    """The estimate's EAGLE-3 shape fuses three target layers' states (3 x 4096 x 4096 weights for Qwen3-8B) over
    a pass whose q, k and v read two hidden widths; DFlash's fuses five and projects the feature's K and V in its
    five layers: the shares their sidecars give the simulator, by hand; none for a drafter without a projection or
    calibrated as a share of its target."""
    from hw_profile.estimate.estimate import drafter_shapes
    from hw_profile.hardware.shapes import get_shape
    from hw_profile.tables.sidecar import Sidecar

    def fusion_share(meta):
        return Sidecar.of(meta).drafter.fusion_share

    q8 = get_shape("qwen3-8b")
    eagle3 = drafter_shapes(q8, ["eagle3"])["eagle3"][0]
    qkv = (q8.heads + 2 * q8.kv_heads) * q8.head_dim
    a_pass = q8.attn_params_per_layer + 4096 * qkv + q8.mlp_params_per_layer + 4096 * 32_000
    assert eagle3.fusion_params == 3 * 4096 * 4096
    assert fusion_share({"model_shape": eagle3.to_dict()}) == pytest.approx(3 * 4096 * 4096 / a_pass)
    assert fusion_share({"model_shape": eagle3.to_dict()}) == pytest.approx(0.14, abs=0.01)  # docs/hw-profile.md
    assert fusion_share({"model_shape": q8.to_dict()}) == 0.0 and fusion_share({}) == 0.0
    # DFlash: five target states fused, then each of its five layers' K and V of that feature, over a pass of five
    # layers and the target's head
    dflash = drafter_shapes(q8, ["dflash"])["dflash"][0]
    kv = 2 * 8 * 128
    assert dflash.fusion_params == 5 * 4096 * 4096 + 5 * 4096 * kv
    five = 5 * (q8.attn_params_per_layer + q8.mlp_params_per_layer) + q8.head_params
    assert fusion_share({"model_shape": dflash.to_dict()}) == pytest.approx(dflash.fusion_params / five)
    assert fusion_share({"model_shape": eagle3.to_dict(), "calibration": {"draft_share": {"layers": 43}}}) == 0.0


def test_policy_table_steers_the_policy_while_the_clock_keeps_the_raw_table(scenario_file, tmp_path):
    from hw_profile.tables.step_table import StepTable

    # a policy table in which verification is free: every B costs the same 1 ms
    flat = StepTable.from_points([{"batch_tokens": b, "kv_tokens": k, "status": "ok", "step_ms": 1.0}
                                  for b in (1, 100_000) for k in (0, 10_000_000)])
    flat_path = flat.write(tmp_path / "flat.csv")
    fields = {"systems": ["dspark"], "frontier": {"concurrency": [120]}, "workload": {"output": 512},
              "engine": {"max_running": 128, "max_batch_tokens": 8192, "prefill": "disaggregated"}}
    raw, sim_raw = simulate(scenario_file(name="raw", **fields))
    steered, sim_flat = simulate(scenario_file(name="flat", hardware={"policy_table": str(flat_path)}, **fields))
    assert steered["mean_verify_budget"] > 7.5 > raw["mean_verify_budget"] + 1.0  # verifies (nearly) everything
    for sim in (sim_raw, sim_flat):  # the clock: draft + stall + T(B, K) from the raw table, never the policy's
        st = sim.steps.frame()
        forward = st["step_ms"] - st["draft_ms"] - sim.config.stall_ms
        expect = np.array([sim.prices.clock.lookup(b, k) for b, k in zip(st["batch_tokens"], st["kv_tokens"], strict=True)])
        assert np.allclose(forward, expect)


@pytest.mark.slow
def test_the_clock_and_the_policy_pay_for_tokens_per_request_beyond_what_the_table_priced(scenario_file, tmp_path):
    """A table whose sidecar says it priced verification's attention at 2 tokens per request (MTP-1's budget): a
    step verifying q per request over K KV tokens pays K x (max(A, C q) - max(A, C 2)) ns more, in the clock and in
    what the greedy prices. On a flat table that makes verification free, the greedy verifies nearly everything;
    once each verified token's attention is charged, far less."""
    from hw_profile.tables.step_table import StepTable
    from tests.conftest import H200_TABLE

    # the drafters' tables of the default scenario's table, named from this one's sidecar
    drafters = StepTable.read(H200_TABLE).meta["drafter_tables"]
    drafters = {name: {**entry, "table": str(H200_TABLE.parent / entry["table"])} for name, entry in drafters.items()}

    def table(name, verify):
        meta = {"drafter_tables": drafters, **({"verify_attention": verify} if verify else {})}
        t = StepTable.from_points([{"batch_tokens": b, "kv_tokens": k, "status": "ok", "step_ms": 1.0}
                                   for b in (1, 100_000) for k in (0, 10_000_000)], meta)
        return str(t.write(tmp_path / f"{name}.csv"))

    charged = {"tokens_per_request": 2.0, "ns_per_kv_token": 5.0, "ns_per_query_kv": 20.0}
    fields = {"systems": ["dspark", "static-3"], "frontier": {"concurrency": [64]}, "workload": {"output": 512},
              "engine": {"max_running": 64, "max_batch_tokens": 8192, "prefill": "disaggregated",
                         "kv_capacity_tokens": 2_000_000}}
    free, _ = simulate(scenario_file(name="free", hardware={"table": table("free", None)}, **fields), "dspark")
    paid, _ = simulate(scenario_file(name="paid", hardware={"table": table("paid", charged)}, **fields), "dspark")
    assert free["mean_verify_budget"] > 7.5 and paid["mean_verify_budget"] < free["mean_verify_budget"] - 2.0
    _, sim = simulate(scenario_file(name="paid3", hardware={"table": table("paid3", charged)}, **fields), "static-3")
    st = sim.steps.frame()
    decoding = np.asarray(st["decoding"]) > 0
    forward = np.asarray(st["step_ms"] - st["draft_ms"])[decoding]  # a static policy pays no scheduling stall
    b, k, rows = (np.asarray(st[c], dtype=float)[decoding] for c in ("batch_tokens", "kv_tokens", "decoding"))
    q = np.maximum(b / rows, 1.0)
    expect = 1.0 + k * (np.maximum(5.0, 20.0 * q) - np.maximum(5.0, 20.0 * np.minimum(b, 2.0))) * 1e-6
    assert np.allclose(forward, expect, rtol=1e-9)
    assert (q > 2.0).mean() > 0.9 and np.all(forward[q > 2.0] > 1.0)  # static-3 verifies 4 a request: it pays
