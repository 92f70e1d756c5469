"""Which hardware: the capacity plan (plan.py) over several hardware options, and the (hardware, system) pairs
ranked by what they cost at the SLA.

An option is a step-time table and a price: ``NAME=TABLE.csv:USD_PER_GPU_HOUR`` (``simulate plan --hardware``,
repeatable). Per option the ordinary Planner runs on the scenario with ``hardware.table`` swapped for the option's
(its drafters' tables follow from the table's sidecar, as hardware loading does for any table; a prefill pool
is timed by ``hardware.table`` too unless the scenario names a ``prefill_table``, which is therefore refused, as
are a ``policy_table`` and explicit ``drafter_tables``: they belong to the scenario's own hardware, and whether
they should stay beside another GPU's table is not ours to guess) and the option's price, each in its own
folder (``OUT/hardware/NAME/``: plan.csv, plan.json and report.html), so nothing overwrites; the runs share one
store (``OUT/.runs``), whose keys tell the tables apart.

The options are on the command line rather than in the scenario: a scenario's settings are the identity of its
runs (the run store's keys hash them), so a plan-only list there would re-key every stored run of every
scenario; and the prices are the planner's assumptions, not a property of the scenario.

The ranking: met pairs first. At the SLA every met deployment serves the same traffic (at one seed every
option and system sees the same arrivals), so the cost per million output tokens orders the pairs as their
spend per hour does; the measured figure at equal spend differs only by which tokens fell in the measurement
window (noise, as a plan's verdict says of equal GPU counts), so pairs are ranked by USD per hour at the SLA,
equal spend by headroom (more first), and only then by the measured cost per million output tokens. Unmet
pairs follow, each with why.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario
from simulator.outputs.summary import write_table_and_json
from simulator.outputs.table_error import apart, error_between, kind_phrase, not_told_apart, typical_error
from simulator.outputs.verdicts import MET, UNRESOLVED_STATUS, hardware_verdict
from simulator.runs.backends import Backend, Task
from simulator.runs.plan import Planner, Target
from simulator.runs.search import After, Driver

SPEC_FORM = "NAME=TABLE.csv:USD_PER_GPU_HOUR, e.g. b200=scenarios/hardware/b200-qwen3-8b-bf16.csv:6.00"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a folder name under OUT/hardware/
HARDWARE_COLUMNS = ["rank", "hardware", "gpu", "usd_per_gpu_hour", "system", "status", "gpus", "prefill_gpus",
                    "decode_gpus", "prefill_usd_per_hour", "decode_usd_per_hour", "usd_per_hour",
                    "output_tokens_per_s", "cost_per_mtok", "headroom", "headroom_hi", "attainment", "ttft_p99",
                    "why_unmet", "table_kind", "table_error", "apart_from_best", "told_apart_from_best"]


@dataclass(frozen=True)
class HardwareOption:
    name: str
    table: Path            # as found from the working directory
    usd_per_gpu_hour: float
    gpu: str = ""          # the GPU the table was made for (its sidecar), for the report
    kind: str = "unknown"  # what its step times are (the sidecar's provenance), for the first lines
    expected_error: dict | None = None  # how far to trust them (the sidecar's)


def parse_option(spec: str) -> HardwareOption:
    """One ``--hardware`` spec; a one-line UserError naming what was expected when it is malformed."""
    name, eq, rest = spec.partition("=")
    if not eq or not name:
        raise UserError(f"--hardware {spec!r}: expected {SPEC_FORM}")
    if not NAME_PATTERN.fullmatch(name):
        raise UserError(f"--hardware {spec!r}: the name {name!r} names a folder: letters, digits, '.', '_', '-'")
    table, colon, price = rest.rpartition(":")
    if not colon or not table:
        raise UserError(f"--hardware {spec!r}: no price; expected {SPEC_FORM}")
    try:
        usd = float(price)
    except ValueError:
        raise UserError(f"--hardware {spec!r}: price {price!r} is not a number of USD per GPU-hour; expected "
                        f"{SPEC_FORM}") from None
    if not math.isfinite(usd) or usd <= 0:
        raise UserError(f"--hardware {spec!r}: price {price!r}: expected a positive number of USD per GPU-hour")
    path = Path(table)
    if not path.is_file():
        raise UserError(f"--hardware {spec!r}: table {table} does not exist; expected a step-time table CSV "
                        "(e.g. scenarios/hardware/*.csv)")
    return HardwareOption(name, path, usd)


def parse_options(specs: list[str] | tuple[str, ...]) -> list[HardwareOption]:
    options = [parse_option(s) for s in specs]
    seen: set[str] = set()
    for o in options:
        if o.name in seen:
            raise UserError(f"--hardware: the name {o.name!r} is given twice; expected one name per option")
        seen.add(o.name)
    return options


def option_scenario(scn: LoadedScenario, option: HardwareOption) -> LoadedScenario:
    """The scenario on the option's table. Refuses tables of the scenario's own hardware that would stay behind
    (see the module's docstring) and a live clock (no table to swap)."""
    hw = scn.model.hardware
    kept = [f for f in ("prefill_table", "policy_table") if getattr(hw, f)] + (
        ["drafter_tables"] if hw.drafter_tables else [])
    if kept:
        raise UserError(f"{scn.path}: hardware.{kept[0]}: names a table of the scenario's own hardware, which "
                        f"--hardware {option.name} would keep beside another table; expected none (the option's "
                        "table and its sidecar then serve it) or a plan without --hardware")
    if hw.clock != "table":
        raise UserError(f"{scn.path}: hardware.clock: {hw.clock!r}; --hardware compares step-time tables, "
                        "expected 'table'")
    # relative to the scenario's folder, as a scenario would name it (scn.resolve finds it there)
    table = os.path.relpath(option.table.resolve(), scn.base.resolve())
    m = scn.model
    return LoadedScenario(m.model_copy(update={"hardware": hw.model_copy(update={"table": table})}), scn.path,
                          [*scn.overrides, f"hardware.table={table}"])


def shown_scenario(scn: LoadedScenario, options: list[HardwareOption]) -> LoadedScenario:
    """The scenario as the comparison's report header names it: every option's table, not the scenario's own."""
    m = scn.model
    tables = ", ".join(f"{o.name}: {o.table}" for o in options)
    return LoadedScenario(m.model_copy(update={"hardware": m.hardware.model_copy(update={"table": tables})}),
                          scn.path, scn.overrides)


def check_options(scn: LoadedScenario, options: list[HardwareOption]) -> tuple[list[HardwareOption], list[str]]:
    """Every option's scenario loaded as a run would load it (its table, drafters' tables, KV capacity), before
    any run, so that a bad third option does not fail after the first two plans. Returns the options with
    their GPU and table kind named, and warnings (the tables' own invariants among them:
    ``hw_profile.tables.checks``)."""
    from simulator.inputs.hardware import load_hardware, load_table_set, scenario_table_warnings
    from simulator.inputs.systems import resolve_systems

    warnings = []
    if scn.model.engine.kv_capacity_tokens:
        warnings.append(f"{scn.path}: engine.kv_capacity_tokens ({scn.model.engine.kv_capacity_tokens:,}) is kept "
                        "for every --hardware option (without it each table's GPU memory sets it)")
    out = []
    for o in options:
        variant = option_scenario(scn, o)
        drafters = {s.drafter for s in resolve_systems(variant)}
        try:
            load_hardware(variant, drafters)
        except UserError as exc:
            raise UserError(f"--hardware {o.name}: {exc}") from None
        # what each option's tables say against themselves (the table invariants), as check would
        warnings += [f"--hardware {o.name}: {line}" for line in scenario_table_warnings(variant, drafters)]
        tables = load_table_set(variant)
        deployment = tables.deployment
        gpu = deployment.datasheet.name if deployment.datasheet else deployment.device
        out.append(replace(o, gpu=str(gpu or o.name), kind=tables.provenance.kind,
                           expected_error=tables.provenance.expected_error))
    return out, warnings


def option_line(i: int, n: int, o: HardwareOption) -> str:
    """What option ``i`` of ``n`` is: its GPU, table and price, and what kind of step times it prices with."""
    return (f"hardware {i}/{n}: {o.name} ({o.gpu}, {o.table}, ${o.usd_per_gpu_hour:.2f}/GPU-hour), "
            f"{kind_phrase(o.kind, o.expected_error)}")


# --- the plans ----------------------------------------------------------------------------------------------------

def within(option: str, search: Generator) -> Generator:
    """``search`` of one option's plan, run beside other options' on one driver, where every search is named
    (option, name): the searches it waits for (``After``) are its own option's."""
    value = None
    while True:
        try:
            wanted = search.send(value)
        except StopIteration as stop:
            return stop.value
        value = yield After((option, wanted.name)) if isinstance(wanted, After) else wanted


def plan_hardware(scn: LoadedScenario, out: Path, target: Target, backend: Backend, options: list[HardwareOption],
                  quick: bool = False, seed: int | None = None, replicates: int = 1, check_invariants: bool = False,
                  on_stored: Callable[[Task], None] | None = None,
                  on_queued: Callable[[list[Task]], None] | None = None,
                  on_plan: Callable[[HardwareOption, LoadedScenario, Path, dict], None] | None = None,
                  log: Callable[[str], None] = lambda line: None, bounds_apart: bool = True,
                  exhaustive: bool = False,
                  on_start: Callable[[list[tuple[str, Planner]]], None] | None = None) -> dict:
    """The Planner once per option (``OUT/hardware/NAME``), all options' searches at once on one backend (their
    runs side by side, a run two options share once: the same table at two prices), then the ranking.
    ``on_start`` hears the planners (name, planner) before any run (progress), ``on_plan`` each option's finished
    plan (the CLI writes its files and report there); returns hardware.json's document. ``exhaustive``: one
    option after the other, as Planner's."""
    import time

    planners: dict[str, tuple[HardwareOption, LoadedScenario, Planner]] = {}
    for i, o in enumerate(options, 1):
        log(option_line(i, len(options), o))
        variant = option_scenario(scn, o)
        # one run store for every option (OUT/.runs): its keys hash the table's name and content, so the same
        # table at two prices shares its runs and different tables never mix
        planners[o.name] = (o, variant, Planner(variant, out, replace(target, gpu_hour_cost=o.usd_per_gpu_hour),
                                                backend, quick, seed, on_stored=on_stored, replicates=replicates,
                                                check_invariants=check_invariants, on_queued=on_queued,
                                                exhaustive=exhaustive))
    if on_start is not None:
        on_start([(name, planner) for name, (_, _, planner) in planners.items()])
    t0 = time.perf_counter()
    if exhaustive:
        docs = {}
        for name, (_, _, planner) in planners.items():
            t = time.perf_counter()
            docs[name] = planner.run()
            docs[name]["wall_seconds"] = round(time.perf_counter() - t, 1)
    else:
        searches = {name: planner.searches() for name, (_, _, planner) in planners.items()}
        with Driver(backend) as driver:
            for _, _, planner in planners.values():
                planner.driver = driver
            found = driver.run({(name, k): (planners[name][2], within(name, g)) for name, gens in searches.items()
                                for k, g in gens.items()}, urgent={(name, "\0prefill") for name in planners})
        wall = round(time.perf_counter() - t0, 1)  # side by side: each option's plan took the whole time
        docs = {}
        for name, (_, _, planner) in planners.items():
            planner.driver = None
            docs[name] = planner.finish({k: v for (option, k), v in found.items() if option == name})
            docs[name]["wall_seconds"] = wall
    plans: dict[str, dict] = {}
    for name, (o, variant, _) in planners.items():
        plans[name] = docs[name]
        if on_plan is not None:
            on_plan(o, variant, out / "hardware" / o.name, docs[name])
    doc = compare(scn, options, plans, bounds_apart)
    doc["runs_executed"] = sum(planner.runs for _, _, planner in planners.values())
    return doc


def pair_row(option: HardwareOption, e: dict) -> dict:
    """One (hardware, system) pair from its plan entry: the spend per pool at the option's price, and the cost
    of a million output tokens on the same basis (every GPU of the deployment counted)."""
    price = option.usd_per_gpu_hour
    tokens_per_s = (e.get("throughput_per_gpu") or 0.0) * e["decode_gpus"]
    usd_per_hour = e["gpus"] * price
    return {
        "hardware": option.name, "gpu": option.gpu, "usd_per_gpu_hour": price, "system": e["system"],
        "status": e["status"], "gpus": e["gpus"], "prefill_gpus": e["prefill_gpus"], "decode_gpus": e["decode_gpus"],
        "prefill_usd_per_hour": e["prefill_gpus"] * price, "decode_usd_per_hour": e["decode_gpus"] * price,
        "usd_per_hour": usd_per_hour, "output_tokens_per_s": tokens_per_s,
        "cost_per_mtok": usd_per_hour / (tokens_per_s * 3600) * 1e6 if tokens_per_s > 0 else float("nan"),
        "headroom": e.get("headroom"), "headroom_hi": e.get("headroom_hi"), "attainment": e.get("attainment"),
        "ttft_p99": e.get("ttft_p99"),
        "why_unmet": e.get("why_unmet"),
    }


def rank(rows: list[dict], bounds_apart: bool = True) -> list[dict]:
    """Met pairs by spend per hour at the SLA, then headroom (more first), then measured cost per million
    tokens; then unresolved and unmet pairs, cheapest first. Numbers each row (1 = cheapest). Where roofline
    tables (speed bounds) stand beside forecasts or measurements, the bounds' pairs rank after all of theirs
    (unless ``bounds_apart`` is false: ``--rank-bounds-together``): a bound's GPU counts are lower bounds, and
    cheaper on paper is not cheaper."""
    order = {MET: 0, UNRESOLVED_STATUS: 1}
    mixed = bounds_apart and len({r.get("table_kind") == "roofline" for r in rows}) > 1

    def key(r: dict) -> tuple:
        cost = r["cost_per_mtok"] if not math.isnan(r["cost_per_mtok"]) else math.inf
        head = r["headroom"] if r["headroom"] is not None and not math.isnan(r["headroom"]) else -math.inf
        bound = mixed and r.get("table_kind") == "roofline"
        return bound, order.get(r["status"], 2), r["usd_per_hour"], -head, cost

    ranked = sorted(rows, key=key)
    return [{"rank": i, **r} for i, r in enumerate(ranked, 1)]


def versus_best(rows: list[dict], options: list[dict]) -> list[dict]:
    """Each ranked pair with its option's typical step-time error (``table_error``) and, for a met pair, how far
    its spend is from the first met pair's (``apart_from_best``, the share of it the best saves) and whether that
    is beyond the two tables' error (``told_apart_from_best``: false inside it, and at equal spend, where the
    headroom ranks them); both empty for the best itself and for pairs not met."""
    by_name = {o["name"]: o for o in options}
    best = next((r for r in rows if r["status"] == MET), None)
    out = []
    for r in rows:
        option = by_name.get(r["hardware"], {})
        extra = {"table_error": typical_error(option.get("table_expected_error")), "apart_from_best": None,
                 "told_apart_from_best": None}
        if best is not None and r["status"] == MET and r is not best:
            gap = apart(best["usd_per_hour"], r["usd_per_hour"])
            error = error_between(by_name.get(best["hardware"], {}), option)
            extra.update(apart_from_best=gap, told_apart_from_best=gap > 0 and not not_told_apart(gap, error))
        out.append({**r, **extra})
    return out


def compare(scn: LoadedScenario, options: list[HardwareOption], plans: dict[str, dict],
            bounds_apart: bool = True) -> dict:
    """hardware.json's document from every option's plan (plan.json's document): the options summarised, the
    ranked pairs (roofline bounds after the rest unless ``bounds_apart`` is false) and the verdict."""
    by_name = {o.name: o for o in options}
    kinds = {name: (doc.get("table") or {}).get("kind", "unknown") for name, doc in plans.items()}
    shown = [{"name": o.name, "gpu": o.gpu, "table": str(o.table), "table_kind": kinds[o.name],
              "table_expected_error": (plans[o.name].get("table") or {}).get("expected_error"),
              "usd_per_gpu_hour": o.usd_per_gpu_hour,
              "plan": f"hardware/{o.name}/plan.json", "prefill": plans[o.name].get("prefill") and {
                  k: plans[o.name]["prefill"][k] for k in ("replicas", "gpus_per_replica", "met", "why_unmet")},
              "verdict": plans[o.name]["verdict"], "wall_seconds": plans[o.name].get("wall_seconds")}
             for o in options]
    rows = versus_best(rank([{**pair_row(by_name[name], e), "table_kind": kinds[name]} for name, doc in plans.items()
                             for e in doc["systems"].values()], bounds_apart), shown)
    first = next(iter(plans.values()))
    t = first["target"]
    doc = {
        "scenario": scn.name,
        "target": {k: v for k, v in t.items() if k != "gpu_hour_cost_usd"},
        "traffic": first.get("traffic"), "arrival_rate": first.get("arrival_rate"),
        "baseline": first.get("baseline"), "quick": first.get("quick"), "seeds": first.get("seeds"),
        "overrides": list(scn.overrides),
        "options": shown,
        "pairs": rows, "bounds_apart": bounds_apart,
    }
    doc["verdict"] = hardware_verdict(doc)
    return doc


def hardware_table(doc: dict) -> pd.DataFrame:
    return pd.DataFrame(doc["pairs"], columns=HARDWARE_COLUMNS)


def write_hardware(out: Path, doc: dict) -> tuple[Path, Path]:
    return write_table_and_json(out, "hardware", hardware_table(doc), doc)
