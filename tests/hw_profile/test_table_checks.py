"""The table invariants T-1 ... T-4 (hw_profile/tables/checks.py), as `hw-profile check` and `simulate check` run
them: each warning from a real table written to a temporary folder (a bundled table with one point spoiled, a sidecar marked busy), and none from the
bundled tables."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hw_profile.hardware.gpus import get_gpu, named_gpu
from hw_profile.hardware.shapes import get_shape
from hw_profile.tables import checks
from hw_profile.tables.checks import DROP, table_warnings
from hw_profile.tables.sidecar import MEMORY_KEYS, Sidecar
from hw_profile.tables.step_table import StepTable
from tests.conftest import H200_TABLE, ROOT


def kv_room(meta: dict) -> float | None:
    return checks.kv_room(Sidecar.of(meta))


def roofline_bound_ms(meta: dict, b, k):
    return checks.roofline_bound_ms(Sidecar.of(meta), b, k)

HARDWARE = ROOT / "scenarios" / "hardware"
CPU_TABLE = HARDWARE / "cpu-qwen3-0.6b.csv"


def copy_table(src: Path, dst: Path, edit_rows=None, edit_meta=None) -> Path:
    """The table ``src`` (CSV and sidecar) written to ``dst``, its rows and sidecar edited in place first."""
    rows = pd.read_csv(src)
    meta = json.loads(src.with_suffix(".json").read_text())
    if edit_rows is not None:
        edit_rows(rows)
    if edit_meta is not None:
        edit_meta(meta)
    rows.to_csv(dst, index=False)
    dst.with_suffix(".json").write_text(json.dumps(meta))
    return dst


def at(rows: pd.DataFrame, b: int, k: int) -> pd.Series:
    sel = (rows["batch_tokens"] == b) & (rows["kv_tokens"] == k)
    assert sel.sum() == 1
    return sel


def targets_of_drafters() -> dict[str, dict]:
    """Each bundled drafter table's name -> the sidecar of the target table that names it."""
    out = {}
    for sidecar in HARDWARE.glob("*.json"):
        meta = json.loads(sidecar.read_text())
        for entry in (meta.get("drafter_tables") or {}).values():
            if isinstance(entry, dict) and "table" in entry:
                out[entry["table"]] = meta
    return out


@pytest.mark.parametrize("csv", sorted(HARDWARE.glob("*.csv")), ids=lambda p: p.name)
def test_the_bundled_tables_give_no_warning(csv):
    # a drafter's context is its target's: the target's memory bounds the steps it takes
    target = targets_of_drafters().get(csv.name)
    limit = kv_room(target) if target is not None else None
    assert table_warnings(StepTable.read(csv), csv.name, limit) == []


def test_points_beyond_the_memory_are_not_judged(tmp_path):
    """A point whose KV cache cannot fit beside the weights is one no deployment takes: the same impossible step
    time is named inside the memory and left alone beyond it."""
    meta = StepTable.read(H200_TABLE).meta
    room = kv_room(meta)
    shape, h200 = get_shape("qwen3-8b"), get_gpu("H200")
    held = meta.get("kv_bytes_per_token") or shape.kv_bytes_per_token
    # the memory the H200 reports (139.8 GiB), not its datasheet's 141 GB
    assert room == pytest.approx((h200.device_memory_bytes - shape.total_params * 2.0) / held, rel=0.02)
    ks = sorted(set(StepTable.read(H200_TABLE).ok["kv_tokens"]))
    inside, beyond = max(k for k in ks if k <= room), min(k for k in ks if k > room)
    for k, named in ((inside, True), (beyond, False)):
        def spoil(rows, k=k):
            rows.loc[at(rows, 1, k), ["step_ms", "step_ms_p10", "step_ms_p90"]] = 0.01

        path = copy_table(H200_TABLE, tmp_path / f"k{k}.csv", spoil)
        lines = [line for line in table_warnings(StepTable.read(path), "t") if "roofline bound" in line]
        assert bool(lines) == named, (k, room, lines)
        # a drafter's table is held to its target's memory, passed in: a limit below k leaves the point alone
        assert [line for line in table_warnings(StepTable.read(path), "t", k - 1) if "roofline" in line] == []


