"""One run: a system at one load point with one seed, from scenario to a row of runs.csv."""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from atomic_files import atomic_write, atomic_write_text
from simulator.core.acceptance import resolve_source
from simulator.core.acceptance.base import AcceptanceSource, NoDrafts
from simulator.core.acceptance.runtime import ENGINE_FACTS, RuntimeSource
from simulator.core.engine import Simulation, StepPrices
from simulator.core.engine_config import EngineConfig
from simulator.core.engine_rules import resolve_rule
from simulator.core.invariants import InvariantViolation, check_invariants
from simulator.core.plugins import construct, source_files
from simulator.core.policies import make_policy
from simulator.core.policies import resolve as resolve_policy
from simulator.core.prefill import Disaggregated
from simulator.errors import PluginCrash, UserError
from simulator.inputs.config import LoadedScenario
from simulator.inputs.hardware import Hardware, load_hardware
from simulator.inputs.systems import SystemSpec
from simulator.inputs.workload import RequestMaker, open_loop_arrivals, trace_window
from simulator.outputs.metrics import (
    bench_counts,
    followed,
    inter_token_gaps,
    itl_metrics,
    overloaded,
    request_metrics,
    saturated,
    step_metrics,
    tau_by_mix,
    time_series,
    user_speed,
)
from simulator.runs.steady import choose_warmup


@dataclass(frozen=True)
class LoadPoint:
    """Closed loop with ``concurrency`` users, or the scenario's open-loop traffic (concurrency None). With
    ``requests``, a closed loop over a finite prompt list (``simulator.runs.batch``)."""

    concurrency: int | None
    requests: int | None = None

    @property
    def label(self) -> str:
        if self.concurrency is None:
            return "open"
        return f"closed-{self.concurrency}" + ("" if self.requests is None else f"-of-{self.requests}")

    @property
    def workload_key(self) -> str:
        """What the workload's random stream is keyed on: a finite prompt list is the same list at every
        concurrency (a benchmark client draws its prompts from a fixed seed), anything else its own load point."""
        return self.label if self.requests is None else f"list-{self.requests}"


