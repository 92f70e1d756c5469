"""Capacity planning: per system, the fewest GPUs at which the scenario's open-loop traffic meets the SLA.

The SLA holds for a run when at least ``attainment`` of its requests generate at or above ``tps`` tok/s/user, its
TTFT p99 is within the limit, it is neither saturated nor overloaded (``metrics.overloaded``) and it finished
requests at all. Per system:

1. decode replicas: an exponential search (1, 2, 4, ... up to ``max_gpus``) finds a replica count that meets the
   SLA, then bisection between it and the last count that failed finds the fewest (the SLA is taken to be
   monotone in replicas: more replicas, less load each);
2. headroom: at that size, a search over a multiplier of the traffic (exponential, then geometric bisection to
   ``rate_tolerance``) finds the most traffic it sustains at the SLA; headroom is that multiplier minus one, and
   ``max_rate_per_replica`` that traffic's mean arrival rate divided by the replicas;
3. with a disaggregated prefill pool, the decode searches run behind an unbounded prefill pool (TTFT is then
   the prefill pool's business) while the prefill pool is sized, once for all systems (prompts and their
   prefill do not depend on the system), by the same replica search against the TTFT limit; each system's
   decode size is then confirmed with that pool in place, the two pools grown jointly (a prefill replica more
   while the SLA fails for the prefill pool's sake, its backlog or TTFT; a decode replica more while it fails
   for the decode pool's; never one against the other's shortfall), and its headroom is measured with both.

Every candidate is a run of the sweep's run store (``DIR/.runs``, keyed by everything that determines it), so a
plan resumes where an interrupted one stopped and shares runs with sweeps of the same settings. Every search
runs at once on one pool (the local one or Ray) held for the whole plan, each moving on when its own candidate
is decided (search.py); runs that certainly fail stop early and a candidate one seed has failed is not met
(run.EarlyStop, search.py), with every seed run where the report reads whether a count clearly fails
(docs/planning.md, "What a plan runs"). ``exhaustive`` plans as before that: every candidate in full at every
seed, in rounds.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from hw_profile.tables.sidecar import Provenance
from simulator.errors import UserError
from simulator.inputs.config import MAX_TTFT_S, MIN_TPS_PER_USER, LoadedScenario
from simulator.inputs.hardware import load_table_set
from simulator.inputs.systems import SystemSpec, resolve_systems, speculates
from simulator.outputs.frontier import default_baseline
from simulator.outputs.metrics import overloaded
from simulator.outputs.summary import write_table_and_json
from simulator.outputs.verdicts import MET, UNMET, UNRESOLVED_STATUS, plan_engine, verdict
from simulator.runs.backends import Backend, Task, execute
from simulator.runs.replicates import combine, judge, unresolved
from simulator.runs.run import LoadPoint, RunSpec, StopRule
from simulator.runs.search import After, Ask, Driver
from simulator.runs.sweep import Sweep

PLAN_COLUMNS = ["system", "status", "gpus", "decode_gpus", "prefill_gpus", "replicas", "prefill_replicas",
                "max_rate_per_replica", "headroom", "attainment", "ttft_p99", "tps_per_user_p10",
                "throughput_per_gpu", "throughput_per_deployed_gpu", "cost_per_mtok", "why_unmet", "seeds", "attainment_lo", "attainment_hi",
                "headroom_lo", "headroom_hi", "gpus_lo", "binds", "binds_why"]


@dataclass(frozen=True)
class Target:
    tps: float                      # tok/s/user a request must reach
    attainment: float = 0.99        # share of requests that must reach it
    ttft_p99: float = 1.0           # seconds
    max_gpus: int = 64
    gpu_hour_cost: float = 1.0      # USD per GPU-hour
    rate_tolerance: float = 0.05    # relative precision of the headroom search


def check_plausible(sla_tps: float | None, ttft_p99: float, force: bool) -> None:
    """``--sla`` and ``--ttft-p99`` within the plausible ranges of an SLA (``MIN_TPS_PER_USER``, ``MAX_TTFT_S``)
    unless ``--force``: outside them a figure is far more often in the wrong unit than meant."""
    if force:
        return
    if sla_tps is not None and sla_tps < MIN_TPS_PER_USER:
        raise UserError(f"--sla {sla_tps:g}: expected a per-user speed of at least {MIN_TPS_PER_USER:g} tok/s/user, "
                        f"got {sla_tps:g} tok/s/user (--force to plan for it anyway)")
    if ttft_p99 > MAX_TTFT_S:
        raise UserError(f"--ttft-p99 {ttft_p99:g}: expected a TTFT p99 limit of at most {MAX_TTFT_S:g} seconds, got "
                        f"{ttft_p99:g} s (the flag is in seconds, not milliseconds; --force to plan for it anyway)")


def shortfall(row: dict, target: Target, ttft: bool = True) -> str | None:
    """None when the run meets the SLA, else why it does not (short, for plan.json's search log). ``ttft``
    False leaves TTFT out (a decode pool behind a separately sized prefill pool)."""
    why = stopped_why(row)
    if why is not None:
        return why
    if not row.get("steps") or not row.get("requests"):
        return "no finished requests"
    if row["saturated"]:
        return "saturated (prefill pool)" if row.get("prefill_saturated") else "saturated"
    if overloaded(row["requests"], row.get("unfinished") or 0):
        return f"overloaded ({row['unfinished'] / row['requests']:.0%} unfinished at the drain cap)"
    if row["sla_attainment"] < target.attainment:
        return f"attainment {row['sla_attainment']:.1%} < {target.attainment:.0%}"
    if ttft and row["ttft_p99"] > target.ttft_p99:
        return f"TTFT p99 {row['ttft_p99']:.2f} s > {target.ttft_p99:g} s"
    return None


def stopped_why(row: dict) -> str | None:
    """Why a run that stopped early (run.EarlyStop) fails, from the test that stopped it; None for a run that went
    the whole way, or one stopped at the window's end for saturation, whose flags say it as the full run's
    would."""
    s = row.get("stopped")
    if not s or s["test"] == "saturated":
        return None
    if s["test"] == "attainment":
        return (f"attainment at most {s['attainment_at_most']:.1%} ({s['slow']} requests too slow by "
                f"{s['at_s']:.0f} s; stopped there)")
    return f"TTFT p99 over the limit ({s['ttft_over']} requests over it by {s['at_s']:.0f} s; stopped there)"


def constraint(trial: Trial) -> str:
    """Which SLA constraint a failing run broke, in a planner's words (per-user speed, TTFT p99, the prefill pool
    or the decode pool's throughput), with the KV pool named where the run preempted requests (it was full)."""
    why = trial.why_not or ""
    if why.startswith("attainment"):
        kind = "per-user speed"
    elif why.startswith("TTFT"):
        kind = "TTFT p99"
    elif why.startswith("saturated (prefill pool)"):
        kind = "the prefill pool's throughput"
    else:  # saturated, overloaded, no finished requests: the queue grows
        kind = "throughput"
    rows = trial.row.get("replicate_rows") or [trial.row]
    preempted = sum(int(r.get("preemptions") or 0) for r in rows)
    return f"{kind}, the KV pool full ({preempted:,} preemptions)" if preempted else kind


def prefill_bound(why: str | None) -> bool:
    """Whether a shortfall is the prefill pool's (its backlog, or TTFT, which ends when prefill does)."""
    return bool(why) and (why.startswith("saturated (prefill pool)") or why.startswith("TTFT"))


# --- searches (generators: yield a candidate, receive whether it met the SLA) ----------------------------------

def fewest(cap: int, start: int = 1) -> Generator[int, bool, int | None]:
    """The smallest count in start..cap that meets, by doubling then bisection; None if even cap fails."""
    n, failed = start, start - 1
    while not (yield n):
        failed = n
        if n >= cap:
            return None
        n = min(2 * n, cap)
    met = n
    while met - failed > 1:
        mid = (failed + met) // 2
        if (yield mid):
            met = mid
        else:
            failed = mid
    return met


def most_traffic(met_at_one: bool, guess: float, tolerance: float,
                 floor: float = 1 / 64) -> Generator[float, bool, float]:
    """The largest traffic multiplier that meets (within ``1 + tolerance``), knowing whether 1 does; 0.0 when
    halving from 1 finds none down to ``floor``."""
    if met_at_one:
        lo, s = 1.0, max(guess, 1.0 + 2 * tolerance)
        while (yield s):
            lo, s = s, 2 * s
        hi = s
    else:
        hi, s = 1.0, 0.5
        while not (yield s):
            hi, s = s, s / 2
            if s < floor:
                return 0.0
        lo = s
    while hi / lo > 1 + tolerance:
        mid = math.sqrt(lo * hi)
        if (yield mid):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class Candidate:
    system: SystemSpec
    replicas: int
    scale: float = 1.0
    prefill: int | None = None  # prefill replicas; None: unbounded


DECODE, DECODE_TTFT, PREFILL = "decode", "decode+ttft", "prefill"  # what a probe is judged by


@dataclass(frozen=True)
class Probe:
    """A candidate as the plan's own searches ask for it: ``judged`` by the decode pool's SLA (``DECODE``, TTFT
    included with ``DECODE_TTFT``) or the prefill pool's (``PREFILL``), so that its runs may stop once they
    certainly fail; None: every seed in full (the reasons of its failure steer the search). ``lazy``: its first
    seed alone first (search.py)."""

    candidate: Candidate
    judged: str | None = None
    lazy: bool = False


@dataclass
class Trial:
    """One candidate run, as plan.json's search log keeps it."""

    phase: str
    replicas: int
    scale: float
    prefill_replicas: int | None
    row: dict
    why_not: str | None
    judged: str | None = None  # its Probe's, to complete it the same way (Planner.complete)

    @property
    def partial(self) -> bool:
        """Decided by its first seed alone (which failed): not met, but whether clearly is not known."""
        return bool(self.row.get("partial"))

    def log(self) -> dict:
        r = self.row
        rows = r.get("replicate_rows") or [r]
        stopped = sum(1 for x in rows if x.get("stopped"))
        # a run stopped early has figures of a run cut short: only its verdict is logged
        known = not stopped
        return {"phase": self.phase, "replicas": self.replicas, "traffic_scale": round(self.scale, 6),
                "prefill_replicas": self.prefill_replicas, "met": self.why_not is None, "why_not": self.why_not,
                "attainment": r.get("sla_attainment") if known else None, "ttft_p99": r.get("ttft_p99") if known else None,
                "saturated": bool(r.get("saturated")), "prefill_saturated": bool(r.get("prefill_saturated")),
                "overloaded": overloaded(r.get("requests") or 0, r.get("unfinished") or 0) if known else None,
                "arrival_rate": r.get("arrival_rate"),
                "resolved": None if self.partial else not unresolved(self.why_not),
                "attainment_lo": r.get("attainment_lo") if known else None,
                "attainment_hi": r.get("attainment_hi") if known else None,
                "seeds_run": r.get("seeds_run", len(rows)), "seeds_stopped_early": stopped}


@dataclass
class SystemPlan:
    system: SystemSpec
    trials: list[Trial] = field(default_factory=list)
    replicas: int | None = None
    met: bool = False
    final: dict | None = None
    max_scale: float | None = None
    prefill: int | None = None  # its prefill replicas, when disaggregated: the pool's, more if it fell short
    # where its search stands, for the progress line: the phase, and the bounds it has narrowed the answer to
    phase: str = "decode"
    counts: tuple[int, int | None] = (1, None)  # the fewest replicas lies in lo..hi (hi None: no count met yet)
    scales: tuple[float, float | None] = (1.0, None)  # the most traffic lies between these multipliers
    done: bool = False


class Planner:
    """Drives the searches of every system over the run store: all at once, each moving on as soon as its own
    candidate is decided (search.py); ``exhaustive``: as before early stops, every candidate at every seed in
    full, in rounds (one candidate per system still searching; benchmarks/bench_plan.py compares the two)."""

    def __init__(self, scn: LoadedScenario, out: Path, target: Target, backend: Backend, quick: bool = False,
                 seed: int | None = None, on_stored: Callable[[Task], None] | None = None, replicates: int = 1,
                 check_invariants: bool = False, on_queued: Callable[[list[Task]], None] | None = None,
                 exhaustive: bool = False):
        m = scn.model
        if m.traffic is None:
            raise UserError(f"{scn.path}: traffic: simulate plan sizes a deployment for open-loop traffic; the "
                            "scenario has none")
        self.key = scenario_key(scn, out)  # of the scenario as given, so that the sweep's report finds the plan
        if target.tps != m.sla.tps_targets[0]:
            targets = [target.tps, *(t for t in m.sla.tps_targets if t != target.tps)]
            scn = LoadedScenario(m.model_copy(update={"sla": m.sla.model_copy(update={"tps_targets": targets})}),
                                 scn.path, scn.overrides)
        self.scn = scn
        self.out = out
        self.target = target
        self.backend = backend
        self.quick = quick
        self.exhaustive = exhaustive
        self.seed = scn.model.seed if seed is None else seed
        self.seeds = [self.seed + i for i in range(replicates)]  # every candidate runs at each (replicates.py)
        self.on_stored = on_stored
        self.on_queued = on_queued  # runs as they go to the backend (progress: the total so far)
        self.systems = resolve_systems(scn)
        hw = scn.model.hardware
        self.gpr = hw.gpus_per_replica
        self.prefill_gpr = hw.prefill_gpus_per_replica or hw.gpus_per_replica
        self.disaggregated = scn.model.engine.prefill == "disaggregated"
        self.runs = 0
        # --check-invariants: every run this plan reads goes through the checker once, stored ones run again
        self.check_invariants = check_invariants
        self.checked: set[Path] = set()
        self.plans: dict[str, SystemPlan] = {}  # the searches under way (run), for the progress
        self.prefill_plan: SystemPlan | None = None
        self.driver: Driver | None = None  # held for the whole of run(), so that its workers outlive a phase

    # --- candidates -> runs ----------------------------------------------------------------------------------
    def variant(self, c: Candidate) -> LoadedScenario:
        m = self.scn.model
        hw = m.hardware.model_copy(update={"replicas": c.replicas, "prefill_replicas": c.prefill})
        update: dict = {"hardware": hw}
        if c.scale != 1.0:
            t = m.traffic
            if t.kind == "trace":
                update["traffic"] = t.model_copy(update={"rate_scale": t.rate_scale * c.scale})
            elif t.segments is not None:
                update["traffic"] = t.model_copy(update={"segments": [
                    s.model_copy(update={"rate": s.rate * c.scale}) for s in t.segments]})
            else:
                update["traffic"] = t.model_copy(update={"rate": t.rate * c.scale})
        return LoadedScenario(m.model_copy(update=update), self.scn.path, self.scn.overrides)

    def tasks(self, c: Candidate, seeds: list[int] | None = None, rule: StopRule | None = None) -> list[Task]:
        """The candidate's runs, one per seed; with ``rule``, runs that may stop early, stored apart when they do
        (under their key and the rule's)."""
        specs = [RunSpec(c.system, LoadPoint(None), seed, self.quick, self.check_invariants, rule)
                 for seed in (seeds or self.seeds)]
        sweep = Sweep(self.variant(c), specs, self.out)
        tag = json.dumps(rule.key(), sort_keys=True) if rule is not None else ""
        return [Task(sweep.scn, spec, sweep.store / f"{key}.json", None, sweep.store / (
                    hashlib.sha256((key + tag).encode()).hexdigest()[:20] + ".json") if rule is not None else None)
                for spec, key in zip(sweep.specs, sweep.keys(), strict=True)]

    def rule(self, judged: str) -> StopRule:
        t = self.target
        if judged == PREFILL:  # a prefill pool is judged by its backlog and TTFT alone (_prefill_one)
            return StopRule(t.tps, None, t.ttft_p99, decode_saturation=False)
        return StopRule(t.tps, t.attainment, t.ttft_p99 if judged == DECODE_TTFT else None)

    def one(self, judged: str) -> Callable[[dict], str | None]:
        """The judgement of one seed's run that ``judge`` combines over the seeds."""
        if judged == PREFILL:
            return self._prefill_one
        return lambda r: shortfall(r, self.target, judged == DECODE_TTFT)

    def ask(self, wanted: Candidate | Probe) -> Ask:
        """A search's candidate as the driver runs it: a plain candidate (a fleet's, a day plan's segments) or an
        unjudged probe in full at every seed; a judged probe with its stop rule (and lazily, if it says so)."""
        if isinstance(wanted, Candidate):
            return Ask(tuple(self.tasks(wanted)))
        if wanted.judged is None or self.exhaustive:
            return Ask(tuple(self.tasks(wanted.candidate)))
        return Ask(tuple(self.tasks(wanted.candidate, rule=self.rule(wanted.judged))), self.one(wanted.judged),
                   wanted.lazy)

    def evaluate(self, cands: list[Candidate], seeds: list[int] | None = None) -> list[dict]:
        """Run each candidate at every seed (together) and combine its seeds' rows; ``seeds`` (default: the
        plan's) a subset, e.g. a fleet plan's full-size confirmation (runs/fleet.py)."""
        if self.exhaustive:
            return self._evaluate_round(cands, seeds)

        def one(c: Candidate) -> Generator[Ask, dict, dict]:
            return (yield Ask(tuple(self.tasks(c, seeds))))

        found = self.drive({i: one(c) for i, c in enumerate(cands)})
        return [found[i] for i in range(len(cands))]

    def _evaluate_round(self, cands: list[Candidate], seeds: list[int] | None = None) -> list[dict]:
        tasks = [self.tasks(c, seeds) for c in cands]
        todo = list({t.store: t for group in tasks for t in group
                     if not t.store.is_file() or (self.check_invariants and t.store not in self.checked)}.values())
        if self.on_queued is not None:
            self.on_queued(todo)
        execute(todo, self.backend, self.on_stored)
        self.checked.update(t.store for t in todo)
        self.runs += len(todo)
        return [combine([json.loads(t.store.read_text()) for t in group]) for group in tasks]

    def drive(self, searches: dict[str, Generator], urgent=()) -> dict[str, object]:
        """Run the searches until all return (search.Driver; ``exhaustive``: in rounds)."""
        if self.exhaustive:
            return self._drive_rounds(searches)
        if self.driver is not None:
            return self.driver.run({k: (self, g) for k, g in searches.items()}, urgent)
        with Driver(self.backend) as driver:
            return driver.run({k: (self, g) for k, g in searches.items()}, urgent)

    def _drive_rounds(self, searches: dict[str, Generator]) -> dict[str, object]:
        """Advance every search a round at a time (one candidate each, run together) until all return."""
        results: dict[str, object] = {}
        asked: dict[str, Candidate] = {}
        for k, g in searches.items():
            try:
                asked[k] = next(g)
            except StopIteration as stop:
                results[k] = stop.value
        while asked:
            rows = self._evaluate_round([c.candidate if isinstance(c, Probe) else c for c in asked.values()])
            nxt = {}
            for (k, _), row in zip(asked.items(), rows, strict=True):
                try:
                    nxt[k] = searches[k].send(row)
                except StopIteration as stop:
                    results[k] = stop.value
            asked = nxt
        return results

    # --- the searches, in candidates ------------------------------------------------------------------------
    def _probe(self, plan: SystemPlan, phase: str, c: Candidate | Probe,
               judge: Callable[[dict], str | None]) -> Generator[Candidate | Probe, dict, bool]:
        row = yield c
        why = judge(row)
        if row.get("partial"):
            why = f"{why} (its first seed; the other {len(self.seeds) - 1} not run)"
        probe = c if isinstance(c, Probe) else Probe(c)
        c = probe.candidate
        plan.trials.append(Trial(phase, c.replicas, c.scale, c.prefill, row, why, probe.judged))
        return why is None

    def _counts(self, plan: SystemPlan, phase: str, make: Callable[[int], Candidate], cap: int,
                judge: Callable[[dict], str | None], judged: str | None = None,
                lazy: bool = False) -> Generator[Candidate | Probe, dict, int | None]:
        """The fewest count that meets (``fewest``), each count asked as a probe ``judged`` so (none: in full),
        at ``cap`` in full: that run is the answer's row, or the one that says why there is none."""
        search = fewest(cap)
        n = next(search)
        lo, hi = 1, None
        plan.counts = (lo, hi)
        try:
            while True:
                probe = Probe(make(n), judged if n < cap else None, lazy and n < cap)
                ok = yield from self._probe(plan, phase, probe, judge)
                lo, hi = (lo, n if hi is None else min(hi, n)) if ok else (max(lo, n + 1), hi)
                plan.counts = (lo, hi)
                n = search.send(ok)
        except StopIteration as stop:
            return stop.value

    def _judge(self, ttft: bool) -> Callable[[dict], str | None]:
        return lambda row: judge(row, lambda r: shortfall(r, self.target, ttft), self.target.attainment)

    def _prefill_judge(self, row: dict) -> str | None:
        return judge(row, self._prefill_one, None)

    def _prefill_one(self, row: dict) -> str | None:
        """A prefill pool is judged by TTFT alone (and its own backlog): decode speed is not its business."""
        why = stopped_why(row)
        if why is not None:
            return why
        if not row.get("requests"):
            return "no finished requests"
        if row.get("prefill_saturated"):
            return "prefill pool saturated"
        if row["ttft_p99"] > self.target.ttft_p99:
            return f"TTFT p99 {row['ttft_p99']:.2f} s > {self.target.ttft_p99:g} s"
        return None

    def prefill_system(self) -> SystemSpec:
        """The system the prefill pool is sized behind: the baseline (any would do; prompts and their prefill do
        not depend on the verification policy), else the first."""
        names = [s.name for s in self.systems]
        return self.systems[names.index(default_baseline(names, self.scn.model.sla.baseline) or names[0])]

    def prefill_search(self) -> tuple[SystemPlan, Generator]:
        """The search for the fewest prefill replicas whose TTFT p99 meets the limit, with the scenario's decode
        pool: prompts and their prefill are the same for every system, so one system (the baseline) stands for
        all. Its candidates are decided lazily (a pool too small fails at its first seed): only its answer and,
        when none meets, the largest pool tried are the report's."""
        base = self.prefill_system()
        plan = SystemPlan(base, phase="prefill")
        cap = max(self.target.max_gpus // self.prefill_gpr, 1)
        decode = self.scn.model.hardware.replicas

        def search() -> Generator:
            found = yield from self._counts(plan, "prefill", lambda p: Candidate(base, decode, 1.0, p), cap,
                                            self._prefill_judge, PREFILL, lazy=True)
            plan.done = True
            return found

        return plan, search()

    def decode_alone(self, plan: SystemPlan) -> Generator[Candidate | Probe, dict, None]:
        """The fewest decode replicas, then the headroom at that size. With a disaggregated prefill pool the
        decode pool is searched behind an unbounded one (TTFT is the prefill pool's business) while the prefill
        pool is sized, and confirmed with it afterwards (``with_prefill``). Every seed of a count runs (those
        that fail stop early): whether a count below the answer clearly fails is the report's ``gpus_lo``."""
        s = plan.system
        cap = max(self.target.max_gpus // self.gpr, 1)
        ttft = not self.disaggregated
        n = yield from self._counts(plan, "decode", lambda k: Candidate(s, k), cap, self._judge(ttft),
                                    DECODE_TTFT if ttft else DECODE)
        plan.met = n is not None
        plan.replicas = n if n is not None else cap
        plan.final = yield Candidate(s, plan.replicas)  # from the store: the search ran it
        if not self.disaggregated:  # else measured with the sized prefill pool in place (with_prefill)
            yield from self.headroom(plan)

    def headroom(self, plan: SystemPlan, prefill: int | None = None) -> Generator[Candidate | Probe, dict, None]:
        """The largest traffic multiplier the chosen deployment sustains at the SLA: the decode pool, with the
        sized prefill pool in place when prefill is disaggregated (more traffic loads both pools; behind an
        unbounded prefill pool the headroom overstated what the whole deployment sustains). For a system that
        fails at the GPU budget, how far short it is, down to half the traffic: below that the shortfall is
        stated as "less than -50%" (``headroom_hi``), since a failure that less traffic does not cure (a share of
        requests too slow at any load) sent the search down to 1/64 of the traffic on the largest deployment,
        the plan's most expensive runs, to learn nothing more. Its candidates are decided lazily: of those that
        fail, only the least traffic that clearly fails is the report's (``complete``)."""
        n = plan.replicas
        plan.phase = "headroom"
        guess = n / (n - 1) if plan.met and n > 1 else 2.0
        search = most_traffic(plan.met, guess, self.target.rate_tolerance, floor=1 / 64 if plan.met else 0.5)
        scale = next(search)
        ttft = prefill is not None or not self.disaggregated
        lo, hi = (1.0, None) if plan.met else (0.0, 1.0)
        plan.scales = (lo, hi)
        try:
            while True:
                ok = yield from self._probe(plan, "headroom",
                                            Probe(Candidate(plan.system, n, scale, prefill),
                                                  DECODE_TTFT if ttft else DECODE, lazy=True), self._judge(ttft))
                lo, hi = (max(lo, scale), hi) if ok else (lo, scale if hi is None else min(hi, scale))
                plan.scales = (lo, hi)
                scale = search.send(ok)
        except StopIteration as stop:
            plan.max_scale = stop.value
        yield from self.complete(plan, prefill)

    def complete(self, plan: SystemPlan, prefill: int | None) -> Generator[Candidate | Probe, dict, None]:
        """Run every seed of the headroom candidates that failed at their first seed, from the least traffic up,
        until one clearly fails: ``headroom_hi`` is the least traffic that clearly fails, and no other partial
        candidate is read by the report."""
        plan.phase = "completing"
        tried = sorted((t for t in plan.trials if t.phase == "headroom" and t.replicas == plan.replicas
                        and t.prefill_replicas == prefill and t.why_not is not None), key=lambda t: t.scale)
        for t in tried:
            if t.partial:
                probe = Probe(Candidate(plan.system, t.replicas, t.scale, t.prefill_replicas), t.judged)
                t.row = yield probe
                t.why_not = self._judge(t.judged == DECODE_TTFT)(t.row)
            if not unresolved(t.why_not):
                break

    def with_prefill(self, plan: SystemPlan, prefill: int) -> Generator[Candidate | Probe, dict, None]:
        """Confirm the sizes with the sized prefill pool in place, growing the two pools jointly: a prefill
        replica more while the SLA fails for the prefill pool's sake (its backlog, or TTFT), a decode replica
        more while it fails for the decode pool's; never one pool against the other's shortfall (more decode
        replicas do not prefill faster). Then the headroom with both pools. Its runs go the whole way: the
        reason a candidate fails picks the pool that grows."""
        cap = max(self.target.max_gpus // self.gpr, 1)
        prefill_cap = max(self.target.max_gpus // self.prefill_gpr, 1)
        n, p = plan.replicas, prefill
        plan.phase = "with-prefill"
        while True:
            ok = yield from self._probe(plan, "with-prefill", Candidate(plan.system, n, 1.0, p), self._judge(True))
            if ok or not plan.met:
                break
            if prefill_bound(plan.trials[-1].why_not):
                if p >= prefill_cap:
                    break
                p += 1
            elif n >= cap:
                break
            else:
                n += 1
        plan.met = plan.met and ok
        plan.replicas, plan.prefill = n, p
        plan.final = plan.trials[-1].row
        yield from self.headroom(plan, p)

    def system_search(self, plan: SystemPlan) -> Generator:
        """One system's whole search: its decode pool; when prefill is disaggregated, then (once the prefill
        pool is sized: ``After``) both pools with it and the headroom."""
        yield from self.decode_alone(plan)
        if self.disaggregated:
            plan.phase = "waiting for the prefill pool"
            found = yield After("\0prefill")
            yield from self.with_prefill(plan, found or max(self.target.max_gpus // self.prefill_gpr, 1))
        plan.phase, plan.done = "done", True

    def run(self) -> dict:
        if self.exhaustive:
            return self._run_rounds()
        searches = self.searches()
        with Driver(self.backend) as self.driver:
            found = self.drive(searches, urgent={"\0prefill"})  # every system's confirmation waits for it
        self.driver = None
        return self.finish(found)

    def searches(self) -> dict[str, Generator]:
        """Every search of the plan, to run at once (``run``, or beside other plans': hardware_choice.py)."""
        self.plans = {s.name: SystemPlan(s) for s in self.systems}
        searches: dict[str, Generator] = {k: self.system_search(p) for k, p in self.plans.items()}
        if self.disaggregated:
            self.prefill_plan, searches["\0prefill"] = self.prefill_search()
        return searches

    def finish(self, found: dict) -> dict:
        """The plan's document from its searches' results (``searches``)."""
        if self.disaggregated:
            prefill_met = found["\0prefill"] is not None
            prefill = found["\0prefill"] or max(self.target.max_gpus // self.prefill_gpr, 1)
            return self.document(self.plans, self.prefill_plan, prefill, prefill_met)
        return self.document(self.plans, None, None)

    def _run_rounds(self) -> dict:
        """The plan as before early stops: phase by phase, in rounds, every candidate in full."""
        plans = self.plans = {s.name: SystemPlan(s) for s in self.systems}
        searches = {k: self.decode_alone(p) for k, p in plans.items()}
        prefill_plan = prefill = None
        if self.disaggregated:
            prefill_plan, search = self.prefill_search()
            self.prefill_plan = prefill_plan
            searches["\0prefill"] = search
        found = self.drive(searches)
        if self.disaggregated:
            prefill_met = found["\0prefill"] is not None
            prefill = found["\0prefill"] or max(self.target.max_gpus // self.prefill_gpr, 1)
            self.drive({k: self.with_prefill(p, prefill) for k, p in plans.items()})
            for p in plans.values():
                p.phase, p.done = "done", True
            return self.document(plans, prefill_plan, prefill, prefill_met)
        for p in plans.values():
            p.phase, p.done = "done", True
        return self.document(plans, prefill_plan, prefill)

    # --- where the searches stand (the progress line) ------------------------------------------------------
    def outlook(self) -> list[dict]:
        """Per search (each system's, and the prefill pool's when disaggregated): ``name``, ``done``, what is
        still ``open`` (the GPU counts the answer lies between, or, once the count is decided, the headroom
        bracket) and ``left``, about how many more candidates it may ask, from its own bounds: the probes
        its bisection needs at most, and for phases not begun the probes of a typical one (a headroom search's
        first probe fails). Each candidate runs at every seed at most."""
        out = []
        if self.prefill_plan is not None:
            p = self.prefill_plan
            cap = max(self.target.max_gpus // self.prefill_gpr, 1)
            out.append({"name": "prefill pool", "done": p.done, "open": gpu_range(p.counts, self.prefill_gpr, cap),
                        "left": 0 if p.done else fewest_left(cap, [(t.prefill_replicas, t.why_not is None)
                                                                   for t in p.trials if t.phase == "prefill"])})
        tol = self.target.rate_tolerance
        cap = max(self.target.max_gpus // self.gpr, 1)
        for name, p in self.plans.items():
            if p.done:
                out.append({"name": name, "done": True, "open": "", "left": 0})
                continue
            if p.phase == "decode":
                left = fewest_left(cap, [(t.replicas, t.why_not is None) for t in p.trials if t.phase == "decode"])
                left += (1 if self.disaggregated else 0) + headroom_left(None, 2.0, tol)
                shown = gpu_range(p.counts, self.gpr, cap)
            elif p.phase in ("waiting for the prefill pool", "with-prefill"):
                left = 1 + headroom_left(None, 2.0, tol)
                shown = f"{p.replicas * self.gpr} decode GPUs, to confirm with the prefill pool"
            else:
                left = headroom_left(p.scales, 2.0, tol) if p.phase == "headroom" else 1
                lo, hi = p.scales
                bracket = f"{lo - 1:+.0%}..{hi - 1:+.0%}" if hi is not None else f"{lo - 1:+.0%} or more"
                shown = f"{(p.replicas or 0) * self.gpr + (p.prefill or 0) * self.prefill_gpr} GPUs, headroom {bracket}"
            out.append({"name": name, "done": False, "open": shown, "left": left})
        return out

    # --- output ----------------------------------------------------------------------------------------------
    def row_of(self, plan: SystemPlan, prefill: int | None) -> dict:
        prefill = plan.prefill if plan.prefill is not None else prefill
        f = plan.final
        decode_gpus = plan.replicas * self.gpr
        prefill_gpus = (prefill or 0) * self.prefill_gpr
        gpus = decode_gpus + prefill_gpus
        tokens_per_s = f["throughput_per_gpu"] * decode_gpus
        cost = gpus * self.target.gpu_hour_cost / (tokens_per_s * 3600) * 1e6 if tokens_per_s > 0 else float("nan")
        rate = f.get("arrival_rate") or float("nan")
        met = plan.met and gpus <= self.target.max_gpus
        lowest = self.lowest_possible(plan)
        status = MET if met else (UNRESOLVED_STATUS if lowest is not None and not plan.met else UNMET)
        headroom = plan.max_scale - 1.0 if plan.max_scale else float("nan")  # nan: no traffic met (unmet)
        binds, binds_why = self.binds(plan, prefill) if met else (None, None)
        return {
            "system": plan.system.name, "status": status, "gpus": gpus, "decode_gpus": decode_gpus,
            "prefill_gpus": prefill_gpus, "replicas": plan.replicas, "prefill_replicas": prefill,
            "max_rate_per_replica": plan.max_scale * rate / plan.replicas if plan.max_scale else float("nan"),
            "headroom": headroom,
            "attainment": f["sla_attainment"], "ttft_p99": f["ttft_p99"], "tps_per_user_p10": f["tps_per_user_p10"],
            # per decode GPU (as runs.csv), and per GPU of the whole deployment: the basis of the cost
            "throughput_per_gpu": f["throughput_per_gpu"],
            "throughput_per_deployed_gpu": tokens_per_s / gpus if gpus else float("nan"), "cost_per_mtok": cost,
            "why_unmet": None if met else self.why_unmet(plan, gpus),
            "seeds": len(self.seeds),
            "attainment_lo": f.get("attainment_lo"), "attainment_hi": f.get("attainment_hi"),
            "headroom_lo": headroom,
            "headroom_hi": self.headroom_hi(plan, prefill),
            # the fewest GPUs the data cannot rule out: below it every count probed clearly failed
            "gpus_lo": (lowest if lowest is not None else plan.replicas) * self.gpr + prefill_gpus,
            "binds": binds, "binds_why": binds_why,
        }

    def binds(self, plan: SystemPlan, prefill: int | None) -> tuple[str | None, str | None]:
        """The constraint a met system's size is set by, and the failing run's words: what fails first as its
        traffic grows (the least traffic multiplier its headroom search saw fail at the chosen size), else what
        failed one decode replica fewer at the scenario's traffic. (None, None) where neither was run."""
        grown = [t for t in plan.trials if t.replicas == plan.replicas and t.scale > 1.0 and t.why_not is not None
                 and t.phase in ("headroom", "with-prefill") and t.prefill_replicas == prefill
                 and not unresolved(t.why_not)]
        if grown:
            first = min(grown, key=lambda t: t.scale)
            return f"{constraint(first)} at {first.scale - 1:+.0%} traffic", first.why_not
        fewer = [t for t in plan.trials if t.replicas == plan.replicas - 1 and t.scale == 1.0
                 and t.why_not is not None and not unresolved(t.why_not)]
        if fewer:
            return f"{constraint(fewer[-1])} at {(plan.replicas - 1) * self.gpr} decode GPUs", fewer[-1].why_not
        return None, None

    def lowest_possible(self, plan: SystemPlan) -> int | None:
        """The fewest decode replicas not clearly failing: one above the largest count that clearly failed at
        the scenario's traffic, when some count between it and the answer was unresolved; else None."""
        sized = [t for t in plan.trials if t.scale == 1.0 and t.phase in ("decode", "with-prefill")]
        open_ = [t.replicas for t in sized if unresolved(t.why_not)
                 and (not plan.met or t.replicas < plan.replicas)]
        if not open_:
            return None
        failed = [t.replicas for t in sized if t.why_not is not None and not unresolved(t.why_not)
                  and t.replicas < min(open_)]
        return max(failed) + 1 if failed else 1

    def headroom_hi(self, plan: SystemPlan, prefill: int | None) -> float:
        """The smallest traffic multiplier seen to fail clearly at the chosen size, minus one: with ``headroom``
        (the largest seen to meet) the bracket the most sustainable traffic lies in. NaN when none failed."""
        fails = [t.scale for t in plan.trials if t.replicas == plan.replicas and t.phase in ("headroom", "with-prefill")
                 and t.prefill_replicas == prefill and t.why_not is not None and not unresolved(t.why_not)
                 and not t.partial]  # complete() ran every seed of those below the least clear failure
        return min(fails) - 1.0 if fails else float("nan")

    def why_unmet(self, plan: SystemPlan, gpus: int) -> str:
        """Why a system is unmet, in the words of its run at the size it ended on."""
        if plan.met:  # each pool met, but together they exceed the budget
            return f"{gpus} GPUs (decode + prefill) exceed --max-gpus {self.target.max_gpus}"
        last = next((t for t in reversed(plan.trials) if t.replicas == plan.replicas and t.scale == 1.0
                     and t.why_not is not None and t.phase != "headroom"), None)
        why = last.why_not if last is not None else "the SLA fails"
        return f"at {plan.replicas * self.gpr} decode GPUs: {why}"

    def document(self, plans: dict[str, SystemPlan], prefill_plan: SystemPlan | None, prefill: int | None,
                 prefill_met: bool = True) -> dict:
        rows = [self.row_of(p, prefill) for p in plans.values()]
        names = [r["system"] for r in rows]
        m = self.scn.model
        doc = {
            "scenario": self.scn.name,
            "scenario_key": self.key,
            "target": {"tps_per_user": self.target.tps, "attainment": self.target.attainment,
                       "ttft_p99_s": self.target.ttft_p99, "max_gpus": self.target.max_gpus,
                       "gpu_hour_cost_usd": self.target.gpu_hour_cost, "rate_tolerance": self.target.rate_tolerance},
            "traffic": m.traffic.model_dump(mode="json"),
            "arrival_rate": next((r["arrival_rate"] for p in plans.values() for r in [p.final] if r), None),
            "gpus_per_replica": self.gpr,
            "prefill": None if not self.disaggregated else {
                "replicas": prefill, "gpus_per_replica": self.prefill_gpr, "met": prefill_met,
                "why_unmet": None if prefill_met else next(
                    (t.why_not for t in reversed(prefill_plan.trials) if t.why_not), None),
                "search": [t.log() for t in prefill_plan.trials] if prefill_plan else []},
            "baseline": default_baseline(names, m.sla.baseline),
            "quick": self.quick, "seed": self.seed, "seeds": self.seeds, "overrides": list(self.scn.overrides),
            "runs_executed": self.runs,
            "table": table_facts(str(m.hardware.table), load_table_set(self.scn).provenance),
            "systems": {r["system"]: {**r, "search": [t.log() for t in plans[r["system"]].trials]} for r in rows},
            "no_speculation": [s.name for s in self.systems if not speculates(s)],
        }
        doc["verdict"] = verdict(doc)
        doc["engine"] = [plan_engine(doc)]
        return doc


def fewest_left(cap: int, seen: list[tuple[int, bool]]) -> int:
    """The most probes ``fewest(cap)`` can still make after ``seen`` (its probes so far and whether each met): its
    path replayed for every answer consistent with them."""
    most = 0
    for answer in range(1, cap + 2):  # cap + 1: none meets
        search, probes = fewest(cap), []
        try:
            n = next(search)
            while True:
                probes.append(n)
                n = search.send(n >= answer)
        except StopIteration:
            pass
        if [(n, n >= answer) for n in probes[:len(seen)]] == seen:
            most = max(most, len(probes) - len(seen))
    return most


def headroom_left(scales: tuple[float, float | None] | None, guess: float, tolerance: float) -> int:
    """About how many probes a headroom search (``most_traffic``) still makes: with its bracket known, the
    bisection's count to ``tolerance``; before it has one, its first probe (at ``guess``, taken to fail) and the
    bisection below it; one more to complete its least clear failure (``Planner.complete``)."""
    lo, hi = scales if scales is not None else (1.0, None)
    first = 0
    if hi is None:
        lo, hi, first = max(lo, 1.0), max(lo, 1.0) * max(guess, 1.0 + 2 * tolerance), 1
    ratio = math.log(hi / lo) / math.log(1 + tolerance) if lo > 0 else 1.0
    return first + (math.ceil(math.log2(ratio)) if ratio > 1 else 0) + 1


def gpu_range(counts: tuple[int, int | None], gpr: int, cap: int) -> str:
    lo, hi = counts
    if hi is not None and hi == lo:
        return f"{lo * gpr} GPUs"
    return f"{lo * gpr}-{(hi if hi is not None else cap) * gpr} GPUs"


def plan_table(doc: dict) -> pd.DataFrame:
    df = pd.DataFrame([{k: v for k, v in e.items() if k != "search"} for e in doc["systems"].values()],
                      columns=PLAN_COLUMNS)
    # the policy the engine should run (plan.json's engine); documents from before it have none
    pick = ((doc.get("engine") or [{}])[0]).get("policy")
    df["engine_pick"] = df["system"] == pick
    df["table_kind"] = (doc.get("table") or {}).get("kind", "unknown")  # what the GPU counts rest on
    df["table_expected_error"] = ((doc.get("table") or {}).get("expected_error") or {}).get("summary", "")
    return df


def table_facts(path: str, provenance: Provenance) -> dict:
    """What a plan records of the table its GPU counts rest on: where it is, its kind and how far to trust it."""
    return {"path": path, "kind": provenance.kind, "expected_error": provenance.expected_error}


def write_plan(out: Path, doc: dict) -> tuple[Path, Path]:
    return write_table_and_json(out, "plan", plan_table(doc), doc)


def scenario_key(scn: LoadedScenario, out: Path) -> str:
    """What a plan was made from (settings, input files, code), to tell whether a sweep's report may show it."""
    base = Sweep(scn, [], out)._base_key()
    return hashlib.sha256(json.dumps(base, sort_keys=True).encode()).hexdigest()[:20]


def matching_plan(out: Path, scn: LoadedScenario, quick: bool) -> dict | None:
    """plan.json in ``out`` when it was made from this scenario (and --quick setting), else None."""
    path = out / "plan.json"
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if doc.get("scenario_key") != scenario_key(scn, out) or bool(doc.get("quick")) != quick:
        return None
    return doc