def test_the_bundled_scenarios_give_no_table_warning():
    from simulator.inputs.config import load_scenario
    from simulator.inputs.hardware import scenario_table_warnings
    from simulator.inputs.systems import resolve_systems

    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        scn = load_scenario(path, ())
        assert scenario_table_warnings(scn, {s.drafter for s in resolve_systems(scn)}) == [], path.name


def test_a_step_ten_times_its_neighbour_is_named(tmp_path):
    base = pd.read_csv(H200_TABLE)
    k = int(np.sort(base["kv_tokens"].unique())[5])  # a K row of the grid, away from its ends
    slow = float(base.loc[at(base, 98, k), "step_ms"].iloc[0]) * 10
    nxt = float(base.loc[at(base, 122, k), "step_ms"].iloc[0])

    def spoil(rows):
        rows.loc[at(rows, 98, k), ["step_ms", "step_ms_p10", "step_ms_p90"]] = slow

    path = copy_table(H200_TABLE, tmp_path / "spiked.csv", spoil)
    lines = table_warnings(StepTable.read(path), "spiked.csv")
    along_b = [line for line in lines if "as the batch grows" in line]
    assert len(along_b) == 1
    # every larger B of that K row is faster than the spike, until the row grows past ten times its old step
    later = base[(base["kv_tokens"] == k) & (base["batch_tokens"] > 98)]
    assert f"at {int((later['step_ms'] < (1 - DROP) * slow).sum())} point(s)" in along_b[0]
    assert (f"the worst: B = 122 at K = {k:,} takes {nxt:.3g} ms, {nxt / slow:.2f}x the {slow:.3g} ms at B = 98"
            in along_b[0])
    # the spike also stands above the larger contexts at B = 98: said along K, once
    assert sum("as the context (K) grows" in line for line in lines) == 1


@pytest.mark.parametrize("factor, spread, warned", [
    (1.0 / (1 - DROP) * 0.95, 0.0, False),  # a wiggle smaller than DROP: never named
    (2.0, 0.0, True),  # twice the next point, repeats agreeing: named
    (2.0, 0.7, False),  # twice the next point, within the points' own p10-p90 spread: noise
])
def test_a_wiggle_within_noise_is_not_named(tmp_path, factor, spread, warned):
    base = pd.read_csv(H200_TABLE)
    k = int(np.sort(base["kv_tokens"].unique())[5])

    def spoil(rows):
        # B = 98 made slower than B = 122 by ``factor``; both points' repeats spread by ``spread`` either side
        t = float(rows.loc[at(rows, 122, k), "step_ms"].iloc[0]) * factor
        rows.loc[at(rows, 98, k), ["step_ms", "step_ms_p10", "step_ms_p90"]] = [t, t * (1 - spread), t * (1 + spread)]
        for b in (122,):
            sel = at(rows, b, k)
            m = float(rows.loc[sel, "step_ms"].iloc[0])
            rows.loc[sel, ["step_ms_p10", "step_ms_p90"]] = [m * (1 - spread), m * (1 + spread)]

    path = copy_table(H200_TABLE, tmp_path / "wiggle.csv", spoil)
    lines = [line for line in table_warnings(StepTable.read(path), "wiggle.csv") if "as the batch grows" in line]
    assert bool(lines) == warned


def test_points_of_different_request_counts_are_not_compared(tmp_path):
    # the measured CPU table: at one (B, K), 4 requests of 1 token and 1 request of 4 tokens differ for real
    ok = StepTable.read(CPU_TABLE).ok
    assert ok.groupby(["batch_tokens", "kv_tokens"])["requests"].nunique().max() >= 2
    assert table_warnings(StepTable.read(CPU_TABLE), "cpu") == []

    def forget_requests(rows):
        rows["requests"] = np.nan  # the same points, without saying which shape each was

    blind = StepTable.read(copy_table(CPU_TABLE, tmp_path / "blind.csv", forget_requests))
    assert any("as the context (K) grows" in line for line in table_warnings(blind, "blind"))


