"""Fleet plans (``simulate plan --probe-replicas R``): the GPUs a traffic of hundreds to ~1,000 GPUs needs, from a
probe of a few replicas, confirmed by one run at full size.

The plain plan (``plan.py``) searches over whole deployments; each candidate costs CPU in proportion to its
replicas (~0.4 s per replica for an 8-second run of peak.yaml), so at ~1,000 GPUs its doubling-and-bisection
search runs for hours. Under the router one replica's behaviour does not depend on how many stand beside it
(14,032 / 13,526 / 13,521 tok/s/GPU at 1x / 2x / 4x replicas and traffic, issue 21), so what one replica sustains
at the SLA can be measured on a few and multiplied. Per system:

1. probe: R decode replicas serve a share ``x`` of the scenario's traffic (behind an unbounded prefill pool when
   prefill is disaggregated, as the plain plan's decode search); ``plan.most_traffic`` finds the largest share
   that meets the SLA over the plan's seeds, ``x_lo``, and the smallest seen to fail clearly, ``x_hi``;
2. derive: the full traffic on N = ceil(R / x_lo) replicas puts at most what a probe replica met on each
   (``replicas_needed``); with a disaggregated prefill pool, a probe of R prefill replicas judged by TTFT and its
   backlog (once for all systems: prompts do not depend on the verification policy; behind the baseline's decode
   pool sized from its probe) gives P = ceil(R / y_lo) prefill replicas the same way;
3. predict: the probe at the full size's load per replica (share R / N) over the plan's seeds gives the
   attainment's 95% interval the full size should land in;
4. confirm: the scenario's own traffic on N decode (+ P prefill) replicas, one run per system at the plan's first
   seed (it holds N / R times a probe run's requests, so its own sampling noise is well inside the probe's
   interval), through the run store and the backend: ``--backend ray`` spreads the confirmations over a cluster.
   A system is met when its confirmation meets the SLA; the plan reports whether its attainment lies within the
   predicted interval (widened by one request of a probe run, the probe's resolution) and whether its SLA verdict
   agrees with the prediction's.

The probe's search starts where each probe replica carries what one replica of a ``--max-gpus`` fleet would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario
from simulator.outputs.summary import write_table_and_json
from simulator.outputs.verdicts import fleet_sentence, verdict
from simulator.runs.backends import Backend, Task
from simulator.runs.plan import (
    PLAN_COLUMNS,
    Candidate,
    Planner,
    SystemPlan,
    Target,
    Trial,
    most_traffic,
    plan_table,
)
from simulator.runs.replicates import unresolved

#: plan.csv's columns beyond ``simulate plan``'s, for a fleet plan
FLEET_COLUMNS = ["probe_replicas", "predicted_attainment", "confirmed", "confirm_within"]


def replicas_needed(probe_replicas: int, share: float) -> int:
    """Replicas for the whole traffic when ``probe_replicas`` met ``share`` of it: each then carries at most what
    a probe replica met. (Rounded to 1e-9 first, so that 4 / 0.01 is 400, not 401.)"""
    if not share > 0:
        raise ValueError(f"a probe share must be positive, got {share}")
    return math.ceil(round(probe_replicas / share, 9))


def at_full_traffic(row: dict, share: float) -> dict:
    """A probe's row standing for the full traffic (where no full-size run was made): its arrival rate divided by
    the share of the traffic it served, the rest as measured."""
    rate = row.get("arrival_rate")
    return {**row, "arrival_rate": rate / share if rate else rate}


def within(value: float, lo: float, hi: float, resolution: float) -> bool:
    """Whether ``value`` lies in [lo, hi] widened by ``resolution`` on each side."""
    return lo - resolution - 1e-12 <= value <= hi + resolution + 1e-12


@dataclass
class FleetSystem(SystemPlan):
    probe_lo: float = 0.0                 # largest traffic share the probe met (0: none down to the search's floor)
    probe_hi: float = math.nan            # smallest it clearly failed
    predicted: dict | None = None         # the probe at the full size's load per replica, combined over seeds
    predicted_why: str | None = None
    confirmation: dict | None = None      # the full-size run
    confirmation_why: str | None = None
    reason: str | None = None             # why no full-size run: the probe never met, or the count is over the cap


class FleetPlanner(Planner):
    """A plan from probes of ``probe_replicas`` replicas, confirmed at full size (module docstring)."""

    def __init__(self, scn: LoadedScenario, out: Path, target: Target, backend: Backend, probe_replicas: int,
                 quick: bool = False, seed: int | None = None, on_stored: Callable[[Task], None] | None = None,
                 replicates: int = 1, check_invariants: bool = False,
                 on_queued: Callable[[list[Task]], None] | None = None):
        super().__init__(scn, out, target, backend, quick, seed, on_stored, replicates, check_invariants, on_queued)
        if probe_replicas < 1:
            raise UserError(f"--probe-replicas: expected a positive count, got {probe_replicas}")
        self.probe = probe_replicas
        cap = target.max_gpus // self.gpr
        if probe_replicas > cap:
            raise UserError(f"--probe-replicas {probe_replicas}: the probe needs {probe_replicas * self.gpr} GPUs, "
                            f"more than --max-gpus {target.max_gpus}; a fleet plan probes a few replicas of a larger "
                            "deployment")
        # the search's first share: each probe replica carries what one replica of a --max-gpus fleet would
        self.start = probe_replicas / cap
        self.prefill_lo = 0.0
        self.prefill_hi = math.nan

    # --- the probes -------------------------------------------------------------------------------------------
    def probe_search(self, plan: SystemPlan, phase: str, make: Callable[[float], Candidate],
                     judge: Callable[[dict], str | None]) -> Generator[Candidate, dict, tuple[float, float]]:
        """The largest share of the traffic the probe meets (0 when none down to 1/64 of the first share) and the
        smallest above it seen to fail clearly (NaN when none)."""
        met = yield from self._probe(plan, phase, make(self.start), judge)
        search = most_traffic(met, 2.0, self.target.rate_tolerance)
        m = next(search)
        try:
            while True:
                ok = yield from self._probe(plan, phase, make(self.start * m), judge)
                m = search.send(ok)
        except StopIteration as stop:
            lo = self.start * stop.value
        fails = [t.scale for t in plan.trials if t.phase == phase and t.why_not is not None
                 and not unresolved(t.why_not) and t.scale > lo]
        return lo, (min(fails) if fails else math.nan)

    def decode_probe(self, plan: FleetSystem) -> Generator[Candidate, dict, None]:
        s = plan.system
        plan.probe_lo, plan.probe_hi = yield from self.probe_search(
            plan, "probe", lambda x: Candidate(s, self.probe, x), self._judge(not self.disaggregated))

    def prefill_probe(self, plan: SystemPlan, decode_share: float) -> Generator[Candidate, dict, None]:
        """R prefill replicas, judged by TTFT and their backlog, behind the decode pool that the same traffic
        needs by ``decode_share`` (the baseline's probe): TTFT ends when prefill does, so the decode pool only
        has to keep the run representative."""
        def make(y: float) -> Candidate:
            return Candidate(plan.system, replicas_needed(self.probe, decode_share / y), y, self.probe)

        self.prefill_lo, self.prefill_hi = yield from self.probe_search(plan, "prefill-probe", make,
                                                                        self._prefill_judge)

    def predict(self, plan: FleetSystem) -> Generator[Candidate, dict, None]:
        """The probe at the full size's load per replica: the attainment interval the confirmation should meet."""
        c = Candidate(plan.system, self.probe, self.probe / plan.replicas)
        judge = self._judge(not self.disaggregated)
        yield from self._probe(plan, "predict", c, judge)
        plan.predicted, plan.predicted_why = plan.trials[-1].row, plan.trials[-1].why_not

    # --- the plan ---------------------------------------------------------------------------------------------
    def run(self) -> dict:
        plans = {s.name: FleetSystem(s) for s in self.systems}
        self.drive({k: self.decode_probe(p) for k, p in plans.items()})
        decode_cap = max(self.target.max_gpus // self.gpr, 1)
        for p in plans.values():
            if p.probe_lo > 0:
                p.replicas = replicas_needed(self.probe, p.probe_lo)
                if p.replicas <= self.probe:
                    raise UserError(self._too_large("decode", p.system.name, p.replicas))
                p.max_scale = p.probe_lo * p.replicas / self.probe
            else:
                p.replicas = decode_cap
                p.final = at_full_traffic(p.trials[-1].row, p.trials[-1].scale)
                p.reason = (f"the probe of {self.probe} decode replica(s) fails at every traffic down to "
                            f"{p.trials[-1].scale:.3g} of the scenario's ({p.trials[-1].why_not})")
        searches: dict[str, Generator] = {k: self.predict(p) for k, p in plans.items() if p.reason is None}
        prefill_plan = prefill = None
        if self.disaggregated:
            base = plans[self.prefill_system().name]
            sized = base if base.probe_lo > 0 else max(plans.values(), key=lambda p: p.probe_lo)
            prefill_plan = SystemPlan(sized.system)
            if sized.probe_lo > 0:
                searches["\0prefill"] = self.prefill_probe(prefill_plan, sized.probe_lo)
        self.drive(searches)
        prefill_met = True
        if self.disaggregated:
            prefill_met = self.prefill_lo > 0
            if prefill_met:
                prefill = replicas_needed(self.probe, self.prefill_lo)
                if prefill <= self.probe:
                    raise UserError(self._too_large("prefill", "the prefill pool", prefill))
            else:
                prefill = max(self.target.max_gpus // self.prefill_gpr, 1)
        self.confirm(plans, prefill, prefill_met)
        doc = self.document(plans, prefill_plan, prefill, prefill_met)
        doc["fleet"] = self.summary(plans, prefill)
        # the rate realised at full size is the confirmation's, of one seed
        doc["verdict"] = verdict({**doc, "seeds": self.seeds[:1]}) + " " + fleet_sentence(doc)
        return doc

    def _too_large(self, pool: str, who: str, n: int) -> str:
        return (f"--probe-replicas {self.probe}: {who} serves the whole traffic on {n} {pool} replica(s), no more "
                "than the probe; a fleet plan is for traffic larger than its probe (probe fewer replicas, or plan "
                "without --probe-replicas)")

    def confirm(self, plans: dict[str, FleetSystem], prefill: int | None, prefill_met: bool) -> None:
        """The full-size runs, one per system at the plan's first seed, all in one batch."""
        todo = []
        for p in plans.values():
            if p.reason is not None:
                continue
            if not prefill_met:
                p.reason = "no prefill pool meets the TTFT limit (prefill probe)"
            elif p.replicas * self.gpr + (prefill or 0) * self.prefill_gpr > self.target.max_gpus:
                pool = f" + {prefill * self.prefill_gpr} prefill" if prefill else ""
                p.reason = (f"the probe puts it at {p.replicas * self.gpr} decode{pool} GPUs, above --max-gpus "
                            f"{self.target.max_gpus}")
            else:
                todo.append(p)
            if p.reason is not None:
                # the probe's figures at the full size's load stand in for the run not made
                p.final = at_full_traffic(p.predicted, self.probe / p.replicas)
        rows = self.evaluate([Candidate(p.system, p.replicas, 1.0, prefill) for p in todo], seeds=self.seeds[:1])
        judge = self._judge(True)
        for p, row in zip(todo, rows, strict=True):
            why = judge(row)
            p.trials.append(Trial("confirm", p.replicas, 1.0, prefill, row, why))
            p.confirmation, p.confirmation_why, p.final = row, why, row
            p.met = why is None

    # --- output ----------------------------------------------------------------------------------------------
    def row_of(self, plan: FleetSystem, prefill: int | None) -> dict:
        row = super().row_of(plan, prefill)
        pred = plan.predicted or {}
        conf = plan.confirmation
        row.update({
            "probe_replicas": self.probe,
            "predicted_attainment": pred.get("sla_attainment"),
            # the interval is the probe's (over the plan's seeds) at the full size's load per replica
            "attainment_lo": pred.get("attainment_lo"), "attainment_hi": pred.get("attainment_hi"),
            "confirmed": None if conf is None else plan.met,
            "confirm_within": None if conf is None else self.within_prediction(plan),
        })
        return row

    def resolution(self, plan: FleetSystem) -> float:
        """One request of a probe run: the finest step the probe's attainment can take."""
        pred = plan.predicted or {}
        per_seed = (pred.get("requests") or 0) / max(len(pred.get("replicate_rows") or [pred]), 1)
        return 1.0 / per_seed if per_seed else 0.0

    def within_prediction(self, plan: FleetSystem) -> bool:
        pred, conf = plan.predicted, plan.confirmation
        if pred is None or conf is None:
            return False
        return within(conf["sla_attainment"], pred["attainment_lo"], pred["attainment_hi"], self.resolution(plan))

    def headroom_hi(self, plan: FleetSystem, prefill: int | None) -> float:
        return plan.probe_hi * plan.replicas / self.probe - 1.0 if plan.probe_lo > 0 else math.nan

    def lowest_possible(self, plan: FleetSystem) -> int | None:
        """As the plain plan's: when a probe share between the one met and the one clearly failed was unresolved,
        the fewest replicas not clearly failing (the clearly failed share, per replica, bounds it); else None."""
        if not plan.probe_lo > 0 or math.isnan(plan.probe_hi):
            return None
        open_ = [t for t in plan.trials if t.phase == "probe" and unresolved(t.why_not)
                 and plan.probe_lo < t.scale < plan.probe_hi]
        if not open_:
            return None
        lowest = math.floor(round(self.probe / plan.probe_hi, 9)) + 1
        return lowest if lowest < plan.replicas else None

    def why_unmet(self, plan: FleetSystem, gpus: int) -> str:
        if plan.reason is not None:
            return plan.reason
        predicted = "met" if plan.predicted_why is None else f"not met ({plan.predicted_why})"
        return (f"at {plan.replicas * self.gpr} decode GPUs (full-size confirmation): {plan.confirmation_why}; "
                f"the probe at its load per replica: {predicted}")

    def summary(self, plans: dict[str, FleetSystem], prefill: int | None) -> dict:
        """plan.json's ``fleet``: what was probed, derived and confirmed."""
        def rate_at(p: SystemPlan, phase: str, share: float) -> float | None:
            row = next((t.row for t in p.trials if t.phase == phase and abs(t.scale - share) < 1e-12), None)
            return row.get("arrival_rate") / self.probe if row and row.get("arrival_rate") else None

        systems = {}
        for k, p in plans.items():
            conf, pred = p.confirmation, p.predicted
            systems[k] = {
                "probe_share_lo": p.probe_lo, "probe_share_hi": p.probe_hi,
                "rate_per_replica_lo": rate_at(p, "probe", p.probe_lo) if p.probe_lo > 0 else None,
                "rate_per_replica_hi": rate_at(p, "probe", p.probe_hi) if not math.isnan(p.probe_hi) else None,
                "replicas": p.replicas if p.probe_lo > 0 else None,
                "predicted": None if pred is None else {
                    "attainment": pred["sla_attainment"], "attainment_lo": pred["attainment_lo"],
                    "attainment_hi": pred["attainment_hi"], "met": p.predicted_why is None,
                    "why_not": p.predicted_why, "resolution": self.resolution(p)},
                "confirmation": None if conf is None else {
                    "attainment": conf["sla_attainment"], "ttft_p99": conf["ttft_p99"],
                    "requests": conf["requests"], "met": p.confirmation_why is None, "why_not": p.confirmation_why,
                    "within_prediction": self.within_prediction(p),
                    "agrees": (p.confirmation_why is None) == (p.predicted_why is None),
                    "wall_seconds": conf.get("wall_seconds")},
                "reason": p.reason,
            }
        return {"probe_replicas": self.probe, "start_share": self.start, "confirm_seed": self.seeds[0],
                "prefill": None if not self.disaggregated else {
                    "probe_replicas": self.probe, "probe_share_lo": self.prefill_lo,
                    "probe_share_hi": self.prefill_hi, "replicas": prefill},
                "systems": systems}


def fleet_lines(doc: dict) -> list[str]:
    """One line per system: probed capacity, derived size, prediction and confirmation (for the terminal)."""
    lines = []
    for k, e in doc["fleet"]["systems"].items():
        s = doc["systems"][k]
        if e["confirmation"] is None:
            lines.append(f"  {k}: not confirmed: {e['reason']}")
            continue
        c, pr = e["confirmation"], e["predicted"]
        rate = f"{e['rate_per_replica_lo']:.1f} req/s/replica" if e["rate_per_replica_lo"] else "?"
        lines.append(f"  {k}: probe {rate} -> {s['decode_gpus']} decode GPUs; predicted "
                     f"{pr['attainment_lo']:.2%}-{pr['attainment_hi']:.2%}, full size {c['attainment']:.2%} "
                     f"({'within' if c['within_prediction'] else 'OUTSIDE'}; SLA {'met' if c['met'] else 'not met'}"
                     f"{'' if c['agrees'] else ', DISAGREES with the probe'})")
    return lines


def write_fleet_plan(out: Path, doc: dict) -> tuple[Path, Path]:
    """plan.csv and plan.json as ``simulate plan`` writes them, plan.csv with the fleet columns after the rest."""
    df = plan_table(doc)
    for c in FLEET_COLUMNS:
        df[c] = [e.get(c) for e in doc["systems"].values()]
    return write_table_and_json(out, "plan", df[PLAN_COLUMNS + FLEET_COLUMNS], doc)