@dataclass(frozen=True)
class StopRule:
    """What a plan judges an open-loop run by, so that the run may end as soon as that judgement is a certain
    failure (``EarlyStop``): at least ``attainment`` of the followed requests at ``tps`` tok/s/user or more (None:
    not judged, a prefill pool's search), TTFT p99 within ``ttft_p99`` (None: not judged) and, with
    ``decode_saturation``, a decode queue not growing at the window's end (a finite prefill pool's backlog
    always counts)."""

    tps: float
    attainment: float | None = None
    ttft_p99: float | None = None
    decode_saturation: bool = True

    def key(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RunSpec:
    system: SystemSpec
    point: LoadPoint
    seed: int
    quick: bool
    check_invariants: bool = False  # simulate --check-invariants
    stop: StopRule | None = None  # a plan's run that may end early (its row then says so: ``stopped``)


def load_points(scn: LoadedScenario) -> list[LoadPoint]:
    f = scn.model.frontier
    pts = []
    if f is not None:
        lists = f.requests or [None] * len(f.concurrency)
        pts = [LoadPoint(c, n) for c, n in zip(f.concurrency, lists, strict=True)]
    if scn.model.traffic is not None:
        pts.append(LoadPoint(None))
    return pts


def _stream(seed: int, *words: str) -> np.random.Generator:
    """An independent generator per (seed, words): systems at one load point share the workload's stream
    (common random numbers) and differ only in their own acceptance stream."""
    return np.random.default_rng(np.random.SeedSequence([seed & 0xFFFFFFFF, *(zlib.crc32(w.encode()) for w in words)]))


@lru_cache(maxsize=4)
def _hardware(scn: LoadedScenario, drafters: frozenset[str]) -> Hardware:
    return load_hardware(scn, set(drafters))


SOURCE_ARGS = ("scenario", "drafter", "gamma", "mix", "calibrated", "rng")


def source_options(scn: LoadedScenario) -> dict:
    """A plug-in source's options: ``acceptance.options`` plus the keys beside ``source`` it does not define."""
    acc = scn.model.acceptance
    return {**acc.options, **(acc.model_extra or {})}


def make_source(scn: LoadedScenario, system: SystemSpec, rng: np.random.Generator) -> AcceptanceSource:
    """The acceptance source of one run of ``system``, built in or plug-in alike: constructed with the keyword
    arguments of SOURCE_ARGS (a RuntimeSource also with the engine facts of ENGINE_FACTS) plus
    ``acceptance.options``; errors name the scenario's field and the system."""
    acc = scn.model.acceptance
    field = f"{scn.path}: acceptance"
    cls = resolve_source(acc.source, what=f"{field}.source")
    runtime = issubclass(cls, RuntimeSource)
    if system.drafter == "none" and not (runtime and cls.decodes_without_drafter):
        return NoDrafts()
    policy_cls, _ = resolve_policy(system.policy)
    if policy_cls.needs_outcome and not cls.draws_outcome:
        raise UserError(f"{field}.source: system {system.name!r} runs policy {system.policy!r}, which reads realised "
                        f"outcomes (needs_outcome), but source {acc.source!r} does not draw them (draws_outcome)")
    options = source_options(scn)
    clash = [k for k in options if k in SOURCE_ARGS or (runtime and k in ENGINE_FACTS)]
    if clash:
        raise UserError(f"{field}.options.{clash[0]}: set by the simulator for every source; not an option")
    kwargs = dict(scenario=scn, drafter=system.drafter, gamma=system.gamma, mix=list(scn.model.workload.mix),
                  calibrated=acc.confidence == "calibrated", rng=rng, **options)
    if runtime:
        eng = scn.model.engine
        kwargs.update(slots=eng.max_running * scn.model.hardware.replicas,
                      disaggregated=eng.prefill == "disaggregated")
    source = construct(cls, kwargs, f"{field}.options (source {acc.source!r}, system {system.name!r})")
    if getattr(source, "gamma", None) != system.gamma:
        raise UserError(f"{field}.source: {acc.source!r} set gamma {getattr(source, 'gamma', None)!r}; system "
                        f"{system.name!r} drafts {system.gamma} tokens (a source must keep the gamma it is given)")
    if policy_cls.reads_confidence and not source.has_confidence:
        raise UserError(f"{field}.source: system {system.name!r} runs policy {system.policy!r}, which reads "
                        f"confidences (reads_confidence), but source {acc.source!r} has no {acc.confidence} "
                        f"confidences for drafter {system.drafter!r} (a drafter without a confidence head records none)")
    return source


def check_live_clock(scn: LoadedScenario, source: AcceptanceSource) -> bool:
    """``hardware.clock: live`` needs a source that measures its own forwards (``step_ms``)."""
    if scn.model.hardware.clock != "live":
        return False
    if not (isinstance(source, RuntimeSource) and source.measures_time):
        raise UserError(f"{scn.path}: hardware.clock: 'live' needs a source that runs real forwards "
                        f"(acceptance.source: live); {scn.model.acceptance.source!r} measures nothing")
    return True


def check_engine_limits(scn: LoadedScenario, system: SystemSpec) -> None:
    eng = scn.model.engine
    worst = eng.max_running * (1 + system.gamma)
    if worst > eng.max_batch_tokens:
        most = eng.max_batch_tokens // eng.max_running - 1
        fix = f"use gamma <= {most} or " if most >= 1 else ""
        raise UserError(
            f"{scn.path}: system {system.name!r}: gamma {system.gamma} does not fit: a full batch verifies "
            f"max_running x (1 + gamma) = {eng.max_running} x {1 + system.gamma} = {worst} tokens, more than "
            f"engine.max_batch_tokens {eng.max_batch_tokens}; {fix}raise engine.max_batch_tokens"
        )


def check_rules(scn: LoadedScenario) -> dict[str, type]:
    """The classes of the scenario's router, admission and preemption rules (simulator/core/engine_rules.py), found
    once per run, so that a missing one is named by its scenario field; the engine is then given the classes."""
    m = scn.model
    return {kind: resolve_rule(kind, spec, what=f"{scn.path}: {field}")
            for kind, field, spec in (("router", "hardware.router", m.hardware.router),
                                      ("admission", "engine.admission", m.engine.admission),
                                      ("preemption", "engine.preemption", m.engine.preemption))}


def plugin_specs(scn: LoadedScenario, system: SystemSpec) -> list[tuple[str, str, type]]:
    """(scenario field, spec, class) of each plug-in a run of ``system`` loads: its policy, the acceptance source
    and the engine rules that are not the project's own."""
    m = scn.model
    found = [("policy", system.policy, resolve_policy(system.policy)[0])]
    if system.drafter != "none":
        found.append(("acceptance.source", m.acceptance.source, resolve_source(m.acceptance.source,
                                                                               what=f"{scn.path}: acceptance.source")))
    specs = {"router": m.hardware.router, "admission": m.engine.admission, "preemption": m.engine.preemption}
    fields = {"router": "hardware.router", "admission": "engine.admission", "preemption": "engine.preemption"}
    found += [(fields[kind], specs[kind], cls) for kind, cls in check_rules(scn).items()]
    return [(f, spec, cls) for f, spec, cls in found if cls.__module__.partition(".")[0] != "simulator"]


@contextmanager
def plugin_crashes(scn: LoadedScenario, spec: RunSpec):
    """An exception raised in a plug-in's own code during a run becomes one line naming the plug-in, the system
    and the load point (a PluginCrash, its traceback kept for ``--debug``); the project's own exceptions keep
    their traceback: they are bugs of the simulator."""
    try:
        yield
    except UserError:
        raise
    except Exception as exc:
        import traceback

        plugins = plugin_specs(scn, spec.system)
        own = Path(__file__).resolve().parents[1]  # the simulator's files, which a plug-in's base classes list too
        files = {f: (field, name) for field, name, cls in plugins for f in source_files(cls) if not f.is_relative_to(own)}
        hit = next((files[f] for f in reversed(_raised_in(exc)) if f in files), None)
        if hit is None:
            raise
        field, name = hit
        where = f"system {spec.system.name!r} at load point {spec.point.label}, seed {spec.seed}"
        raise PluginCrash(f"{scn.path}: plug-in {name!r} ({field}) raised {type(exc).__name__}: {exc} ({where}; "
                          "--debug shows the traceback)", "".join(traceback.format_exception(exc))) from None


def _raised_in(exc: BaseException) -> list[Path]:
    """The files of the frames an exception passed through, outermost first, its causes' included (SimPy raises
    a process's exception again from its event loop, the plug-in's frames in the cause)."""
    import traceback

    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.insert(0, exc)
        exc = exc.__cause__ or exc.__context__
    return [Path(fr.filename).resolve() for e in chain for fr in traceback.extract_tb(e.__traceback__)]


@contextmanager
def in_run(scn: LoadedScenario, spec: RunSpec):
    """A UserError raised while a run runs (a plug-in rule or policy that broke its contract) names the run."""
    try:
        yield
    except UserError as exc:  # the same error (a PolicyError stays one), its message prefixed with the run
        exc.args = (f"{scn.path}: system {spec.system.name!r} at {spec.point.label}, seed {spec.seed}: {exc}",
                    *exc.args[1:])
        raise


def build(scn: LoadedScenario, spec: RunSpec) -> tuple[Simulation, Hardware, float, float]:
    return _build(scn, spec)[:4]


def _build(scn: LoadedScenario, spec: RunSpec) -> tuple[Simulation, Hardware, float, float, int | None]:
    """``build``, and for the open loop the number of arrivals in the measurement window (None for a closed
    loop): the most requests its per-request metrics can follow, which ``EarlyStop`` bounds them by."""
    m = scn.model
    check_engine_limits(scn, spec.system)
    rules = check_rules(scn)
    hw = _hardware(scn, frozenset({spec.system.drafter}))
    duration = m.run.quick_duration_s if spec.quick else m.run.duration_s
    warmup = m.run.quick_warmup_s if spec.quick else m.run.warmup_s
    source = make_source(scn, spec.system, _stream(spec.seed, spec.point.label, "acceptance", spec.system.name))
    gamma = 0 if spec.system.drafter == "none" else spec.system.gamma
    # a speculative system runs in the engine's speculative mode (the table's record), a plain one as priced
    clock, policy_grid, max_running, ahead, host_ms = hw.speculating(
        m.engine, gamma, hw.draft[spec.system.drafter].kind.parallel)
    config = EngineConfig(
        max_running=max_running, max_batch_tokens=m.engine.max_batch_tokens, kv_capacity=hw.kv_capacity,
        gamma=gamma, prefill_chunk=m.engine.prefill_chunk,
        schedule=m.engine.schedule, stall_ms=m.engine.sched_stall_ms, replicas=hw.replicas, request_ms=hw.request_ms,
        schedule_ahead=ahead,
        prefix_cache=m.engine.prefix_cache,
        **rules,
        **shared_prefix_config(scn),
        prefill=prefill_mode(scn, hw))
    prices = StepPrices(clock, draft=hw.draft[spec.system.drafter], policy_grid=policy_grid,
                        chunk_attention=hw.chunk_attention, host_ms=host_ms)
    sim = Simulation(config, prices, source=source, label=spec.system.name,
                     policy=lambda: make_policy(spec.system.policy, spec.system.params, spec.system.name),
                     live_clock=check_live_clock(scn, source))
    window = None  # one window of a replayed trace for the frontier and the open loop (workload.py)
    if m.traffic is not None and m.traffic.kind == "trace" and m.traffic.lengths_from_trace:
        window = (scn.resolve(m.traffic.trace), *trace_window(m.traffic, duration))
    maker = RequestMaker(m.workload, scn.resolve, _stream(spec.seed, spec.point.workload_key, "workload"), window)
    if spec.point.concurrency is not None:
        with in_run(scn, spec):  # the first requests are routed now
            sim.closed_loop(spec.point.concurrency, maker.draw, spec.point.requests)
        return sim, hw, duration, warmup, None
    # arrivals go on through the drain, so that the followed requests finish under the same load
    arr = open_loop_arrivals(m.traffic, maker, duration + drain_cap(scn, spec), scn.resolve,
                             _stream(spec.seed, "arrivals"))
    sim.open_loop(arr.time, arr.prompt, arr.output, arr.mix, prefix=arr.prefix)
    return sim, hw, duration, warmup, int(((arr.time >= warmup) & (arr.time < duration)).sum())


def shared_prefix_config(scn: LoadedScenario) -> dict:
    """The engine's share of ``workload.shared_prefix``: its length, passed only when the workload has one (the
    draws then carry each request's prefix group, which the engine's prefix cache reads). With a pool of repeated
    prompts (``prompts_per_group``) each prompt is a group of its own and its whole length is what is shared: a
    group's first request computes it, later ones hit every full block of it (the system prompt shared across a
    group's different prompts is then not reused on their first use, a cost paid once per prompt of the pool)."""
    sp = scn.model.workload.shared_prefix
    if sp is None:
        return {}
    if sp.prompts_per_group is not None:  # the prefix groups are the pool's prompts, each cached whole
        return {"shared_prefix_tokens": scn.model.workload.prompt.value}
    return {"shared_prefix_tokens": sp.tokens}


def prefill_mode(scn: LoadedScenario, hw: Hardware) -> Disaggregated | None:
    """Where prompts are prefilled: on the decode replicas (None), or a disaggregated pool: finite when the
    scenario sizes one (hardware.prefill_replicas, priced on its own table if it names one), else unbounded."""
    m = scn.model
    if m.engine.prefill != "disaggregated":
        return None
    if m.hardware.prefill_replicas is not None and m.hardware.prefill_table:  # its sidecar says how it prices prefill
        table = _prefill_table(scn)
        grid, cost = table.grid, table.chunk_attention
    else:
        grid, cost = hw.clock, hw.chunk_attention
    return Disaggregated(grid, cost, m.hardware.prefill_replicas, m.engine.max_batch_tokens)


@lru_cache(maxsize=4)
def _prefill_table(scn: LoadedScenario):
    from simulator.inputs.hardware import read_table_set

    return read_table_set(scn.resolve(scn.model.hardware.prefill_table), "hardware.prefill_table").target


def drain_cap(scn: LoadedScenario, spec: RunSpec) -> float:
    return scn.model.run.quick_drain_cap_s if spec.quick else scn.model.run.drain_cap_s


DRAIN_CHUNK_S = 1.0  # simulated seconds between checks of whether every followed (or listed) request has finished


PROGRESS_CHUNKS = 50  # pieces a window is run in when someone follows its progress


def run_window(sim: Simulation, scn: LoadedScenario, spec: RunSpec, hw: Hardware, duration: float,
               warmup: float, on_progress: Callable[[float], None] | None = None,
               watch: EarlyStop | None = None) -> tuple[float, bool, float]:
    """Run the window, pick the warm-up (steady.py), then keep the load on until every request that arrived in
    the measurement window has finished, or the drain cap. Returns (warm-up used, steady, time stopped).
    ``on_progress`` hears the window's simulated seconds as they pass (a long benchmark replay). ``watch``
    (an open loop's ``EarlyStop``) is asked every simulated second from the warm-up on, and at the window's end,
    whether the run's verdict is already a certain failure; the run then stops there (``watch.stopped``)."""
    if on_progress is not None:
        for t in np.linspace(0.0, duration, PROGRESS_CHUNKS + 1)[1:]:
            sim.run(until=t)
            on_progress(float(t))
    elif watch is not None:
        for t in [*np.arange(DRAIN_CHUNK_S, duration, DRAIN_CHUNK_S), duration]:
            sim.run(until=float(t))
            if t > warmup and t < duration and watch.check(float(t)):
                return warmup, False, sim.env.now
    else:
        sim.run(until=duration)
    # Only a closed loop's warm-up moves. At an open-loop point every system of one seed serves the same arrivals
    # (common random numbers): scored over the same window they are compared on the same requests, where a
    # warm-up moved per run scored 228 to 341 of them. An open-loop window that is not steady is flagged, not
    # moved; a tide or a trace varies by design anyway.
    adjust = spec.point.concurrency is not None
    warmup, steady = choose_warmup(sim.steps.frame(), duration, hw.replicas, warmup, adjust)
    if watch is not None and watch.at_window_end(duration):
        return warmup, steady, sim.env.now
    stop = duration + drain_cap(scn, spec)
    req = sim.requests.data
    while sim.env.now < stop:
        n = sim.requests.n
        mine = followed({k: req[k][:n] for k in ("arrival", "rejected")}, warmup, duration)
        if not np.isnan(req["finish"][:n][mine]).any():
            break
        sim.run(until=min(sim.env.now + DRAIN_CHUNK_S, stop))
        if watch is not None and sim.env.now < stop and watch.check(sim.env.now):
            break
    return warmup, steady, sim.env.now


class EarlyStop:
    """Whether an open-loop run's SLA verdict under ``rule`` is already a certain failure, so that a plan need not
    run it to its drain cap. Sound by construction: each test below only fires when every continuation of the
    run fails, so the verdict of the full run is a failure too (tests/simulator/test_early_stop.py checks it
    against full runs and against brute force over what the rest of the run could do).

    - saturation, at the window's end only (where the full run reads it): the decode queue (with
      ``rule.decode_saturation``) or a finite prefill pool's backlog still growing; the row's flags are then
      exactly the full run's, and so is its shortfall;
    - attainment: ``slow`` followed requests can no longer reach ``rule.tps`` (finished below it, or unfinished
      with (output - 1) / (now - first token) below it already: finishing later only lowers it). Attainment is at
      most 1 - slow / W, W the arrivals in the measurement window (at least as many as the requests it follows,
      rejected ones and those still to arrive included); below ``rule.attainment``, it fails;
    - TTFT: ``waited`` followed requests have a TTFT above ``rule.ttft_p99`` (known, or still without a first
      token longer than that). ``numpy.percentile``'s p99 of n values is above the limit once more than
      n - floor(0.99 (n - 1)) of them are, a count that does not fall as n grows, so W bounds it for every n the
      run can end with (one more for the float's rounding).

    The run's row then carries ``stopped``: when, which test and its bound. Not for a source that generates real
    tokens (an end token can shorten a request's output, which these bounds take as known)."""

    def __init__(self, sim: Simulation, rule: StopRule, warmup: float, end: float, window_arrivals: int,
                 replicas: int, max_running: int):
        self.sim, self.rule, self.warmup, self.end = sim, rule, warmup, end
        self.window_arrivals, self.replicas, self.max_running = window_arrivals, replicas, max_running
        self.stopped: dict | None = None

    def check(self, now: float) -> bool:
        n = self.sim.requests.n
        req = {k: v[:n] for k, v in self.sim.requests.data.items()}
        found = certain_failure(req, now, self.warmup, self.end, self.window_arrivals, self.rule)
        if found is not None:
            self.stopped = {"at_s": round(now, 6), **found}
        return found is not None

    def at_window_end(self, end: float) -> bool:
        pool = self.sim.prefill_pool
        decode = self.rule.decode_saturation and saturated(self.sim.steps.frame(), end, self.replicas,
                                                           self.max_running)
        if decode or (pool is not None and pool.saturated(end)):
            self.stopped = {"at_s": round(end, 6), "test": "saturated"}
            return True
        return self.check(end)


def certain_failure(req: dict[str, np.ndarray], now: float, warmup: float, end: float, window_arrivals: int,
                    rule: StopRule) -> dict | None:
    """``EarlyStop``'s attainment and TTFT tests on the request log ``req`` (its first rows, as logged by ``now``):
    None, or which failed with its bound (``attainment_at_most``; ``ttft_over``, the requests over the limit)."""
    sel = followed(req, warmup, end)
    first, arrival = req["first_token"][sel], req["arrival"][sel]
    if rule.attainment is not None and window_arrivals:
        done = ~np.isnan(req["finish"][sel])
        with np.errstate(invalid="ignore"):  # NaN (no generation phase, or no first token yet) is never slow
            slow = int((user_speed(req["output"][sel], first, np.where(done, req["finish"][sel], now))
                        < rule.tps).sum())
        at_most = 1.0 - slow / window_arrivals
        if slow and at_most < rule.attainment:
            return {"test": "attainment", "attainment_at_most": at_most, "slow": slow}
    if rule.ttft_p99 is not None and window_arrivals:
        over = int((np.where(np.isnan(first), now, first) - arrival > rule.ttft_p99).sum())
        if over > window_arrivals - math.floor(0.99 * (window_arrivals - 1)):
            return {"test": "ttft", "ttft_over": over}
    return None


def run_list(sim: Simulation, scn: LoadedScenario, spec: RunSpec) -> float:
    """Run a finite prompt list (``spec.point.requests``) until its last request has finished, ``run.duration_s``
    at most (``--quick`` or not: the list is what it is). Returns that time."""
    requests, cap = spec.point.requests, scn.model.run.duration_s
    req = sim.requests.data
    while True:
        n = sim.requests.n
        open_ = np.isnan(req["finish"][:n]) & ~req["rejected"][:n]
        if n == requests and not open_.any():
            if req["rejected"][:n].all():
                raise UserError(f"none of the {requests} requests fits the KV cache")
            return float(np.nanmax(req["finish"][:n]))
        if sim.env.now >= cap:
            raise UserError(f"{requests} requests at {spec.point.concurrency} at a time: "
                            f"{int(open_.sum()) + requests - n} unfinished after run.duration_s {cap:g} simulated "
                            "seconds; raise it")
        sim.run(until=min(sim.env.now + DRAIN_CHUNK_S, cap))


def run_one(scn: LoadedScenario, spec: RunSpec, records_dir: Path | None = None,
            run_key: str = "") -> tuple[dict, Simulation]:
    """Run and summarise. Returns the runs.csv row and the simulation (its logs). With ``records_dir``, the run's
    records are written there, marked with ``run_key`` (the run store's key) when one is given."""
    t0 = time.perf_counter()
    with plugin_crashes(scn, spec):
        sim, hw, duration, warmup, window_arrivals = _build(scn, spec)
        # a source that generates tokens records what it generated (live: every step also verifies the whole block)
        recording = records_dir is not None and isinstance(sim.source, RuntimeSource) and sim.source.start_recording()
        watch = None
        if spec.stop is not None and window_arrivals is not None and not isinstance(sim.source, RuntimeSource):
            watch = EarlyStop(sim, spec.stop, warmup, duration, window_arrivals, hw.replicas,
                              sim.config.max_running)
        with in_run(scn, spec):
            if spec.point.requests is None:
                warmup, steady, stop = run_window(sim, scn, spec, hw, duration, warmup, watch=watch)
            else:  # a benchmark's finite list: measured whole, from its first request to its last
                stop = duration = run_list(sim, scn, spec)
                warmup, steady = 0.0, True
    wall = time.perf_counter() - t0
    if spec.check_invariants:
        try:
            check_invariants(sim)
        except InvariantViolation as exc:
            raise UserError(f"--check-invariants: system {spec.system.name!r} at {spec.point.label}, seed {spec.seed}: "
                            f"{exc}") from None
    m = scn.model
    req, steps = sim.requests.frame(), sim.steps.frame()
    gpus = hw.replicas * hw.gpus_per_replica
    row = {
        "policy": spec.system.name,
        "policy_impl": spec.system.policy,
        "drafter": spec.system.drafter,
        "gamma": spec.system.gamma,
        "seed": spec.seed,
        "load_point": spec.point.label,
        "concurrency": spec.point.concurrency,
        "arrival_rate": (int((req["arrival"] < duration).sum()) / duration) if spec.point.concurrency is None else None,
        "replicas": hw.replicas,
        "gpus": gpus,
        "quick": spec.quick,
        "acceptance_source": m.acceptance.source,
        "clock": m.hardware.clock,
    }
    row.update(step_metrics(steps, warmup, duration, gpus, hw.energy, hw.clock))
    row.update(request_metrics(req, warmup, duration, stop, m.sla.tps_targets[0]))
    row.update(itl_metrics(inter_token_gaps(req, steps, warmup, duration, stop)))
    row["bench"] = bench_counts(req, steps, warmup, duration)
    row.update({
        # open loop: the decode queue or a finite prefill pool's backlog still growing at the window's end
        "saturated": spec.point.concurrency is None and (
            saturated(steps, duration, hw.replicas, sim.config.max_running)
            or (sim.prefill_pool is not None and sim.prefill_pool.saturated(duration))),
        # share of steps beyond the step-time grid (their times are extrapolated): flagged in the headline
        "beyond_table": float(np.mean((steps["batch_tokens"] > hw.clock.b_axis[-1])
                                      | (steps["kv_tokens"] > hw.clock.k_axis[-1]))) if len(steps["end"]) else 0.0,
        "prefill_saturated": sim.prefill_pool is not None and sim.prefill_pool.saturated(duration),
        # the prefix cache's counters over the whole run, warm-up and drain included (Simulation.kv_stats)
        **sim.kv_stats,
        "overloaded": overloaded(row["requests"], row["unfinished"]),
        "warmup_s": warmup,
        "steady_state": steady,
        "steps": len(steps["end"]),
        "sim_seconds": duration,
        "drain_seconds": stop - duration,
        "wall_seconds": wall,
    })
    row["tau_by_mix"] = tau_by_mix(req, warmup, duration, list(m.workload.mix))
    if watch is not None and watch.stopped is not None:
        # its figures are those of a run cut short (a plan reads only its verdict); the store keeps it apart
        row["stopped"] = watch.stopped
        if stop < duration:  # the window's end, where saturation and the arrival rate are read, was never reached
            row["saturated"] = row["prefill_saturated"] = row["arrival_rate"] = None
    elif spec.point.concurrency is None:
        row["series"] = time_series(steps, req, duration, hw.replicas, gpus, m.sla.tps_targets[0])
    if records_dir is not None:
        stem = records_stem(scn, spec)
        write_records(records_dir, stem, req, steps, m.workload.mix)
        if recording:
            sim.source.write_trace(records_dir / f"{stem}.trace.csv")
        if run_key:  # last, so that an interrupted write does not count as written (records_written)
            atomic_write_text(records_dir / f"{stem}.run-key", run_key + "\n")
    if m.hardware.clock == "live":
        # a RuntimeSource that measures time (check_live_clock); written beside the results by the command
        # (simulator/outputs/live_tables.py)
        row["live_tables"] = sim.source.measured_tables()
    return row, sim


def records_stem(scn: LoadedScenario, spec: RunSpec) -> str:
    quick = "-quick" if spec.quick else ""
    return f"{scn.name}__{spec.system.name}__{spec.point.label}__seed{spec.seed}{quick}"


def records_written(out: Path, scn: LoadedScenario, spec: RunSpec, run_key: str) -> bool:
    """Whether ``out`` holds this run's records: both files, written under this run key. Records of the same
    scenario name after an edit or a ``--set`` have another key, so they are written again rather than reused."""
    stem = records_stem(scn, spec)
    key = out / f"{stem}.run-key"
    return ((out / f"{stem}.requests.parquet").is_file() and (out / f"{stem}.steps.parquet").is_file()
            and key.is_file() and key.read_text().strip() == run_key)


def write_records(out: Path, stem: str, req: dict, steps: dict, mix: dict) -> None:
    """The per-request and per-step Parquet files."""
    rdf = pd.DataFrame(req)
    rdf.insert(0, "request", np.arange(len(rdf)))
    rdf["mix"] = np.array(list(mix))[rdf["mix"].to_numpy()]
    atomic_write(out / f"{stem}.requests.parquet", lambda p: rdf.to_parquet(p, index=False))
    sdf = pd.DataFrame(steps)
    atomic_write(out / f"{stem}.steps.parquet", lambda p: sdf.to_parquet(p, index=False))