def test_a_busy_measurement_is_named(tmp_path):
    def busy(meta):
        meta["machine_load"] = {"cores": 2, "threads": 1, "load_before": 4.15, "load_max_during": 5.1,
                                "competing_max_during": 4.1, "repeat_spread_median": 0.3, "verdict": "busy"}

    path = copy_table(CPU_TABLE, tmp_path / "busy.csv", edit_meta=busy)
    lines = table_warnings(StepTable.read(path), "busy.csv")
    assert lines == ["busy.csv: T-2: measured on a busy machine (sidecar machine_load.verdict busy: load average before "
                     "4.15, competing threads during 4.1 on 2 cores): its step times are slower and noisier than the "
                     "hardware; measure it again on a quiet machine"]

    def quiet(meta):
        busy(meta)
        meta["machine_load"]["verdict"] = "quiet"

    assert table_warnings(StepTable.read(copy_table(CPU_TABLE, tmp_path / "q.csv", edit_meta=quiet)), "q") == []


def test_throttled_points_are_counted(tmp_path):
    def throttle(rows):
        rows["throttle_reasons"] = rows["throttle_reasons"].astype(object)
        rows.loc[rows.index[:3], ["throttled", "throttle_reasons"]] = [True, "sw_power_cap,hw_thermal_slowdown"]

    path = copy_table(H200_TABLE, tmp_path / "hot.csv", throttle)
    lines = table_warnings(StepTable.read(path), "hot.csv")
    n = len(StepTable.read(H200_TABLE).ok)
    assert len(lines) == 1
    assert lines[0].startswith(f"hot.csv: T-3: 3 of {n} points were measured while the GPU throttled its clocks "
                               "(hw_thermal_slowdown, sw_power_cap), even after re-measuring")


def test_a_point_faster_than_the_roofline_bound_is_named(tmp_path):
    # the bound at B = 1, K = 0 by hand: Qwen3-8B's matmul weights in bf16 read once at the H200's 4.8 TB/s
    shape, h200 = get_shape("qwen3-8b"), get_gpu("H200")
    bound = shape.matmul_params * 2.0 / (h200.hbm_tb_s * 1e12) * 1e3
    assert roofline_bound_ms(StepTable.read(H200_TABLE).meta, np.array([1.0]), np.array([0.0]))[0] == \
        pytest.approx(bound)
    fast = bound / 2

    def spoil(rows):
        rows.loc[at(rows, 1, 0), ["step_ms", "step_ms_p10", "step_ms_p90"]] = fast

    path = copy_table(H200_TABLE, tmp_path / "fast.csv", spoil)
    lines = [line for line in table_warnings(StepTable.read(path), "fast.csv") if "roofline bound" in line]
    n = len(StepTable.read(H200_TABLE).ok)
    assert lines == [f"fast.csv: T-4: 1 of {n} points (B 1, K 0) are faster than the table's own roofline bound for "
                     "qwen3-8b on 1 x H200 in bf16 (the weights read at the datasheet bandwidth, the FLOPs at its "
                     f"peak), which is impossible; the worst: B = 1 at K = 0 takes {fast:.3g} ms against a bound of "
                     f"{bound:.3g} ms: the table or its sidecar's model, device or dtype is wrong there"]

    def unknown_device(meta):
        del meta["gpu"]
        meta["device"] = "some accelerator"

    blind = copy_table(H200_TABLE, tmp_path / "blind.csv", spoil, unknown_device)
    assert [line for line in table_warnings(StepTable.read(blind), "b") if "roofline" in line] == []


