"""``simulate bench``: replay a benchmark profile as one run and report it as the benchmark tool does
(docs/benchmarks.md). The profile becomes a scenario (simulator/inputs/inference_perf.py), the scenario one
open-loop run of its single system, and the run a table per stage (simulator/outputs/bench_table.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from pydantic import ValidationError

from atomic_files import atomic_write, atomic_write_text
from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario, Scenario, format_validation_error
from simulator.inputs.hardware import load_target_table
from simulator.inputs.inference_perf import BenchProfile
from simulator.inputs.library import library_dir
from simulator.inputs.systems import resolve_systems
from simulator.outputs.bench_table import bench_table
from simulator.runs.run import LoadPoint, RunSpec, build, in_run, run_list, run_window


@dataclass
class BenchRun:
    table: pd.DataFrame
    requests: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    stop: float  # simulated time the run stopped following requests


def scenario_from_doc(doc: dict, profile: BenchProfile, where: Path) -> LoadedScenario:
    """Validate a built scenario; it lives (for relative paths and error messages) at ``where``."""
    try:
        model = Scenario.model_validate(doc)
    except ValidationError as exc:
        raise UserError(f"{format_validation_error(where, exc)} (the scenario built from {profile.path})") from None
    return LoadedScenario(model, where, [])


def table_flag(table: str) -> str:
    """``--table`` as the scenario names it: a file here by its absolute path (the scenario is written in the
    output folder, and a relative path would be read from there), a bundled table by its library name."""
    local = Path(table)
    if local.is_file():
        return str(local.resolve())
    if (library_dir() / table).is_file():
        return table
    raise UserError(f"--table {table}: step-time table not found (a CSV file, or a bundled table by its library "
                    "name, e.g. hardware/h200-qwen3-8b-bf16.csv; `simulate list` lists them)")


def check_table(scn: LoadedScenario, table: str) -> None:
    """Read the table before the run, so that a bad one is named by the flag that gave it, not by the field of the
    scenario built from it."""
    try:
        load_target_table(scn)
    except UserError as exc:
        raise UserError(f"--table {table}: {str(exc).removeprefix('hardware.table: ')}") from None


def write_scenario(path: Path, doc: dict, profile: BenchProfile) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    head = (f"# built by `simulate bench` from {profile.path.name}; rerun with `simulate {path.name}`\n"
            + "".join(f"# note: {n}\n" for n in profile.notes))
    return atomic_write_text(path, head + yaml.safe_dump(doc, sort_keys=False))


def run_bench(scn: LoadedScenario, stages: list[tuple[float, float]], seed: int,
              on_progress: Callable[[float], None] | None = None) -> BenchRun:
    """Run the scenario's one system over its traffic (the send window), then follow every request to its end or
    the drain cap (run.drain_cap_s); ``on_progress`` hears the simulated seconds of the window as they pass. A
    scenario of one finite prompt list (``frontier.requests``) runs it to its last request, one stage."""
    m = scn.model
    listed = m.frontier is not None and m.frontier.requests is not None
    point = LoadPoint(m.frontier.concurrency[0], m.frontier.requests[0]) if listed else LoadPoint(None)
    spec = RunSpec(system=resolve_systems(scn)[0], point=point, seed=seed, quick=False)
    sim, hw, duration, _ = build(scn, spec)
    with in_run(scn, spec):  # no warm-up: a benchmark reports every request
        if listed:  # a finite prompt list: one stage, from its first request to its last
            end = run_list(sim, scn, spec)
            stages = [(end, point.requests / end)]
        else:
            run_window(sim, scn, spec, hw, duration, 0.0, on_progress)
    requests, steps = sim.requests.frame(), sim.steps.frame()
    table = bench_table(requests, steps, stages, sim.env.now, hw.replicas, sim.config.max_running)
    return BenchRun(table, requests, steps, sim.env.now)


def write_bench_csv(out: Path, table: pd.DataFrame) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return atomic_write(out / "bench.csv", lambda p: table.to_csv(p, index=False, float_format="%.6g"))


def terminal_table(table: pd.DataFrame) -> str:
    """The table as the terminal shows it: latencies in milliseconds."""
    cols = ["stage", "rate", "completed", "unfinished"]
    shown = table[cols].copy()
    for name in ("e2e", "ttft", "tpot", "itl"):
        for stat in ("mean", "p90", "p99"):
            shown[f"{name} {stat}"] = (table[f"{name}_{stat}_s"] * 1e3).round(1)
    shown["out tok/s"] = table["output_tokens_per_s"].round(0)
    shown["req/s"] = table["requests_per_s"].round(2)
    shown["overloaded"] = table["overloaded"].map({True: "YES", False: "no"})
    return "latencies in ms\n" + shown.to_string(index=False)
