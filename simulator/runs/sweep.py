"""All runs of a scenario: (system x load point x seed), on a local process pool or Ray, resumable.

Each finished run is stored at once as ``DIR/.runs/<key>.json``, where the key hashes everything that determines
its numbers: the scenario's settings (not its list of systems or load points, so adding one keeps the others), the
run's system, load point, seed and quick flag, the content of every file it reads (tables, profile, traces) and
the simulator's own source. Re-running the same command skips what is stored; an interrupted sweep loses nothing.
``runs.csv`` is then assembled from the store in scenario order.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

import hw_profile.tables
import simulator
from atomic_files import atomic_write
from simulator.core.acceptance import resolve_source
from simulator.core.acceptance.profile import resolve_profile_path
from simulator.core.plugins import source_files
from simulator.core.policies import resolve as resolve_policy
from simulator.inputs.config import LoadedScenario
from simulator.inputs.systems import SystemSpec, resolve_systems
from simulator.runs.backends import Backend, Task, execute
from simulator.runs.run import RunSpec, load_points, records_written, source_options

RUN_COLUMNS = [
    "policy", "policy_impl", "drafter", "gamma", "seed", "load_point", "concurrency", "arrival_rate", "replicas",
    "gpus", "quick", "acceptance_source", "clock", "throughput_per_gpu", "tps_per_user", "tps_per_user_p50", "tps_per_user_p10", "ttft_p50",
    "ttft_p99", "admission_wait_p50", "admission_wait_p99", "tpot_p50", "sla_attainment", "mean_verify_budget", "tau",
    "mean_running", "mean_kv_tokens", "joules_per_token", "requests", "unfinished", "preemptions", "rejected",
    "prefix_hits", "prefix_misses", "prefix_hit_tokens", "prefix_evictions",
    "saturated", "overloaded", "warmup_s", "steady_state", "steps", "sim_seconds", "drain_seconds", "wall_seconds",
    # the latency figures of `vllm bench serve` (seconds)
    "ttft_mean", "ttft_p90", "tpot_mean", "tpot_p90", "tpot_p99", "itl_mean", "itl_p50", "itl_p90", "itl_p99",
    "e2el_mean", "e2el_p50", "e2el_p90", "e2el_p99",
]


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else "missing"


# the two packages whose code a run depends on (hw_profile.tables sits one folder below its package)
PROJECT_ROOTS = (Path(simulator.__file__).resolve().parent, Path(hw_profile.tables.__file__).resolve().parents[1])


@functools.cache  # once per process: a command's runs are keyed by the code it started with
def _code_digest() -> str:
    h = hashlib.sha256()
    for root in PROJECT_ROOTS:
        for f in sorted(root.rglob("*.py")):
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def plugin_digest(classes: list[type]) -> str:
    """A digest of the source files these classes load that the project digest does not cover (a plug-in's
    module or package), by path and content; '' when there are none (built-ins only)."""
    files = sorted({f for cls in classes for f in source_files(cls)
                    if not any(f.is_relative_to(root) for root in PROJECT_ROOTS)})
    if not files:
        return ""
    h = hashlib.sha256()
    for f in files:
        h.update(f.as_posix().encode())
        h.update(f.read_bytes() if f.is_file() else b"missing")
    return h.hexdigest()[:16]


def run_classes(scn: LoadedScenario, system: SystemSpec) -> list[type]:
    """The policy and acceptance-source classes a run of ``system`` loads."""
    policy_cls, _ = resolve_policy(system.policy)
    if system.drafter == "none":
        return [policy_cls]
    return [policy_cls, resolve_source(scn.model.acceptance.source, what=f"{scn.path}: acceptance.source")]


def input_files(scn: LoadedScenario) -> list[Path]:
    m = scn.model
    files = [scn.resolve(m.hardware.table)]
    table_dir = files[0].parent
    files += sorted(table_dir.glob(files[0].stem + ".*")) if files[0].is_file() else []  # sidecar, drafter tables
    files += [scn.resolve(p) for p in [m.hardware.policy_table, m.hardware.prefill_table,
                                       *m.hardware.drafter_tables.values()] if p]
    if m.acceptance.source == "profile":
        try:
            files.append(resolve_profile_path(m.acceptance.profile, scn.base))
        except Exception:  # reported properly when the run starts
            pass
    if m.acceptance.trace:
        files.append(scn.resolve(m.acceptance.trace))
    if m.traffic is not None and m.traffic.trace:
        files.append(scn.resolve(m.traffic.trace))
    for length in (m.workload.prompt, m.workload.output):
        if getattr(length, "trace", None):
            files.append(scn.resolve(length.trace))
    return files


@dataclass
class Sweep:
    scn: LoadedScenario
    specs: list[RunSpec]
    out: Path
    records: Path | None = None
    fresh: bool = False  # ignore the store: run everything again (and overwrite what is stored)
    _executed: set[str] = field(default_factory=set)

    @classmethod
    def plan(cls, scn: LoadedScenario, out: Path, quick: bool, seed: int | None, replicates: int | None,
             records: Path | None = None, fresh: bool = False, check_invariants: bool = False) -> Sweep:
        systems = resolve_systems(scn)
        base_seed = scn.model.seed if seed is None else seed
        reps = replicates or scn.model.run.replicates
        specs = [RunSpec(system, point, base_seed + r, quick, check_invariants)
                 for r in range(reps) for system in systems for point in load_points(scn)]
        return cls(scn, specs, out, records, fresh)

    @property
    def store(self) -> Path:
        return self.out / ".runs"

    def _base_key(self) -> dict:
        m = self.scn.model.model_dump(mode="json")
        for k in ("systems", "frontier", "traffic", "name", "description", "seed"):
            m.pop(k, None)
        m["run"].pop("replicates", None)
        return {"scenario": m, "files": {p.name: _file_digest(p) for p in input_files(self.scn)},
                "code": _code_digest()}

    def keys(self) -> list[str]:
        """One key per run (in ``specs`` order)."""
        return self._keys

    @cached_property
    def _keys(self) -> list[str]:
        # hashed once per sweep: the scenario, its input files and the code do not change while a command runs
        base = self._base_key()
        traffic = self.scn.model.traffic.model_dump(mode="json") if self.scn.model.traffic else None
        systems = {s.system.name: s.system for s in self.specs}
        plugins = {name: plugin_digest(run_classes(self.scn, system)) for name, system in systems.items()}
        inputs = self._source_inputs()
        out = []
        for s in self.specs:
            doc = {**base, "system": s.system.key(), "seed": s.seed, "quick": s.quick,
                   "point": s.point.concurrency if s.point.concurrency is not None else traffic}
            if s.point.requests is not None:  # a finite list at that load is another run than the steady loop
                doc["requests"] = s.point.requests
            if plugins[s.system.name]:  # absent for built-ins, so keys of stored built-in runs stay valid
                doc["plugins"] = plugins[s.system.name]
            if inputs:
                doc["inputs"] = inputs
            out.append(hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20])
        return out

    def _source_inputs(self) -> str:
        """A plug-in source's digest of the data it reads (``AcceptanceSource.input_digest``; a built world)."""
        cls = resolve_source(self.scn.model.acceptance.source, what=f"{self.scn.path}: acceptance.source")
        return cls.input_digest(source_options(self.scn))

    def pending(self) -> list[tuple[RunSpec, str]]:
        """Runs to execute: those not stored, those whose records were asked for and are missing (a stored row
        keeps no records; the run is repeated to write them) and, with ``fresh``, every run not yet executed by
        this command."""
        return [(s, k) for s, k in zip(self.specs, self.keys(), strict=True)
                if not (self.store / f"{k}.json").is_file() or (self.fresh and k not in self._executed)
                or (self.records is not None and not records_written(self.records, self.scn, s, k))]

    def tasks(self) -> list[Task]:
        """What is not stored yet, as tasks for a backend."""
        return [Task(self.scn, spec, self.store / f"{key}.json", self.records) for spec, key in self.pending()]

    def execute(self, jobs: int, progress: Callable[[int, int], object] | None = None,
                backend: Backend | None = None) -> int:
        """Run what is not stored yet (on ``backend``, default a local pool of ``jobs``). Returns how many runs
        were executed."""
        todo = self.tasks()
        self.store.mkdir(parents=True, exist_ok=True)
        if not todo:
            return 0
        bar = progress(len(todo), len(self.specs)) if progress else None

        def stored(task: Task) -> None:
            self._executed.add(task.store.stem)  # --fresh: this command has run it now
            if bar:
                bar.update(1)

        execute(todo, backend or Backend("local", jobs), stored)
        if bar:
            bar.close()
        return len(todo)

    def results(self) -> pd.DataFrame:
        rows = []
        for key in self.keys():
            path = self.store / f"{key}.json"
            if path.is_file():
                rows.append(json.loads(path.read_text()))
        df = pd.DataFrame(rows)
        if df.empty:
            return pd.DataFrame(columns=RUN_COLUMNS)
        return df[[c for c in RUN_COLUMNS if c in df.columns] + [c for c in df.columns if c not in RUN_COLUMNS]]

    def write_runs_csv(self, runs: pd.DataFrame | None = None) -> Path:
        df = self.results() if runs is None else runs
        df = df[[c for c in df.columns if c in RUN_COLUMNS]]  # nested fields (series, per-domain tau) stay in the store
        path = self.out / "runs.csv"
        atomic_write(path, lambda p: df.to_csv(p, index=False, float_format="%.6g"))
        return path


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