def test_the_bound_reads_the_kv_cache_the_sidecar_priced():
    meta = {k: v for k, v in json.loads((HARDWARE / "b200-qwen3-8b-bf16.json").read_text()).items()
            if k not in (*MEMORY_KEYS, "schema_version")}  # as written before sidecars said: its cache in its dtype
    shape, b200 = get_shape("qwen3-8b"), get_gpu("B200")
    k = 1_000_000.0
    weights = shape.matmul_params * 2.0
    bf16_cache = 2 * shape.layers * shape.kv_heads * shape.head_dim * 2.0  # K and V, 2 bytes each
    for said, per_token in ((None, bf16_cache), (bf16_cache / 2, bf16_cache / 2)):  # then an fp8 cache, said
        if said is not None:
            meta = {**meta, "kv_bytes_per_token_per_gpu": said}
        assert roofline_bound_ms(meta, np.array([1.0]), np.array([k]))[0] == \
            pytest.approx((weights + per_token * k) / (b200.hbm_tb_s * 1e12) * 1e3)
    # compute-bound at a large B: the matmul FLOPs without the LM head at the bf16 peak
    b = 16_384.0
    flops = 2.0 * (shape.matmul_params - shape.head_params) * b
    assert roofline_bound_ms(meta, np.array([b]), np.array([0.0]))[0] == \
        pytest.approx(flops / (b200.peak_tflops("bf16") * 1e12) * 1e3)


@pytest.mark.parametrize("device, name", [("NVIDIA H200", "H200"), ("NVIDIA A100-SXM4-80GB", "A100"),
                                          ("cpu", None), ("NVIDIA GH200 480GB", None)])
def test_a_measured_tables_device_name_finds_its_datasheet(device, name):
    """Once, where a measurement names its device (or an old sidecar is upgraded): the checks read the datasheet
    block only."""
    gpu = named_gpu(device)
    assert (gpu.name if gpu is not None else None) == name
    facts = Sidecar.of({"device": device})  # a sidecar from before the contract, upgraded
    assert (facts.deployment.datasheet.name if facts.deployment.datasheet else None) == name
    assert Sidecar.of({"device": device, "schema_version": 2}).deployment.datasheet is None  # no name parsing


