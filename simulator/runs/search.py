"""How a plan's searches run. A search is a generator: it yields what it wants measured (an ``Ask``: one candidate
deployment's runs, one per seed) and is sent back the candidate's row over those seeds (``replicates.combine``);
or it yields ``After(name)`` and is sent the value the search ``name`` returned once that one has finished (a
system's decode pool confirmed with the prefill pool, which another search sizes).

``Driver`` runs any number of searches at once, of one planner or several (a hardware comparison's), on one
backend held open for them all (``backends.Pool``): each search moves on the moment its own candidate is
decided, not when the slowest search of a round is, so the workers stay busy through a plan's long tail; and
runs that two searches ask for at the same time (the same table at two prices) run once.

A candidate is decided with as few runs as its verdict needs:

- with a per-seed judgement (``Ask.one``), its runs may stop early, as soon as they certainly fail (their
  ``StopRule``, ``run.EarlyStop``). A candidate meets only when every seed meets, so one seed that fails decides
  that it does not; but whether it *clearly* fails or is unresolved (``replicates.judge``) reads every seed's
  attainment, so where a stopped seed stands beside one that met, the stopped one is run again in full before
  the candidate is judged;
- ``lazy``: the first seed runs alone, the others only when it meets. A candidate whose first seed fails is sent
  back ``partial`` (that seed's row alone): not met, clear failure or unresolved not known. The planner
  completes the few partial candidates its report reads (``Planner.complete``).

Every run still goes through the run store (resumable, shared with sweeps): a run that went the whole way is
stored under its ordinary key, one that stopped early beside it under a key of its own (``Task.stopped_store``).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from simulator.runs.backends import Backend, Pool, Task
from simulator.runs.replicates import combine


class Owner(Protocol):
    """What a driver needs of the planner whose runs it executes."""

    runs: int
    check_invariants: bool
    checked: set
    on_stored: Callable[[Task], None] | None
    on_queued: Callable[[list[Task]], None] | None

    def ask(self, wanted: Any) -> Ask: ...


@dataclass(frozen=True)
class Ask:
    """A candidate's runs, one task per seed (in seed order), and how to decide it: ``one`` judges a single seed's
    row (None: every seed in full, no early decision), ``lazy`` runs the first seed alone first."""

    tasks: tuple[Task, ...]
    one: Callable[[dict], str | None] | None = None
    lazy: bool = False


@dataclass(frozen=True)
class After:
    """What a search yields to wait for another search's result."""

    name: Hashable


def full(task: Task) -> Task:
    """The same run without a stop rule: it goes the whole way (and is stored under the ordinary key)."""
    return replace(task, spec=replace(task.spec, stop=None), stopped_store=None)


@dataclass
class Evaluation:
    """One asked candidate being decided: the rows its seeds have so far."""

    driver: Driver
    owner: Owner
    name: Hashable
    ask: Ask
    rows: list[dict | None] = field(default_factory=list)
    asked: set[int] = field(default_factory=set)  # seeds requested
    waiting: int = 0  # of those, runs not in yet

    def start(self) -> None:
        self.rows = [None] * len(self.ask.tasks)
        self.request(range(1) if self.ask.lazy and self.ask.one is not None else range(len(self.ask.tasks)))

    def request(self, seeds, in_full: bool = False) -> None:
        todo = []
        for i in seeds:
            self.asked.add(i)
            task = full(self.ask.tasks[i]) if in_full or self.ask.one is None else self.ask.tasks[i]
            row = self.driver.stored(self.owner, task)
            if row is not None:
                self.rows[i] = row
            else:
                self.waiting += 1
                todo.append((i, task))
        submitted = [t for i, t in todo if self.driver.submit(self.owner, t, self, i)]
        if submitted and self.owner.on_queued is not None:
            self.owner.on_queued(submitted)
        if not self.waiting:
            self.decide()

    def arrive(self, i: int, row: dict) -> None:
        self.rows[i] = row
        self.waiting -= 1
        if not self.waiting:
            self.decide()

    def decide(self) -> None:
        one, n = self.ask.one, len(self.ask.tasks)
        have = [i for i in range(n) if i in self.asked]
        if one is not None:
            whys = {i: one(self.rows[i]) for i in have}
            if len(have) < n:
                if any(w is not None for w in whys.values()):  # a seed failed: the candidate does not meet
                    return self.deliver(have, partial=True)
                return self.request([i for i in range(n) if i not in self.asked])
            stopped = [i for i in have if self.rows[i].get("stopped")]
            if stopped and any(w is None for w in whys.values()):
                return self.request(stopped, in_full=True)
        self.deliver(have, partial=False)

    def deliver(self, seeds: list[int], partial: bool) -> None:
        row = combine([self.rows[i] for i in seeds])
        if partial:
            row["partial"] = True
        row["seeds_run"] = len(seeds)
        self.driver.ready.append((self.name, row))


