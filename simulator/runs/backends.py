"""Where runs execute: a local process pool, or Ray tasks on a local or remote Ray cluster.

Both take a list of tasks (a scenario, a run spec and the store file the result goes to) and store each result
the moment it arrives, so an interrupted batch (Ctrl-C) keeps everything that finished and the next command
resumes from the store. A run's numbers depend only on its scenario, spec and seed, never on where it ran, so
both backends give identical rows (wall-clock columns aside).

Ray is imported only when ``--backend ray`` is asked for, so ``simulate`` works without it; ``pip install
'dspark-sim[ray]'`` installs it (``./run simulate ... --backend ray`` does so by itself).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path

from atomic_files import atomic_write_text
from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario
from simulator.runs.run import RunSpec, run_one

BACKENDS = ("local", "ray")
RAY_HINT = "pip install 'dspark-sim[ray]' (./run simulate ... --backend ray installs it)"


@dataclass(frozen=True)
class Task:
    scn: LoadedScenario
    spec: RunSpec
    store: Path  # the result's file, DIR/.runs/<key>.json
    records: Path | None = None


@dataclass(frozen=True)
class Backend:
    """``kind`` local or ray; ``jobs`` parallel runs (local pool size, or CPUs of a Ray started here);
    ``address`` of an existing Ray cluster (``auto``, ``HOST:PORT``), None to start a local one."""

    kind: str = "local"
    jobs: int = 1
    address: str | None = None

    def __post_init__(self):
        if self.kind not in BACKENDS:
            raise UserError(f"--backend: expected one of {', '.join(BACKENDS)}, got {self.kind!r}")
        if self.address is not None and self.kind != "ray":
            raise UserError("--address: only with --backend ray")


def run_task(task: Task) -> dict:
    row, _ = run_one(task.scn, task.spec, task.records, run_key=task.store.stem)
    return row


def store(path: Path, row: dict) -> None:
    atomic_write_text(path, json.dumps(row, default=_json_default) + "\n")


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"cannot store {type(o).__name__}")


def execute(tasks: list[Task], backend: Backend, on_stored: Callable[[Task], None] | None = None) -> None:
    """Run every task and store its row as it finishes; ``on_stored`` is called after each (progress)."""
    if not tasks:
        return
    for t in tasks:
        t.store.parent.mkdir(parents=True, exist_ok=True)
    done = on_stored or (lambda task: None)
    if backend.kind == "ray":
        _execute_ray(tasks, backend, done)
    elif backend.jobs <= 1 or len(tasks) == 1:
        for t in tasks:
            store(t.store, run_task(t))
            done(t)
    else:
        _execute_pool(tasks, backend.jobs, done)


def _execute_pool(tasks: list[Task], jobs: int, done: Callable[[Task], None]) -> None:
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        futures = {pool.submit(run_task, t): t for t in tasks}
        try:
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    store(futures[f].store, f.result())
                    done(futures[f])
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def import_ray():
    try:
        import ray
    except ImportError:
        raise UserError(f"--backend ray: Ray is not installed; {RAY_HINT}") from None
    return ray


def _execute_ray(tasks: list[Task], backend: Backend, done: Callable[[Task], None]) -> None:
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        if backend.address is None:
            # a private local Ray with as many CPUs as jobs, quiet, without the dashboard
            ray.init(num_cpus=backend.jobs, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        else:
            try:
                ray.init(address=backend.address, log_to_driver=False)
            except ConnectionError as exc:
                raise UserError(f"--address {backend.address}: cannot reach a Ray cluster ({exc})") from None
    if backend.address is None:
        # workers of a local Ray share this filesystem but not this working directory
        tasks = [replace(t, scn=_absolute(t.scn)) for t in tasks]
    remote = ray.remote(num_cpus=1)(run_task)
    refs = {remote.remote(t): t for t in tasks}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                store(refs[ref].store, ray.get(ref))
                done(refs[ref])
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started_here:
            ray.shutdown()


def _absolute(scn: LoadedScenario) -> LoadedScenario:
    return LoadedScenario(scn.model, scn.path.resolve(), scn.overrides)
