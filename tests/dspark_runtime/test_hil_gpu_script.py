"""benchmarks/hil_gpu.sh before any GPU sees it: the dry run takes every step on the CPU with the stand-ins of the
CUDA-events clock and NVML (dspark_runtime/live/standins.py) and prints its summary; a real run stops at the first
failing step with one line; the stand-ins behave as the interfaces they stand in for."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from dspark_runtime.live.standins import HOST_EVENTS, HostNvml
from dspark_runtime.live.timing import MeasuredTable, StepTimer
from hw_profile.measure.telemetry import NvmlSampler

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "hil_gpu.sh"


def _script(tmp_path: Path, *args: str, data: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HIL_PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "HIL_OUT": str(tmp_path / "out")}
    if data is not None:
        env["DSPARK_DATA"] = str(data)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout)


def test_host_events_time_a_span_as_the_event_path_does():
    timer = StepTimer(torch.device("cpu"), HOST_EVENTS)
    with timer.span("verify"):
        time.sleep(0.02)
    with timer.span("verify"):
        time.sleep(0.01)
    with timer.span("draft"):
        pass
    ms = timer.end_step()
    assert 30.0 <= ms["verify"] < 30.0 + 50.0  # two spans summed; sleep never returns early
    assert 0.0 <= ms["draft"] < ms["verify"]
    assert timer.end_step() == {}  # read once per step


def test_the_host_nvml_stand_in_goes_through_the_sampler():
    sampler = NvmlSampler.open("cuda", nvml=HostNvml(), interval_s=0.002)
    assert sampler.available
    info = sampler.device_info()
    assert "host stand-in" in info["gpu_name"] and info["energy_counter"] is False
    sampler.start()
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:  # keep a CPU busy so utilisation has something to see
        pass
    tel = sampler.stop()
    assert tel.samples >= 2 and 0.0 <= tel.util_pct <= 100.0
    assert math.isnan(tel.power_w) and math.isnan(tel.energy_j)  # the host cannot tell: left empty, as NVML does
    assert not tel.throttled
    table = MeasuredTable()
    table.add(8, 64, 2, 3.0, tel)
    assert table.throttled_steps() == 0 and table.points()[0]["util_pct"] == pytest.approx(tel.util_pct)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the real run would start on a GPU")
def test_a_real_run_without_a_gpu_stops_at_its_first_step_with_one_line(tmp_path):
    res = _script(tmp_path, timeout=120)
    assert res.returncode == 1
    assert "hil_gpu [1/8] environment ... failed" in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("hil_gpu.sh: FAILED at step 1/8 (environment)"), res.stderr
    assert "no CUDA device" in res.stderr
    assert "[2/8]" not in res.stderr  # nothing after the failure ran
    assert not (tmp_path / "out" / "live").exists()


@pytest.mark.heavy
@pytest.mark.slow
def test_the_dry_run_takes_every_step_and_prints_the_summary(smoke_world, tmp_path):
    paths, _, _ = smoke_world
    hardware = sorted(p.name for p in (ROOT / "scenarios" / "hardware").iterdir())
    res = _script(tmp_path, "--dry-run", data=paths.root.parent)
    assert res.returncode == 0, res.stderr[-3000:]
    for k in range(1, 8):
        assert f"hil_gpu [{k}/8]" in res.stderr
    assert "failed" not in res.stderr
    out = tmp_path / "out"
    # the live run went through the event-pair clock and the NVML sampler (with their stand-ins)
    tables = sorted((out / "live" / "live-tables").glob("*__seed0.csv"))
    assert {t.stem.split("__")[0] for t in tables} == {"static-3", "dspark"}
    for table in tables:
        meta = json.loads(table.with_suffix(".json").read_text())
        assert meta["kind"] == "live" and meta["gpu_stand_in"] is True
        assert "host stand-in" in meta["telemetry"]["gpu_name"]
        assert meta["steps"]["target"] > 0 and meta["throttled_steps"]["target"] == 0
        points = pd.read_csv(table)
        assert (points["step_ms"] > 0).all() and points["util_pct"].between(0, 100).all()
        assert points["repeats"].sum() == meta["steps"]["target"]
        ratio = pd.read_csv(out / f"compare-{table.stem}.csv")["ratio"]
        assert len(ratio) == len(points) and (ratio > 0).all()
    # the summary: one screen, from those files
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith("hil_gpu summary -- DRY RUN") and len(lines) <= 25
    assert any(ln.startswith("  dspark__closed-4__seed0: ") and "throttled 0 / 0" in ln for ln in lines)
    assert any(ln.startswith("measured H200 table ") for ln in lines)
    assert any(ln.startswith("bench_live: live step, 4 requests") for ln in lines)
    # a dry run writes nothing into the scenario library
    assert sorted(p.name for p in (ROOT / "scenarios" / "hardware").iterdir()) == hardware


LEASE = ROOT / "benchmarks" / "gpu_lease.sh"


@pytest.mark.heavy
@pytest.mark.slow
def test_the_lease_script_dry_run_measures_every_table_and_archives_after_each_step(smoke_world, tmp_path):
    paths, _, _ = smoke_world
    archive = tmp_path / "lease.tgz"
    env = {**os.environ, "HIL_PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "DSPARK_DATA": str(paths.root.parent),
           "LEASE_ARCHIVE": str(archive)}
    res = subprocess.run(["bash", str(LEASE), str(tmp_path / "out"), "--dry-run"], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "out"
    steps = [ln.split("\t") for ln in (out / "logs" / "steps.tsv").read_text().splitlines()]
    assert [s[0] for s in steps] == ["environment", "target-table", "eager-launches", "peaks", "hil", "drafter-1l",
                                     "drafter-5l"]
    assert all(s[2] == "0" for s in steps)
    for name in ("h200-qwen3-8b-bf16-measured", "h200-qwen3-8b-bf16-drafter-1l-measured",
                 "h200-qwen3-8b-bf16-drafter-5l-measured"):
        points = pd.read_csv(out / "tables" / f"{name}.csv")
        assert (points["status"] == "ok").all() and (points["step_ms"] > 0).all()
    meta = json.loads((out / "tables" / "h200-qwen3-8b-bf16-drafter-5l-measured.json").read_text())
    assert meta["sequential_head"]["rank"] == 8 and "sequential_head" not in json.loads(
        (out / "tables" / "h200-qwen3-8b-bf16-drafter-1l-measured.json").read_text())
    eager = json.loads((out / "tables" / "eager-launches.json").read_text())
    assert [p["requests"] for p in eager["points"]] == [1, 4]
    assert all(p["launches"] > 0 and p["eager_ms"] > 0 for p in eager["points"])
    # the live run compared its tables with the target table step 2 measured
    assert "measured H200 table h200-qwen3-8b-bf16-measured.csv" in (out / "logs" / "hil.log").read_text()
    import tarfile

    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert "./logs/steps.tsv" in names and "./tables/eager-launches.json" in names


@pytest.mark.heavy
@pytest.mark.skipif(torch.cuda.is_available(), reason="the real run would start on a GPU")
def test_the_lease_script_goes_on_past_a_failing_step(tmp_path):
    env = {**os.environ, "HIL_PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "DSPARK_DATA": str(tmp_path)}
    res = subprocess.run(["bash", str(LEASE), str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=600)
    assert res.returncode == 1
    steps = [ln.split("\t") for ln in (tmp_path / "out" / "logs" / "steps.tsv").read_text().splitlines()]
    assert len(steps) == 7 and all(s[2] != "0" for s in steps[1:])  # every step ran, each failing on its own
    assert "gpu_lease.sh: " in res.stderr and "steps failed" in res.stderr