class Driver:
    """Runs searches (``run``) on one backend held open until ``close``."""

    def __init__(self, backend: Backend):
        self.pool = Pool(backend)
        self.ready: deque[tuple[Hashable, Any]] = deque()
        self.inflight: dict[tuple, list[tuple[Evaluation, int]]] = {}
        self.tasks: dict[tuple, tuple[Owner, Task]] = {}
        self.urgent: set[Hashable] = set()  # searches others wait for (After): their runs go first

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc) -> None:
        self.pool.close(cancel=exc[0] is not None)

    def stored(self, owner: Owner, task: Task) -> dict | None:
        """The run's row when the store has it: a full run serves any ask, one stopped early only an ask with
        the same stop rule (its key). With --check-invariants a run not yet checked by this plan runs again."""
        for path in (task.store, task.stopped_store):
            if path is None or not path.is_file() or (owner.check_invariants and path not in owner.checked):
                continue
            return json.loads(path.read_text())
        return None

    def submit(self, owner: Owner, task: Task, ev: Evaluation, seed: int) -> bool:
        """Queue the run unless the same one is under way already; True when it was queued."""
        key = (task.store, task.stopped_store)
        waiting = self.inflight.setdefault(key, [])
        waiting.append((ev, seed))
        if len(waiting) > 1:
            return False
        self.tasks[key] = (owner, task)
        self.pool.submit(task, 0 if ev.name in self.urgent else 1)
        return True

    def run(self, searches: dict[Hashable, tuple[Owner, Generator]], urgent=()) -> dict[Hashable, Any]:
        """Advance every search until all have returned; their return values by name. The runs of ``urgent``
        searches, and of any another waits for, go before the others (the critical path: a prefill pool's
        search, which every system's confirmation waits for)."""
        self.urgent.update(urgent)
        results: dict[Hashable, Any] = {}
        parked: dict[Hashable, list[Hashable]] = {}  # a search's name -> the searches waiting for it (After)
        owners = {name: owner for name, (owner, _) in searches.items()}
        gens = {name: gen for name, (_, gen) in searches.items()}
        for name in gens:
            self.ready.append((name, None))
        while len(results) < len(gens):
            if not self.ready:
                if not self.pool.busy:
                    raise RuntimeError(f"searches wait for each other: {sorted(map(str, parked))}")
                self._collect()
                continue
            name, value = self.ready.popleft()
            try:
                wanted = gens[name].send(value)
            except StopIteration as stop:
                results[name] = stop.value
                for other in parked.pop(name, []):
                    self.ready.append((other, stop.value))
                continue
            if isinstance(wanted, After):
                self.urgent.add(wanted.name)
                if wanted.name in results:
                    self.ready.append((name, results[wanted.name]))
                else:
                    parked.setdefault(wanted.name, []).append(name)
                continue
            ask = wanted if isinstance(wanted, Ask) else owners[name].ask(wanted)
            Evaluation(self, owners[name], name, ask).start()
        return results

    def _collect(self) -> None:
        for task, row in self.pool.wait():
            key = (task.store, task.stopped_store)
            owner, _ = self.tasks.pop(key)
            owner.runs += 1
            owner.checked.add(task.destination(row))
            if owner.on_stored is not None:
                owner.on_stored(task)
            for ev, seed in self.inflight.pop(key):
                ev.arrive(seed, row)
