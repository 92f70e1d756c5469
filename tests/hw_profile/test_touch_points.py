"""The touch points of docs/hw-profile.md ("Touch points"), each done once the way the page says: a GPU from its
datasheet alone, a model shape from its config, a serving engine's costs, a kernel source. (A model family and a
drafter table have their own tests: tests/hw_profile/test_v4_shapes.py and test_drafter_tables.py.)"""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from hw_profile.cli import main
from hw_profile.estimate.engine_costs import DEFAULTS, EngineCosts, engine_defaults
from hw_profile.estimate.estimate import Deployment, estimate_points, kernel_floor_ms, kernel_twin
from hw_profile.hardware.gpus import GPUS, get_gpu
from hw_profile.hardware.shapes import get_shape, shape_from_config
from hw_profile.kernels.database import KernelTimes, coverage, covers
from hw_profile.kernels.source import MeasuredKernels
from hw_profile.tables.step_table import StepTable
from tests.hw_profile.test_kernel_db import TINY, db  # noqa: F401 (db: the written kernel database, a fixture)

needs_kernel_db = pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                                     reason="needs the kernels extra (aiconfigurator-core)")

B = np.array([1.0, 8.0, 64.0, 256.0])
K = B * 2048.0


def datasheet(name: str, like: str, **changes) -> dict:
    """A device file's fields: ``like``'s datasheet under another name, with ``changes``."""
    return {**GPUS[like].to_dict(), "name": name, **changes}


@needs_kernel_db
def test_a_gpu_added_from_its_datasheet_alone_is_priced_with_its_twins_measured_kernels(tmp_path):
    """A part the kernel database lacks but whose datasheet a covered GPU shares needs no code: its device file is
    enough, and the estimate takes the twin's measured kernels (here the H200's under vLLM), to the bit."""
    device = tmp_path / "h200-oem.json"
    device.write_text(json.dumps(datasheet("H200-OEM", "H200")))
    assert kernel_twin(get_gpu(str(device)), "vllm") == GPUS["H200"]
    for gpu, out in ((str(device), tmp_path / "oem.csv"), ("H200", tmp_path / "h200.csv")):
        main(["estimate", "--model", "qwen3-8b", "--gpu", gpu, "--engine", "vllm", "--drafters", "", "--out", str(out)])
    oem, h200 = StepTable.read(tmp_path / "oem.csv"), StepTable.read(tmp_path / "h200.csv")
    assert len(oem.points) == len(h200.points) > 100
    np.testing.assert_allclose(oem.points["step_ms"], h200.points["step_ms"], rtol=1e-5)  # as written
    assert set(oem.points["source"]) == {"kernels:H200"} and set(h200.points["source"]) == {"kernels"}


def test_a_gpu_the_database_measures_is_its_datasheet_entry_alone(db, monkeypatch):  # noqa: F811 (the fixture)
    """A part the kernel database measures needs only its ``GPUS`` entry, naming the database's system folder: the
    database then covers it and the estimate prices it from that folder's kernels. Here a new part "X9" whose
    folder holds the written H200 data: covered, and priced to the bit as the H200 is from the same rows."""
    shutil.copytree(db / "h200_sxm", db / "x9_sxm")
    monkeypatch.setitem(GPUS, "X9", replace(GPUS["H200"], name="X9", kernel_db_system="x9_sxm"))
    assert ("X9", "vllm", "0.24.0") in coverage(db) and covers("x9", "vllm", db)
    source = MeasuredKernels(data_dir=db)
    x9, h200 = (estimate_points(TINY, Deployment(GPUS[name], costs=engine_defaults("vllm")), B, K, source=source)
                for name in ("X9", "H200"))
    assert set(x9.source) == {"kernels"} and "x9_sxm / vllm 0.24.0" in x9.sources[0]
    np.testing.assert_array_equal(x9.ms, h200.ms)


def test_a_gpu_the_database_cannot_stand_for_is_priced_by_its_own_datasheet(tmp_path):
    """A part with a datasheet of its own (twice the H200's memory bandwidth) gets the kernel-level roofline: every
    step is faster than the H200's roofline, a single stream's weight reads (memory-bound) take half the time beyond
    the kernels' fixed latency, and the engine's costs are the same."""
    fast = get_gpu(_device(tmp_path, datasheet("H200-2X", "H200", hbm_tb_s=9.6)))
    assert kernel_twin(fast, "vllm") is None
    shape = get_shape("qwen3-8b")
    costs = engine_defaults("vllm")
    mine = estimate_points(shape, Deployment(fast, costs=costs), B, K, kernels="roofline")
    h200 = estimate_points(shape, Deployment(GPUS["H200"], costs=costs), B, K, kernels="roofline")
    assert (mine.ms < h200.ms).all() and set(mine.source) == {"roofline"}
    np.testing.assert_allclose(mine.parts["fixed"], h200.parts["fixed"])
    floor = kernel_floor_ms(shape)["gemm"]
    np.testing.assert_allclose(mine.parts["gemm"][0] - floor, (h200.parts["gemm"][0] - floor) / 2, rtol=1e-12)


def _device(tmp_path, fields: dict) -> str:
    path = tmp_path / f"{fields['name']}.json"
    path.write_text(json.dumps(fields))
    return str(path)


