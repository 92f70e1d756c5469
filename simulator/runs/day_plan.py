"""A day, not an hour: the capacity plan per segment of traffic that varies by design, and GPU-hours per day.

For a tide (Poisson ``traffic.segments``) or a replayed trace (cut into segments of its own timeline), each
segment is planned as stationary Poisson traffic at that segment's mean rate, on runs of ``segment_run_s``
simulated seconds (the scenario's ``run.duration_s`` of a tide is the whole compressed day, not a stationary
run). The fleet an autoscaler would run in each segment is the fewest GPUs meeting the SLA there; summed over
the segments (GPUs x the segment's length in the scenario's real time, before ``traffic.time_scale``
compresses it for simulation) it gives GPU-hours per day per system, and at ``gpu_hour_cost`` the money. Not
modelled: the autoscaler's lag and the transitions between segments (a segment starts in steady state at its
size), and, for a trace, its burstiness within a segment (its arrivals become Poisson at the segment's rate).

Economy: the GPUs needed are monotone in the rate, so distinct rates are planned from the highest down (equal
rates share one plan). The peak is planned in full by the ordinary ``Planner`` (decode search, prefill pool,
headroom); each lower rate starts from the count its rate implies (decode: the rate over the peak's most
sustainable traffic per replica; prefill: the next higher rate's pool scaled by the rate) and confirms it,
usually with a run or two (``settle``): fewer while that still meets, more while it fails, never above the next
higher rate's count, which the monotonicity makes an upper bound. Every run goes through the
run store and backend as the ordinary plan's do (resumable, Ray-capable).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario, Traffic
from simulator.inputs.workload import read_azure_trace
from simulator.outputs.summary import write_table_and_json
from simulator.outputs.verdicts import (
    MET,
    MET_AT_HIGHER_RATE,
    UNMET,
    UNRESOLVED_STATUS,
    day_engine,
    day_verdict,
)
from simulator.runs.backends import Backend, Task
from simulator.runs.plan import Candidate, Planner, SystemPlan, Target
from simulator.runs.replicates import unresolved

DAY_S = 86400.0
DAY_COLUMNS = ["segment", "start", "duration", "rate", "system", "gpus", "decode_gpus", "prefill_gpus", "status",
               "attainment", "ttft_p99", "why_unmet", "gpus_lo", "engine_pick"]
SEGMENT_RUN_S = 40.0  # peak.yaml's stationary run: long enough past a warm-up of a fifth of it


@dataclass(frozen=True)
class Segment:
    index: int
    start_s: float     # from the start of the day (a trace: of the recording), in the scenario's real time
    duration_s: float
    rate: float        # mean arrivals per second over the segment, as the simulation offers them

    @property
    def label(self) -> str:
        return clock(self.start_s)


def clock(seconds: float) -> str:
    """HH:MM of an offset from the start of the day (past 24 h the hours go on counting)."""
    minutes = round(seconds / 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def segments_of(scn: LoadedScenario, segment_s: float | None = None) -> list[Segment]:
    """The segments of the scenario's traffic: a tide's own, or a trace cut into equal pieces of about
    ``segment_s`` recorded seconds (default an hour) from ``traffic.start_s`` to its last arrival."""
    t = scn.model.traffic
    where = f"{scn.path}: traffic"
    if t is None:
        raise UserError(f"{where}: a day plan needs open-loop traffic that varies by design (a tide's segments or "
                        "a replayed trace); the scenario has none")
    if t.kind == "poisson":
        if t.segments is None:
            raise UserError(f"{where}.segments: --per-segment plans each segment of a tide (traffic.segments) or "
                            f"of a replayed trace; this traffic has one constant rate ({t.rate:g} requests/s): "
                            "plan it without --per-segment")
        if segment_s is not None:
            raise UserError(f"{where}: --segment-s cuts a replayed trace; a tide's segments are its own "
                            "(traffic.segments)")
        out, start = [], 0.0
        for i, s in enumerate(t.segments):
            out.append(Segment(i, start, s.duration_s, s.rate))
            start += s.duration_s
        return out
    arrivals = read_azure_trace(scn.resolve(t.trace))["t"].to_numpy()
    arrivals = arrivals[arrivals >= t.start_s]
    span = float(arrivals.max() - t.start_s) if len(arrivals) else 0.0
    if span <= 0:
        raise UserError(f"{where}.start_s: no recorded arrivals after {t.start_s:g} s to cut into segments")
    n = max(1, round(span / (segment_s or 3600.0)))
    length = span / n
    out = []
    for i in range(n):
        a, b = t.start_s + i * length, t.start_s + (i + 1) * length
        inside = ((arrivals >= a) & ((arrivals < b) if i < n - 1 else (arrivals <= b))).sum()
        # replayed at rate_scale x the recorded rate: the simulated service sees rate_scale x as many requests
        out.append(Segment(i, a, length, float(inside) / length * t.rate_scale))
    return out


def stationary(scn: LoadedScenario, rate: float, run_s: float) -> LoadedScenario:
    """The scenario with Poisson traffic at one rate and stationary runs of ``run_s`` seconds (warm-up a fifth;
    --quick keeps the scenario's quick run)."""
    m = scn.model
    run = m.run.model_copy(update={"duration_s": run_s, "warmup_s": run_s / 5})
    model = m.model_copy(update={"traffic": Traffic(kind="poisson", rate=rate), "run": run})
    return LoadedScenario(model, scn.path, scn.overrides)


@dataclass(frozen=True)
class SegmentCandidate(Candidate):
    rate: float = 0.0  # the segment's arrivals per second (the planner's own scenario is at the peak's)


class SegmentPlanner(Planner):
    """The ordinary planner over the peak's stationary scenario; a ``SegmentCandidate`` runs at its own rate."""

    def variant(self, c: Candidate) -> LoadedScenario:
        scn = super().variant(c)
        if not isinstance(c, SegmentCandidate):
            return scn
        m = scn.model
        return LoadedScenario(m.model_copy(update={"traffic": Traffic(kind="poisson", rate=c.rate * c.scale)}),
                              scn.path, scn.overrides)


@dataclass
class RatePlan:
    """What one distinct rate needs: the prefill pool and, per system, the decode replicas and how they were
    settled (the runs at this rate in ``plans[system].trials``)."""

    rate: float
    prefill: int | None = None
    prefill_status: str = MET
    prefill_why: str | None = None
    decode: dict[str, int] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    why: dict[str, str | None] = field(default_factory=dict)
    plans: dict[str, SystemPlan] = field(default_factory=dict)
    prefill_plan: SystemPlan | None = None


def settle(probe: Callable[[int], Generator[Candidate, dict, bool]], start: int, ceiling: int,
           ceiling_met: bool) -> Generator[Candidate, dict, tuple[int, str]]:
    """The fewest count in 1..ceiling that meets, starting from ``start``: fewer while that still meets, more
    while it fails (each way the next count first, then strides that double, then bisection), up to ``ceiling``. ``ceiling_met``: the ceiling met
    at a higher rate, so it is not run again at this one (monotonicity) and is the answer, with status
    ``met_at_higher_rate``, when every count below it fails here; otherwise it is run, and unmet if it fails."""
    n = min(max(start, 1), ceiling)
    if (yield from probe(n)):
        met, failed, step = n, 0, 1  # the next one down first, then galloping, then bisection
        while met > 1 and not failed:
            k = max(met - step, 1)
            if (yield from probe(k)):
                met, step = k, 2 * step
            else:
                failed = k
        while failed and met - failed > 1:
            mid = (failed + met) // 2
            if (yield from probe(mid)):
                met = mid
            else:
                failed = mid
        return met, MET
    if n >= ceiling:
        return ceiling, MET_AT_HIGHER_RATE if ceiling_met else UNMET
    if not ceiling_met and not (yield from probe(ceiling)):
        return ceiling, UNMET
    failed, met, seen = n, ceiling, not ceiling_met
    k = n + 1  # the implied count is usually close: the next one up first
    while k < met:
        if (yield from probe(k)):
            met, seen = k, True
            break
        failed, k = k, min(2 * k, met)
    while met - failed > 1:
        mid = (failed + met) // 2
        if (yield from probe(mid)):
            met, seen = mid, True
        else:
            failed = mid
    return met, MET if seen else MET_AT_HIGHER_RATE


class DayPlanner:
    """Plans every segment of a tide or a trace; ``run()`` returns the day plan document (day_plan.json)."""

    def __init__(self, scn: LoadedScenario, out: Path, target: Target, backend: Backend, quick: bool = False,
                 seed: int | None = None, on_stored: Callable[[Task], None] | None = None, replicates: int = 1,
                 segment_s: float | None = None, segment_run_s: float = SEGMENT_RUN_S,
                 say: Callable[[str], None] = lambda line: None, check_invariants: bool = False,
                 on_queued: Callable[[list[Task]], None] | None = None):
        self.scn = scn
        self.segments = segments_of(scn, segment_s)
        self.segment_s = segment_s
        if segment_run_s <= 0:
            raise UserError(f"--segment-run-s {segment_run_s:g}: expected a positive number of seconds")
        self.segment_run_s = segment_run_s
        rates = sorted({s.rate for s in self.segments}, reverse=True)
        if rates[0] <= 0:
            raise UserError(f"{scn.path}: traffic: every segment's rate is 0; nothing arrives to plan for")
        self.rates = [r for r in rates if r > 0]
        self.peak = self.rates[0]
        self.target = target
        self.quick = quick
        self.say = say
        self.planner = SegmentPlanner(stationary(scn, self.peak, segment_run_s), out, target, backend, quick, seed,
                                      on_stored, replicates, check_invariants, on_queued)

    # --- a rate below the peak, from the plan of the next higher one ----------------------------------------
    def _probe_for(self, plan: SystemPlan, phase: str, make: Callable[[int], Candidate],
                   judge: Callable[[dict], str | None]):
        def probe(n: int) -> Generator[Candidate, dict, bool]:
            return (yield from self.planner._probe(plan, phase, make(n), judge))
        return probe

    def _prefill(self, rp: RatePlan, above: RatePlan, base, decode: int) -> Generator[Candidate, dict, None]:
        p = self.planner
        rp.prefill_plan = SystemPlan(base)
        make = lambda k: SegmentCandidate(base, decode, 1.0, k, rate=rp.rate)  # noqa: E731
        start = math.ceil(above.prefill * rp.rate / above.rate)
        rp.prefill, status = yield from settle(self._probe_for(rp.prefill_plan, "prefill", make, p._prefill_judge),
                                               start, above.prefill, above.prefill_status != UNMET)
        rp.prefill_status = status
        if status != MET and rp.prefill_plan.trials:
            rp.prefill_why = rp.prefill_plan.trials[-1].why_not

    def _decode(self, rp: RatePlan, above: RatePlan, system, capacity: float) -> Generator[Candidate, dict, None]:
        """The fewest decode replicas at this rate with its prefill pool in place (TTFT included: with the pool
        sized it is met, and a prefill-bound failure is the pool's, which more decode replicas do not mend)."""
        p = self.planner
        plan = rp.plans[system.name] = SystemPlan(system)
        ceiling = above.decode[system.name]
        start = math.ceil(rp.rate / capacity) if capacity > 0 else math.ceil(ceiling * rp.rate / above.rate)
        make = lambda k: SegmentCandidate(system, k, 1.0, rp.prefill, rate=rp.rate)  # noqa: E731
        n, status = yield from settle(self._probe_for(plan, "decode", make, p._judge(True)), start, ceiling,
                                      above.status[system.name] in (MET, MET_AT_HIGHER_RATE))
        last = plan.trials[-1] if plan.trials else None
        if status == UNMET and last is not None and unresolved(last.why_not):
            status = UNRESOLVED_STATUS
        rp.decode[system.name], rp.status[system.name] = n, status
        rp.why[system.name] = None if status in (MET, MET_AT_HIGHER_RATE) else (
            last.why_not if last is not None else "unmet at a higher rate")

    def _prefill_of(self, rp: RatePlan, above: RatePlan) -> dict[str, Generator]:
        """The prefill search of ``rp`` (its ceiling is the pool of the next higher rate), when disaggregated."""
        p = self.planner
        if not p.disaggregated:
            return {}
        return {"\0prefill": self._prefill(rp, above, above.prefill_plan.system, p.scn.model.hardware.replicas)}

    # --- the day --------------------------------------------------------------------------------------------
    def run(self) -> dict:
        p = self.planner
        self.say(f"peak {self.peak:g} requests/s: the full plan ({len(p.systems)} systems)")
        peak_doc = p.run()
        top = RatePlan(self.peak)
        if p.disaggregated:
            pre = peak_doc["prefill"]
            top.prefill = pre["replicas"]
            top.prefill_status = MET if pre["met"] else UNMET
            top.prefill_why = pre.get("why_unmet")
            top.prefill_plan = SystemPlan(p.prefill_system())  # the system the peak's prefill search ran
        capacity = {}
        for name, e in peak_doc["systems"].items():
            top.decode[name] = e["replicas"]
            top.status[name] = e["status"]
            top.why[name] = e.get("why_unmet")
            capacity[name] = e["max_rate_per_replica"] if e["status"] == MET else 0.0
        self.say(self._line(top))
        chain = [top, *(RatePlan(r) for r in self.rates[1:])]
        if len(chain) > 1:
            p.drive(self._prefill_of(chain[1], top))
        # a rate's decode searches need its prefill pool; the next rate's prefill search needs only this rate's
        # pool, so it runs alongside them (rounds stay full)
        for i in range(1, len(chain)):
            rp, above = chain[i], chain[i - 1]
            searches = {s.name: self._decode(rp, above, s, capacity[s.name]) for s in p.systems}
            if i + 1 < len(chain):
                searches.update(self._prefill_of(chain[i + 1], rp))
            p.drive(searches)
            self.say(self._line(rp))
        return self.document({rp.rate: rp for rp in chain}, peak_doc)

    def _line(self, rp: RatePlan) -> str:
        when = ", ".join(s.label for s in self.segments if s.rate == rp.rate)
        gpus = ", ".join(f"{s.name} {self.gpus(rp, s.name)}"
                         + ("" if rp.status[s.name] in (MET, MET_AT_HIGHER_RATE) else " (!)")
                         for s in self.planner.systems)
        return f"{rp.rate:g} requests/s ({when}): GPUs {gpus}; {self.planner.runs} runs so far"

    def gpus(self, rp: RatePlan, system: str) -> int:
        p = self.planner
        return rp.decode[system] * p.gpr + (rp.prefill or 0) * p.prefill_gpr

    def document(self, plans: dict[float, RatePlan], peak_doc: dict) -> dict:
        p = self.planner
        t = self.target
        names = [s.name for s in p.systems]
        span = sum(s.duration_s for s in self.segments)
        rows = []
        for seg in self.segments:
            rp = plans.get(seg.rate)
            for name in names:
                if rp is None:  # a segment where nothing arrives needs no GPUs
                    rows.append({"segment": seg.label, "start": seg.start_s, "duration": seg.duration_s,
                                 "rate": seg.rate, "system": name, "gpus": 0, "decode_gpus": 0, "prefill_gpus": 0,
                                 "status": MET, "attainment": None, "ttft_p99": None, "why_unmet": None,
                                 "gpus_lo": 0})
                    continue
                row = self._measured(rp, name, peak_doc)
                status = rp.status[name]
                if rp.prefill_status != MET and status in (MET, MET_AT_HIGHER_RATE):
                    status = rp.prefill_status  # the prefill pool's, when it was taken from above or unmet
                rows.append({"segment": seg.label, "start": seg.start_s, "duration": seg.duration_s, "rate": seg.rate,
                             "system": name, "gpus": self.gpus(rp, name), "decode_gpus": rp.decode[name] * p.gpr,
                             "prefill_gpus": (rp.prefill or 0) * p.prefill_gpr, "status": status,
                             "attainment": row.get("sla_attainment") if row else None,
                             "ttft_p99": row.get("ttft_p99") if row else None,
                             "why_unmet": None if status in (MET, MET_AT_HIGHER_RATE) else self._why(rp, name),
                             "gpus_lo": self._gpus_lo(rp, name, peak_doc)})
        baseline = peak_doc.get("baseline")
        systems = day_totals(rows, span, t.gpu_hour_cost, baseline)
        doc = {
            "scenario": self.scn.name,
            "target": peak_doc["target"],
            "traffic": self.scn.model.traffic.model_dump(mode="json"),
            "segment_s": self.segment_s,
            "segment_run_s": self.segment_run_s if not self.quick else self.scn.model.run.quick_duration_s,
            "span_s": span, "days_per_span": span / DAY_S,
            "segments": [{"segment": s.label, "start": s.start_s, "duration": s.duration_s, "rate": s.rate}
                         for s in self.segments],
            "baseline": baseline, "quick": self.quick, "seeds": p.seeds, "overrides": list(self.scn.overrides),
            "disaggregated": p.disaggregated,
            "rows": rows,
            "systems": systems,
            # from the peak down; the peak's searches are in peak_plan
            "rates": [{"rate": r, "prefill_replicas": rp.prefill, "prefill_status": rp.prefill_status,
                       "decode_replicas": rp.decode, "status": rp.status, "why_unmet": rp.why,
                       "search": {k: [tr.log() for tr in sp.trials] for k, sp in rp.plans.items()},
                       "prefill_search": [tr.log() for tr in rp.prefill_plan.trials]
                       if rp.prefill_plan is not None and rp.rate != self.peak else []}
                      for r, rp in plans.items()],
            "peak_plan": peak_doc,
            "runs_executed": p.runs,
            "no_speculation": peak_doc["no_speculation"],
        }
        doc["verdict"] = day_verdict(doc)
        doc["engine"] = day_engine(doc)
        picks = {(e["segment"], e["rate"]): e["policy"] for e in doc["engine"]}
        for r in rows:
            r["engine_pick"] = r["system"] == picks[(r["segment"], r["rate"])]
        return doc

    def _gpus_lo(self, rp: RatePlan, system: str, peak_doc: dict) -> int:
        """The fewest GPUs the seeds cannot rule out at this rate, as a plan's ``gpus_lo``: one decode replica
        above the largest count that clearly failed, when a count between it and the answer was unresolved; else
        the answer. The prefill pool is one for every system at a rate, so it moves no system against another."""
        if rp.rate == self.peak:
            return peak_doc["systems"][system]["gpus_lo"]
        p = self.planner
        n, plan = rp.decode[system], rp.plans.get(system)
        trials = plan.trials if plan is not None else []
        sized = rp.status[system] in (MET, MET_AT_HIGHER_RATE)
        open_ = [t.replicas for t in trials if unresolved(t.why_not) and (not sized or t.replicas < n)]
        if open_:
            failed = [t.replicas for t in trials if t.why_not is not None and not unresolved(t.why_not)
                      and t.replicas < min(open_)]
            n = max(failed) + 1 if failed else 1
        return n * p.gpr + (rp.prefill or 0) * p.prefill_gpr

    @staticmethod
    def _why(rp: RatePlan, system: str) -> str:
        """Why a segment is unmet for a system: its decode pool's shortfall, else its prefill pool's."""
        return rp.why.get(system) or f"prefill pool: {rp.prefill_why or 'the TTFT limit fails'}"

    def _measured(self, rp: RatePlan, system: str, peak_doc: dict) -> dict | None:
        """The run at the chosen size and this rate (for its attainment and TTFT), None when none ran there."""
        if rp.rate == self.peak:
            e = peak_doc["systems"][system]
            return {"sla_attainment": e["attainment"], "ttft_p99": e["ttft_p99"]}
        plan = rp.plans.get(system)
        hits = [tr.row for tr in (plan.trials if plan else []) if tr.replicas == rp.decode[system]]
        return hits[-1] if hits else None


def day_totals(rows: list[dict], span_s: float, gpu_hour_cost: float, baseline: str | None) -> dict[str, dict]:
    """Per system, from the per-segment rows (gpus, duration in the scenario's real seconds, status): GPU-hours
    over the span and per day (the span repeated to fill 24 h), USD per day, the saving over the baseline and the
    GPU-hours of the peak's fleet kept all day."""
    per_day = DAY_S / span_s
    systems = {}
    for name in dict.fromkeys(r["system"] for r in rows):
        mine = [r for r in rows if r["system"] == name]
        gpu_hours = sum(r["gpus"] * r["duration"] for r in mine) / 3600
        peak_gpus = max(r["gpus"] for r in mine)
        unmet = [r for r in mine if r["status"] not in (MET, MET_AT_HIGHER_RATE)]
        systems[name] = {
            "system": name, "gpu_hours": gpu_hours, "gpu_hours_per_day": gpu_hours * per_day,
            "usd_per_day": gpu_hours * per_day * gpu_hour_cost,
            "peak_gpus": peak_gpus, "fewest_gpus": min(r["gpus"] for r in mine),
            # the fleet sized for the peak and kept all day: what the autoscaler's plan is measured against
            "static_gpu_hours_per_day": peak_gpus * DAY_S / 3600,
            "unmet_segments": [r["segment"] for r in unmet],
            "why_unmet": [f"{r['segment']}: {r.get('why_unmet') or 'unmet'}" for r in unmet],
        }
    if baseline in systems:
        b = systems[baseline]["gpu_hours_per_day"]
        for e in systems.values():
            e["saving_gpu_hours_per_day"] = b - e["gpu_hours_per_day"]
            e["saving_usd_per_day"] = e["saving_gpu_hours_per_day"] * gpu_hour_cost
            e["saving_share"] = e["saving_gpu_hours_per_day"] / b if b else None
    return systems


def day_table(doc: dict) -> pd.DataFrame:
    return pd.DataFrame(doc["rows"], columns=DAY_COLUMNS)


def write_day_plan(out: Path, doc: dict) -> tuple[Path, Path]:
    return write_table_and_json(out, "day_plan", day_table(doc), doc)
