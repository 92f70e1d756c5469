"""Where runs execute: a local process pool, or Ray tasks on a local or remote Ray cluster.

Both take a list of tasks (a scenario, a run spec and the store file the result goes to) and store each result
the moment it arrives, so an interrupted batch (Ctrl-C) keeps everything that finished and the next command
resumes from the store. A run's numbers depend only on its scenario, spec and seed, never on where it ran, so
both backends give identical rows (wall-clock columns aside).

Ray is imported only when ``--backend ray`` is asked for, so ``simulate`` works without it; ``pip install
'dspark-sim[ray]'`` installs it (``./run simulate ... --backend ray`` does so by itself).
"""

from __future__ import annotations

import heapq
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
    stopped_store: Path | None = None  # where its row goes instead if it stopped early (spec.stop; run.EarlyStop)

    def destination(self, row: dict) -> Path:
        """A run that went the whole way is the same run as one without a stop rule, and is stored as one (a
        sweep or a later plan reads it); one cut short is another result, kept apart."""
        return self.stopped_store if row.get("stopped") and self.stopped_store is not None else self.store


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


def store_row(task: Task, row: dict) -> Path:
    path = task.destination(row)
    store(path, row)
    return path


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
            store_row(t, run_task(t))
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
                    store_row(futures[f], f.result())
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
                store_row(refs[ref], ray.get(ref))
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


class Pool:
    """A backend held open for a whole plan, fed a few runs at a time as its searches ask for them: ``submit``
    queues a task, ``wait`` stores and returns the tasks that finished, with their rows (at least one while any
    is pending).
    Unlike ``execute``'s batch, no worker waits for the slowest run of a round, and the workers (their imports,
    compiled kernels and tables) outlive each run. ``jobs`` 1 runs each task in this process when waited for.
    A task's priority orders it before those queued later (on Ray, which schedules itself, it is ignored)."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.pending: dict = {}  # future or Ray reference -> task
        # tasks wait here, by priority then order, until a worker is free (a pool's own queue would run them
        # strictly in order); with jobs 1 each runs in this process when waited for
        self.held: list[tuple[int, int, Task]] = []
        self.order = 0
        self._pool = None
        self._ray = None
        self._remote = None
        self._started_ray = False

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close(cancel=exc[0] is not None)

    def close(self, cancel: bool = False) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=not cancel, cancel_futures=cancel)
            self._pool = None
        if self._ray is not None:
            if cancel:
                for ref in self.pending:
                    self._ray.cancel(ref, force=True)
            if self._started_ray:
                self._ray.shutdown()
            self._ray = None
        self.pending.clear()
        self.held.clear()

    @property
    def busy(self) -> int:
        """Tasks submitted and not yet returned by ``wait``."""
        return len(self.pending) + len(self.held)

    def submit(self, task: Task, priority: int = 1) -> None:
        """Queue a task; a lower ``priority`` runs sooner on the local pool (what other searches wait for)."""
        task.store.parent.mkdir(parents=True, exist_ok=True)
        if self.backend.kind == "ray":
            self.pending[self._ray_remote().remote(self._for_ray(task))] = task
        else:
            heapq.heappush(self.held, (priority, self.order, task))
            self.order += 1
            if self.backend.jobs > 1:
                self._dispatch()

    def _dispatch(self) -> None:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.backend.jobs)
        while self.held and len(self.pending) < self.backend.jobs:
            task = heapq.heappop(self.held)[2]
            self.pending[self._pool.submit(run_task, task)] = task

    def wait(self) -> list[tuple[Task, dict]]:
        """The tasks that finished since the last call, each with its row (stored already); waits for one."""
        if self.held and self.backend.jobs <= 1:  # in this process, the first by priority and order
            task = heapq.heappop(self.held)[2]
            row = run_task(task)
            store_row(task, row)
            return [(task, row)]
        if not self.pending:
            return []
        if self.backend.kind == "ray":
            ready, _ = self._ray.wait(list(self.pending), num_returns=1)
            done = [(self.pending.pop(ref), lambda ref=ref: self._ray.get(ref)) for ref in ready]
        else:
            finished, _ = wait(list(self.pending), return_when=FIRST_COMPLETED)
            done = [(self.pending.pop(f), f.result) for f in finished]
        out = []
        for task, result in done:
            row = result()
            store_row(task, row)
            out.append((task, row))
        if self.held:
            self._dispatch()
        return out

    def _ray_remote(self):
        if self._remote is None:
            ray = self._ray = import_ray()
            if not ray.is_initialized():
                self._started_ray = True
                if self.backend.address is None:
                    ray.init(num_cpus=self.backend.jobs, include_dashboard=False, log_to_driver=False,
                             configure_logging=False)
                else:
                    try:
                        ray.init(address=self.backend.address, log_to_driver=False)
                    except ConnectionError as exc:
                        raise UserError(f"--address {self.backend.address}: cannot reach a Ray cluster ({exc})") from None
            self._remote = ray.remote(num_cpus=1)(run_task)
        return self._remote

    def _for_ray(self, task: Task) -> Task:
        # workers of a local Ray share this filesystem but not this working directory
        return replace(task, scn=_absolute(task.scn)) if self.backend.address is None else task