@pytest.mark.slow
def test_check_and_a_run_warn_once(scenario_file, tmp_path):
    base = pd.read_csv(H200_TABLE)
    k = int(np.sort(base["kv_tokens"].unique())[5])

    def spoil(rows):
        rows.loc[at(rows, 98, k), ["step_ms", "step_ms_p10", "step_ms_p90"]] *= 10

    def keep_drafters(meta):  # the sidecar names its drafters' tables beside it
        for entry in meta["drafter_tables"].values():
            shutil.copy(H200_TABLE.parent / entry["table"], tmp_path / entry["table"])
            shutil.copy((H200_TABLE.parent / entry["table"]).with_suffix(".json"),
                        (tmp_path / entry["table"]).with_suffix(".json"))

    table = copy_table(H200_TABLE, tmp_path / "spiked.csv", spoil, keep_drafters)
    path = scenario_file(hardware={"table": str(table)}, systems=["ar"])
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    for command in (["check"], ["run", "--quick", "--jobs", "1", "--out", str(tmp_path / "o")]):
        res = subprocess.run([sys.executable, "-m", "simulator.cli", command[0], str(path), *command[1:]], cwd=ROOT,
                             capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        warned = [line for line in res.stderr.splitlines() if "step time falls as the batch grows" in line]
        assert len(warned) == 1 and warned[0].startswith(f"warning: {table} (hardware.table): ")


def test_each_hardware_options_tables_are_checked(scenario_file, tmp_path):
    from simulator.inputs.config import load_scenario
    from simulator.runs.hardware_choice import check_options, parse_options

    base = pd.read_csv(H200_TABLE)
    k = int(np.sort(base["kv_tokens"].unique())[5])

    def spoil(rows):
        rows.loc[at(rows, 98, k), ["step_ms", "step_ms_p10", "step_ms_p90"]] *= 10

    def keep_drafters(meta):
        for entry in meta["drafter_tables"].values():
            for suffix in (".csv", ".json"):
                src = (H200_TABLE.parent / entry["table"]).with_suffix(suffix)
                shutil.copy(src, tmp_path / src.name)

    spiked = copy_table(H200_TABLE, tmp_path / "spiked.csv", spoil, keep_drafters)
    scn = load_scenario(scenario_file(systems=["ar"], traffic={"kind": "poisson", "rate": 10.0}, frontier=None))
    _, warnings = check_options(scn, parse_options([f"good={H200_TABLE}:3.5", f"bad={spiked}:3.5"]))
    assert warnings and all(w.startswith(f"--hardware bad: {spiked} (hardware.table): T-1: step time falls as the ")
                            for w in warnings)  # along B, and along K at that B
    assert sum("falls as the batch grows" in w for w in warnings) == 1


def test_a_power_cap_that_kept_the_clock_near_its_top_is_not_named(tmp_path):
    """NVML reports sw_power_cap on the H200 table measured here at 1,965 of 1,980 MHz (0.8% down): not named. The
    same reason with the clock 10% down is."""
    def capped(clock):
        def edit(rows):
            rows["throttle_reasons"] = rows["throttle_reasons"].astype(object)
            rows.loc[rows.index[:2], ["throttled", "throttle_reasons", "sm_clock_mhz"]] = [True, "sw_power_cap", clock]
        return edit

    def top(meta):
        meta["telemetry"] = {"telemetry": "nvml", "max_sm_clock_mhz": 1980}

    near = copy_table(H200_TABLE, tmp_path / "near.csv", capped(1965.0), edit_meta=top)
    assert table_warnings(StepTable.read(near), "near.csv") == []
    far = copy_table(H200_TABLE, tmp_path / "far.csv", capped(1782.0), edit_meta=top)
    assert [line.split(" were measured")[0] for line in table_warnings(StepTable.read(far), "far.csv")] == [
        f"far.csv: T-3: 2 of {len(StepTable.read(H200_TABLE).ok)} points"]
    # without the top clock in the sidecar the reason alone counts, as before
    unknown = copy_table(H200_TABLE, tmp_path / "unknown.csv", capped(1965.0))
    assert len(table_warnings(StepTable.read(unknown), "unknown.csv")) == 1


def test_a_drafters_bound_reads_its_own_layers_cache():
    """A measured drafter table's sidecar records its target's cache (36 layers of Qwen3-8B: it sizes the KV pool);
    its steps read the cache of the one layer they ran. The bound at B = 128, K = 524,288 by hand: the drafter's
    weights (embeddings not read, its LM head is) and one layer's K and V over the context, at 4.8 TB/s."""
    meta = StepTable.read(HARDWARE / "h200-qwen3-8b-bf16-measured.drafter-1l.csv").meta
    shape = get_shape("qwen3-8b")
    assert meta["kv_bytes_per_token"] == shape.kv_bytes_per_token  # the target's 36 layers, in bf16
    drafter = meta["model_shape"]
    assert drafter["layers"] == 1
    one_layer_kv = 2 * drafter["kv_heads"] * drafter["head_dim"] * 2  # K and V, bf16
    from hw_profile.hardware.shapes import ModelShape

    weights = ModelShape(**drafter).dense_params_per_gpu(1) * 2
    expect = (weights + 524_288 * one_layer_kv) / 4.8e12 * 1e3
    assert roofline_bound_ms(meta, np.array([128.0]), np.array([524_288.0]))[0] == pytest.approx(expect, rel=1e-6)
    # below the measured 11.2 ms there, where the target's 36-layer cache gave 16.4 ms
    assert expect < 11.2 < 16.4


def test_the_invariants_documented_are_the_ones_checked():
    """docs/hw-profile.md's table lists T-1 ... T-n as the module's docstring numbers them, and every warning the
    module writes carries one of those numbers."""
    import re

    doc = (ROOT / "docs" / "hw-profile.md").read_text()
    listed = re.findall(r"^\| (T-\d+) \|", doc, re.M)
    stated = re.findall(r"^- \*\*(T-\d+) ", checks.__doc__, re.M)
    assert listed == stated == [f"T-{i}" for i in range(1, len(stated) + 1)] and len(stated) >= 4
    source = (ROOT / "hw_profile" / "tables" / "checks.py").read_text()
    assert set(re.findall(r"(T-\d+): ", source)) == set(stated)  # each numbered line the module writes
