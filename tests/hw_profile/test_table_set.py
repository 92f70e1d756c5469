"""The table set: one writer and one reader for the target's table, the drafters' beside it and the memory facts,
on the on-disk form every table has always had."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hw_profile.estimate.estimate import Deployment, write_estimate_set
from hw_profile.hardware.dtypes import kv_cache_bytes
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import get_shape
from hw_profile.tables.step_table import StepTable, TableError
from hw_profile.tables.table_set import RUNTIME_BYTES_PER_GPU, MemoryFacts, TableSet, activation_peak_bytes

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
    meta = {k: v for k, v in tables.meta.items()
            if k not in ("kv_bytes_per_token", "kv_bytes_per_token_per_gpu", "weight_bytes_per_gpu")}
    old = MemoryFacts.of(meta, 1)  # a sidecar from before tables recorded their memory facts
    shape = get_shape("qwen3-8b")
    assert old.kv_bytes_per_token_per_gpu == shape.kv_cache_facts(2.0, 1, 1)["kv_bytes_per_token_per_gpu"]
    assert old.weight_bytes_per_gpu == shape.total_params * 2.0
    assert MemoryFacts.of({"gpu": {}}, 1) is None


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
    facts = MemoryFacts.of(meta, 1)
    shape = get_shape("qwen3-8b")
    per_token = shape.kv_cache_facts(kv_cache_bytes(shape), 1, 1)["kv_bytes_per_token_per_gpu"]
    assert facts.kv_bytes_per_token_per_gpu == per_token
    free = 141e9 * 0.9 - meta["weight_bytes_per_gpu"] - activation_peak_bytes(shape, 1, 8192, 256) - RUNTIME_BYTES_PER_GPU
    assert facts.kv_capacity(1, 0.9, 8192, 256) == int(free / per_token)
    assert facts.kv_capacity(1, 0.05) is None  # the weights alone exceed 5% of the memory


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
    assert "gpu" not in meta and meta["device"] == "NVIDIA H200"
    facts = MemoryFacts.of(meta, 1)
    shape = get_shape("qwen3-8b")
    assert facts.memory_gb == meta["device_memory_gb"]
    assert facts.kv_bytes_per_token_per_gpu == shape.kv_bytes_per_token  # bf16: 2 bytes a value
    free = (meta["device_memory_gb"] * 1e9 * 0.9 - shape.total_params * 2.0 - activation_peak_bytes(shape, 1, 8192, 256)
            - RUNTIME_BYTES_PER_GPU)
    assert facts.kv_capacity(1, 0.9, 8192, 256) == int(free / shape.kv_bytes_per_token)