QWEN3_8B_CONFIG = {  # the fields of Qwen/Qwen3-8B's config.json a shape reads
    "model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
    "tie_word_embeddings": False,
}


def test_a_model_shape_from_its_config_prices_as_the_librarys_own():
    """A config.json is all a model of a known family needs: read as a shape it prices exactly as the library's
    entry for the same model, and a deeper variant pays per layer (attention twice over at twice the layers, the
    head once)."""
    dep = Deployment(GPUS["H200"], costs=engine_defaults("vllm"))
    mine = estimate_points(shape_from_config(QWEN3_8B_CONFIG, name="my-qwen3"), dep, B, K, kernels="roofline")
    ours = estimate_points(get_shape("qwen3-8b"), dep, B, K, kernels="roofline")
    np.testing.assert_allclose(mine.ms, ours.ms, rtol=1e-12)
    deep = estimate_points(shape_from_config({**QWEN3_8B_CONFIG, "num_hidden_layers": 72}, name="deep"), dep, B, K,
                           kernels="roofline")
    np.testing.assert_allclose(deep.parts["attention"], 2 * ours.parts["attention"], rtol=1e-12)
    np.testing.assert_allclose(deep.parts["lm_head"], ours.parts["lm_head"], rtol=1e-12)


def test_a_serving_engine_is_its_costs(monkeypatch):
    """A serving engine the estimate prices is an ``EngineCosts`` entry in ``DEFAULTS``: one with TensorRT-LLM's
    graphs and 1 ms more of host time a step costs exactly 1 ms more a step at every point."""
    mine = EngineCosts("my-engine", step_fixed_ms=DEFAULTS["trtllm"].step_fixed_ms + 1.0,
                       graph_max_batch=DEFAULTS["trtllm"].graph_max_batch)
    monkeypatch.setitem(DEFAULTS, "my-engine", mine)
    assert engine_defaults("MY-ENGINE") is mine
    shape = get_shape("qwen3-8b")
    ours = estimate_points(shape, Deployment(GPUS["H200"], engine="trtllm", costs=engine_defaults("trtllm")), B, K,
                           kernels="roofline")
    theirs = estimate_points(shape, Deployment(GPUS["H200"], engine="my-engine", costs=engine_defaults("my-engine")),
                             B, K, kernels="roofline")
    np.testing.assert_allclose(theirs.ms - ours.ms, 1.0, rtol=1e-12)


class HalvedKernels:
    """A kernel source of its own: another source's kernels at half their time (a faster kernel library, say)."""

    def __init__(self, inner):
        self.inner = inner

    def _half(self, kt: KernelTimes | None) -> KernelTimes | None:
        if kt is None:
            return None
        return replace(kt, ms=kt.ms / 2, parts={k: v / 2 for k, v in kt.parts.items()}, source=f"half of {kt.source}")

    def step_times(self, *args, **kwargs):
        return self._half(self.inner.step_times(*args, **kwargs))

    def moe_times(self, *args, **kwargs):
        return self._half(self.inner.moe_times(*args, **kwargs))

    def exchange_times(self, *args, **kwargs):
        return self._half(self.inner.exchange_times(*args, **kwargs))

    def gemm_times(self, *args, **kwargs):
        return self._half(self.inner.gemm_times(*args, **kwargs))


@needs_kernel_db
def test_a_kernel_source_plugs_into_the_estimate():
    """Anything with the four methods of ``KernelSource`` prices the kernels of an estimate (``source=``): the
    database itself passed explicitly is what the estimate picks on its own, and a source of half its times halves
    every kernel part and leaves the engine's parts alone."""
    shape = get_shape("qwen3-8b")
    dep = Deployment(GPUS["H200"], costs=engine_defaults("vllm"))
    auto = estimate_points(shape, dep, B, K)
    explicit = estimate_points(shape, dep, B, K, source=MeasuredKernels())
    np.testing.assert_array_equal(explicit.ms, auto.ms)
    half = estimate_points(shape, dep, B, K, source=HalvedKernels(MeasuredKernels()))
    assert half.sources == [f"half of {auto.sources[0]}"] and set(half.source) == {"kernels"}
    for part in ("gemm", "attention", "lm_head"):
        np.testing.assert_allclose(half.parts[part], auto.parts[part] / 2, rtol=1e-12)
    for part in ("fixed", "sampling"):
        np.testing.assert_allclose(half.parts[part], auto.parts[part], rtol=1e-12)


def test_the_touch_points_table_names_files_and_tests_that_exist():
    """docs/hw-profile.md's touch-point table: every file it says to edit exists (hw_profile's paths relative to
    the package), and every example test it names is a test function in that file."""
    import ast
    import re

    from tests.conftest import ROOT

    page = (ROOT / "docs" / "hw-profile.md").read_text()
    rows = [line for line in page.split("## Touch points", 1)[1].splitlines() if line.startswith("| a ")]
    assert len(rows) >= 7
    for row in rows:
        _, edit, example = row.strip("|").split("|")
        for path in re.findall(r"`([\w/]+\.py)`", edit):
            assert (ROOT / "hw_profile" / path).is_file() or (ROOT / path).is_file(), (row, path)
        for path, name in re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", example):
            tree = ast.parse((ROOT / path).read_text())
            tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
            assert tests and (not name or name in tests), (row, path, name)
