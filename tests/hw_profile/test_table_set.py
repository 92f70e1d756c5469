"""The table set: one writer and one reader for the target's table, the drafters' beside it and the memory facts,
on the on-disk form every table has always had."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hw_profile.estimate.estimate import Deployment, estimate_table, write_estimate_set
from hw_profile.hardware.dtypes import kv_cache_bytes
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import get_shape
from hw_profile.tables.sidecar import MEMORY_KEYS, RUNTIME_BYTES_PER_GPU, SCHEMA_VERSION, Sidecar, upgrade
from hw_profile.tables.step_table import StepTable, TableError
from hw_profile.tables.table_set import TableSet

ROOT = Path(__file__).resolve().parents[2]
AXES = {"b_axis": np.array([1, 64, 512]), "k_axis": np.array([0, 65536])}


@pytest.fixture(scope="module")
def estimated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("set") / "h200.csv"
    dep = Deployment(gpu=get_gpu("H200"), gpus=1, ep=1, dtype="bf16", parallel="tp", engine="vllm")
    write_estimate_set(get_shape("qwen3-8b"), dep, out, ["mtp", "dspark"], kernels="roofline", **AXES)
    return out


def test_a_written_set_reads_back_whole(estimated, tmp_path):
    tables = TableSet.read(estimated)
    assert sorted(tables.drafters) == ["dspark", "mtp"]
    assert tables.drafters["dspark"].sequential_head["per_position_ms"] > 0  # the Markov head's cost
    assert tables.drafters["mtp"].sequential_head == {}
    assert tables.cuda_graphs is not None and tables.verify_attention is not None
    written = tables.write(tmp_path / "copy.csv")
    assert sorted(p.name for p in written[:-1]) == ["copy.drafter-dspark.csv", "copy.drafter-mtp.csv"]
    assert written[-1].name == "copy.csv"  # the target last, its sidecar naming the drafters
    again = TableSet.read(tmp_path / "copy.csv")
    for name, drafter in tables.drafters.items():
        assert again.drafters[name].table.points.equals(drafter.table.points)
        assert again.drafters[name].sequential_head == drafter.sequential_head
    sidecar = json.loads((tmp_path / "copy.json").read_text())["drafter_tables"]
    assert sidecar["mtp"] == {"table": "copy.drafter-mtp.csv"}


def test_a_table_written_before_sets_still_loads_as_a_set_of_one():
    path = ROOT / "scenarios" / "hardware" / "h200-qwen3-8b-bf16.csv"  # a roofline bound, no drafters named
    tables = TableSet.read(path)
    assert tables.target.path == path and tables.cuda_graphs is None
    meta = {k: v for k, v in tables.target.meta.items()
            if k not in (*MEMORY_KEYS, "schema_version", "device_memory_gb")}
    old = Sidecar.of(meta).memory  # a sidecar from before tables recorded their memory facts, read as priced
    shape = get_shape("qwen3-8b")
    assert old.kv_bytes_per_token_per_gpu == shape.kv_cache_facts(2.0, 1, 1)["kv_bytes_per_token_per_gpu"]
    assert old.weight_bytes_per_gpu == shape.total_params * 2.0
    assert old.device_memory_gb == 141  # the datasheet block's
    assert Sidecar.of({"gpu": {}}).memory is None


def test_a_missing_or_malformed_drafter_entry_names_it(estimated, tmp_path):
    tables = TableSet.read(estimated)
    tables.write(tmp_path / "t.csv")
    side = tmp_path / "t.json"
    meta = json.loads(side.read_text())
    meta["drafter_tables"]["mtp"] = {"table": "gone.csv"}
    side.write_text(json.dumps(meta))
    with pytest.raises(TableError, match=r"drafter_tables\.mtp.*gone\.csv"):
        TableSet.read(tmp_path / "t.csv")
    meta["drafter_tables"]["mtp"] = "t.drafter-mtp.csv"
    side.write_text(json.dumps(meta))
    with pytest.raises(TableError, match=r"drafter_tables\.mtp: expected an object"):
        TableSet.read(tmp_path / "t.csv")


def test_the_kv_pool_is_memory_less_weights_activations_and_runtime_over_bytes_per_token(estimated):
    meta = StepTable.read(estimated).meta
    facts = TableSet.read(estimated).memory
    shape = get_shape("qwen3-8b")
    per_token = shape.kv_cache_facts(kv_cache_bytes(shape), 1, 1)["kv_bytes_per_token_per_gpu"]
    assert facts.kv_bytes_per_token_per_gpu == per_token
    # one layer's activations at 16 bits per batch token, fp32 logits and probabilities per running request
    peak = 8192 * (shape.hidden * 4 + shape.intermediate * 3) * 2 + 256 * shape.vocab * 8
    assert facts.activation_peak_bytes(8192, 256) == peak
    free = 139.8 * 2**30 * 0.9 - meta["weight_bytes_per_gpu"] - peak - RUNTIME_BYTES_PER_GPU  # as the H200 reports
    assert facts.kv_capacity(0.9, 8192, 256) == int(free / per_token)
    assert facts.kv_capacity(0.05) is None  # the weights alone exceed 5% of the memory


def test_the_set_measured_on_an_h200_reads_whole_and_sizes_its_pool_from_the_memory_it_reported():
    """scenarios/hardware/h200-qwen3-8b-bf16-measured: hw-profile sps on a lent H200 (target, one- and five-layer
    drafters, DSpark's heads timed there). Its sidecar has no datasheet ``gpu`` block: the pool is sized from the
    memory torch reported for the device, with the weights in bf16 and the cache the table measured."""
    path = Path(__file__).resolve().parents[2] / "scenarios" / "hardware" / "h200-qwen3-8b-bf16-measured.csv"
    tables = TableSet.read(path)
    assert set(tables.drafters) == {"mtp", "dspark", "dflash"}
    assert tables.drafters["dspark"].sequential_head["rank"] == 256 and not tables.drafters["mtp"].sequential_head
    assert tables.drafters["dspark"].table.meta["model_shape"]["layers"] == 5
    meta = tables.target.meta
    assert meta["device"] == "NVIDIA H200" and tables.deployment.datasheet.name == "H200"
    facts = tables.memory
    shape = get_shape("qwen3-8b")
    assert facts.device_memory_gb == meta["device_memory_gb"] > tables.deployment.datasheet.memory_gb  # as reported
    assert facts.kv_bytes_per_token_per_gpu == shape.kv_bytes_per_token  # bf16: 2 bytes a value
    free = (meta["device_memory_gb"] * 1e9 * 0.9 - shape.total_params * 2.0 - facts.activation_peak_bytes(8192, 256)
            - RUNTIME_BYTES_PER_GPU)
    assert facts.kv_capacity(0.9, 8192, 256) == int(free / shape.kv_bytes_per_token)


def test_every_bundled_sidecar_is_at_the_schema_and_needs_no_upgrade():
    sidecars = [p.with_suffix(".json") for p in (ROOT / "scenarios" / "hardware").glob("*.csv")]
    sidecars += [p.with_suffix(".json") for p in (ROOT / "benchmarks" / "data").rglob("*.csv")
                 if p.with_suffix(".json").is_file()]
    assert len(sidecars) > 30
    for side in sidecars:
        meta = json.loads(side.read_text())
        assert meta["schema_version"] == SCHEMA_VERSION, side.name
        assert upgrade(meta) is meta, side.name  # read as written: the upgrade path is not taken
        if meta.get("model_shape"):
            assert all(k in meta for k in MEMORY_KEYS), side.name


def test_a_sidecar_from_before_the_contract_loads_through_the_upgrade_as_the_bundled_one_reads():
    old_dir = Path(__file__).parent / "data" / "schema-1"
    old_meta = json.loads((old_dir / "h200-qwen3-8b-bf16-measured.json").read_text())
    assert "schema_version" not in old_meta and "gpu" not in old_meta  # as written before this contract
    old = TableSet.read(old_dir / "h200-qwen3-8b-bf16-measured.csv")
    new = TableSet.read(ROOT / "scenarios" / "hardware" / "h200-qwen3-8b-bf16-measured.csv")
    assert old.facts.schema_version == SCHEMA_VERSION
    assert old.memory == new.memory and old.deployment == new.deployment and old.engine == new.engine
    assert old.deployment.datasheet.name == "H200"  # the device name read once, by the upgrade
    assert {n: d.facts for n, d in old.drafters.items()} == {n: d.facts for n, d in new.drafters.items()}
    assert old.memory.kv_capacity(0.9, 8192, 256) == new.memory.kv_capacity(0.9, 8192, 256)


def test_a_sidecar_from_a_newer_schema_is_refused_in_one_line(tmp_path):
    src = ROOT / "scenarios" / "hardware" / "cpu-qwen3-0.6b.csv"
    (tmp_path / "t.csv").write_bytes(src.read_bytes())
    meta = json.loads(src.with_suffix(".json").read_text())
    (tmp_path / "t.json").write_text(json.dumps({**meta, "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(TableError, match=r"t\.json: sidecar schema_version 3: .*reads versions up to 2"):
        StepTable.read(tmp_path / "t.csv")


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_a_sidecar_that_is_not_a_json_object_is_refused_alike_by_the_reader_and_the_upgrade(tmp_path, text):
    """One reader of a sidecar's JSON for the table and for `hw-profile upgrade`: the same one line, the file
    named."""
    from click.testing import CliRunner

    from hw_profile.cli import cli

    src = ROOT / "scenarios" / "hardware" / "cpu-qwen3-0.6b.csv"
    (tmp_path / "t.csv").write_bytes(src.read_bytes())
    (tmp_path / "t.json").write_text(text)
    with pytest.raises(TableError, match=r"t\.json: (not a readable sidecar|a sidecar must hold a JSON object)") as read:
        StepTable.read(tmp_path / "t.csv")
    res = CliRunner().invoke(cli, ["upgrade", str(tmp_path / "t.csv")])
    assert isinstance(res.exception, TableError) and str(res.exception) == str(read.value)


def test_a_writer_that_leaves_out_its_memory_facts_is_refused(tmp_path):
    table = StepTable.read(ROOT / "scenarios" / "hardware" / "h200-qwen3-8b-bf16.csv")
    table.meta.pop("kv_bytes_per_token_per_gpu")
    with pytest.raises(Exception, match="left out kv_bytes_per_token_per_gpu"):
        table.write(tmp_path / "t.csv")


@pytest.mark.parametrize("model, gpus", [("qwen3-8b", 1), ("qwen3-8b", 2), ("deepseek-v3", 8)])
def test_analytic_and_estimate_of_one_deployment_record_the_same_memory(model, gpus):
    """One KV-dtype rule and one weight rule for every producer: fp8 weights keep a 16-bit cache (the engines'
    kv_cache_dtype=auto), so the roofline bound and the estimate of one deployment size the same KV pool."""
    from hw_profile.kernels.roofline import analytic_table

    shape, h200 = get_shape(model), get_gpu("H200")
    dep = Deployment(gpu=h200, gpus=gpus, ep=1, dtype="fp8", parallel="tp", engine="vllm")
    axes = {"b_axis": np.array([1, 64]), "k_axis": np.array([0, 4096])}
    estimated = estimate_table(shape, dep, "e", kernels="roofline", **axes)
    bound = analytic_table(shape, h200, dtype="fp8", gpus=gpus, **axes)
    for key in (*MEMORY_KEYS, "device_memory_gb"):
        assert estimated.meta[key] == pytest.approx(bound.meta[key]), key
    assert estimated.facts.memory == bound.facts.memory
    assert bound.meta["kv_dtype"] == "bf16"
    per_gpu_heads = max(shape.kv_heads // gpus, 1) if not shape.latent_kv else None
    expect = (shape.kv_bytes_per_token if per_gpu_heads is None
              else shape.kv_bytes_per_token * per_gpu_heads / shape.kv_heads)  # 2 bytes a value, split with heads
    assert bound.facts.memory.kv_bytes_per_token_per_gpu == pytest.approx(expect)


def test_a_data_parallel_rank_records_the_same_memory_from_the_estimate_and_the_dp_ep_bound():
    from hw_profile.estimate.dp_ep import DpEpParams, dp_ep_table

    shape, h200 = get_shape("deepseek-v3"), get_gpu("H200")
    dep = Deployment(gpu=h200, gpus=8, ep=8, dtype="fp8", parallel="dp", engine="sglang")
    axes = {"b_axis": np.array([1, 64]), "k_axis": np.array([0, 4096])}
    estimated = estimate_table(shape, dep, "e", kernels="roofline", **axes)
    bound = dp_ep_table(shape, h200, dtype="fp8", params=DpEpParams(ep=8), **axes)
    assert estimated.facts.memory == bound.facts.memory
