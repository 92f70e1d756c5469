"""The sentences a plan ends with, in every mode: pure functions of the plan's document (plan.json,
day_plan.json, hardware.json), so that what a plan says follows from what it recorded and nothing else.

- ``verdict``: a plan (``simulate plan``; a fleet plan adds ``fleet_sentence``): who needs the fewest GPUs at
  the SLA, ties within the headroom search's precision named as ties, the saving over the baseline, and what the
  GPU counts rest on (a roofline bound, a table whose typical error exceeds the headroom);
- ``day_verdict``: a day plan (``--per-segment``): the fewest GPU-hours per day and the saving;
- ``hardware_verdict``: a hardware choice (``--hardware``): the cheapest (hardware, system) pair and the saving
  over the best on other hardware (not told apart where the tables' typical step-time error exceeds it) and over
  the baseline;
- ``plan_engine`` and ``day_engine``: which policy the engine should run, per load segment (a plain plan is one
  segment), with its margin over the runner-up and over no speculation and whether that margin exceeds the
  run-to-run noise the plan's seeds measured.

runs/ builds the documents and calls these; nothing here imports runs/ (runs/plan.py takes the statuses from
here).
"""

from __future__ import annotations

import math

from hw_profile.tables.sidecar import TABLE_KINDS
from simulator.outputs.summary import headroom_text
from simulator.outputs.table_error import apart, error_between, inside_phrase, not_told_apart

# a system's status in a plan document (plan.json's systems[*].status): written by runs/plan.py, read here
MET, UNMET, UNRESOLVED_STATUS = "met", "unmet_at_max_gpus", "unresolved"
# a day plan's segment whose count is above every count that met at its rate, taken from a higher-rate segment
# (monotonicity; runs/day_plan.py)
MET_AT_HIGHER_RATE = "met_at_higher_rate"


# --- a plan (simulate plan) ----------------------------------------------------------------------------------------

def table_error_caveat(doc: dict, headroom: float | None) -> str:
    """The sentence a verdict ends with when the table's own typical step-time error is larger than the
    headroom the plan found: a step that much slower would eat it, so the count rests on the table, not the
    seeds; "" otherwise (or when the table does not say how far to trust it)."""
    error = ((doc.get("table") or {}).get("expected_error") or {})
    median = error.get("step_median")
    if not isinstance(median, (int, float)) or headroom is None or headroom >= median:
        return ""
    return (f" The step times are {error['summary']}: a typical step-time error ({median:.0%}) is larger than this "
            f"headroom ({headroom:+.0%}), so the GPU count is limited by the table, not by the seeds; "
            f"{error.get('narrow_it', 'calibrate it on measured steps (hw-profile calibrate --prior)')} narrows it.")


def bound_caveat(doc: dict) -> str:
    """The sentence a verdict ends with when its step times come from a roofline table (a speed bound), else ""."""
    table = doc.get("table") or {}
    if table.get("kind") != "roofline":
        return ""
    return (f" Its step times come from {table.get('path', 'the table')}, {TABLE_KINDS['roofline']}: real steps are "
            "slower, so these GPU counts are a lower bound; plan on an estimate (hw-profile estimate) or a measured "
            "table.")


def load_phrase(doc: dict) -> str:
    """The traffic a plan sized for: the scenario's rate, and the realised one when it differs (a Poisson
    stream's window of one seed is not exactly its mean)."""
    realised = doc.get("arrival_rate")
    traffic = doc.get("traffic") or {}
    nominal = traffic.get("rate") if traffic.get("kind") == "poisson" else None
    if nominal:
        text = f"{nominal:,.1f} requests/s"
        if realised and abs(realised / nominal - 1) > 0.005:
            n = len(doc.get("seeds") or [doc.get("seed")])
            draws = "one seed" if n == 1 else f"{n} seeds, mean"
            text += f" ({realised:,.1f} realised in the measured window: Poisson arrivals of {draws})"
        return text
    return f"{realised:,.1f} requests/s" if realised else "the scenario's traffic"


def sla_phrase(t: dict) -> str:
    """The SLA of a plan's ``target`` block, as its verdicts quote it."""
    return f"{t['attainment']:.0%} of requests at >= {t['tps_per_user']:g} tok/s/user, TTFT p99 <= {t['ttft_p99_s']:g} s"


def tied_at_best(rows: list[dict], tolerance: float) -> list[dict]:
    """The rows (deployments serving the same traffic at the same cost) that could be at least as good as the
    best headroom bound among them: their own bound reaches it, or the most headroom their data leave possible
    does (the smallest multiplier seen to fail clearly, ``headroom_hi``; with several seeds an unresolved
    stretch can lie between; else the search's precision above the bound)."""
    def bound(e: dict) -> float:
        return e["headroom"] or 0.0

    def ceiling(e: dict) -> float:
        hi = e.get("headroom_hi")
        return hi if hi is not None and not math.isnan(hi) else (1 + bound(e)) * (1 + tolerance) - 1

    top = max(bound(e) for e in rows)
    return [e for e in rows if bound(e) >= top - 1e-9 or ceiling(e) > top + 1e-9]


def verdict(doc: dict) -> str:
    t = doc["target"]
    rows = [e for e in doc["systems"].values()]
    sla = sla_phrase(t)
    load = load_phrase(doc)
    met = [e for e in rows if e["status"] == MET]
    if not met:
        best = max(rows, key=lambda e: (e["attainment"] if e["attainment"] is not None else -1))
        open_ = [e["system"] for e in rows if e["status"] == UNRESOLVED_STATUS]
        tail = (f"; {', '.join(open_)} cannot be resolved at this precision (more --replicates)" if open_ else "")
        return (f"No system meets {sla} at {load} within {t['max_gpus']} GPUs; the closest is {best['system']} "
                f"({best['attainment']:.1%} of requests at the target with {best['gpus']} GPUs){tail}."
                + bound_caveat(doc))
    # equal GPUs serve the same traffic at the same cost: the headroom tells them apart, to the precision of
    # its search; within that they tie (the cost per token at equal GPUs and traffic is measurement noise)
    fewest_gpus = min(e["gpus"] for e in met)
    contenders = [e for e in met if e["gpus"] == fewest_gpus]
    tol = t.get("rate_tolerance", 0.05)
    tied = tied_at_best(contenders, tol)
    best = min(tied, key=lambda e: (-e["headroom"], e["cost_per_mtok"]))
    split = (f" ({best['prefill_gpus']} prefill + {best['decode_gpus']} decode)" if best["prefill_gpus"] else "")
    if len(tied) > 1:
        n_seeds = max(e.get("seeds") or 1 for e in tied)
        seeds_note = f" and {n_seeds} seeds" if n_seeds > 1 else ""
        names = [e["system"] for e in tied]
        costs = [e["cost_per_mtok"] for e in tied]
        heads = [e["headroom"] for e in tied]
        head = (f"{heads[0]:+.0%}" if max(heads) - min(heads) < 0.005 else f"{min(heads):+.0%} to {max(heads):+.0%}")
        cost = (f"${min(costs):.3f}" if f"{min(costs):.3f}" == f"{max(costs):.3f}"
                else f"${min(costs):.3f}-${max(costs):.3f}")
        text = (f"At {load} with {sla}, {', '.join(names[:-1])} and {names[-1]} tie for the fewest GPUs: "
                f"{fewest_gpus}{split}, with {head} headroom (not told apart: each one's interval reaches the "
                f"best's bound at the search's {tol:.0%} precision{seeds_note}), at "
                f"{cost} per million output tokens (${t['gpu_hour_cost_usd']:g}/GPU-hour)")
    else:
        text = (f"At {load} with {sla}, {best['system']} needs the fewest GPUs: {best['gpus']}{split}, with "
                f"{best['headroom']:+.0%} headroom, at ${best['cost_per_mtok']:.3f} per million output tokens "
                f"(${t['gpu_hour_cost_usd']:g}/GPU-hour)")
    seeds = best.get("seeds") or 1
    if seeds > 1 and best.get("attainment_lo") is not None:
        text += (f"; attainment {best['attainment']:.1%} (95% interval {best['attainment_lo']:.1%}-"
                 f"{best['attainment_hi']:.1%} over {seeds} seeds)")
    if best.get("gpus_lo") is not None and best["gpus_lo"] < best["gpus"]:
        text += (f"; between {best['gpus_lo']} and {best['gpus']} GPUs the SLA cannot be resolved at {seeds} "
                 "seeds")
    fewer_headroom = [e for e in contenders if e not in tied]
    if fewer_headroom:
        n = len(fewer_headroom)
        text += (f"; {n} other system{'s need' if n > 1 else ' needs'} as many, with less headroom ("
                 f"{'their intervals end' if n > 1 else 'its interval ends'} at or below the best's "
                 f"{best['headroom']:+.0%}: " + ", ".join(
                     f"{e['system']} {headroom_text(e['headroom'], e.get('headroom_hi'), tol)}" for e in fewer_headroom)
                 + ")")
    open_ = [e["system"] for e in rows if e["status"] == UNRESOLVED_STATUS]
    if open_:
        text += (f"; {', '.join(open_)} cannot be resolved within {t['max_gpus']} GPUs at this precision (no "
                 "size clearly meets, not all clearly fail)")
    base = doc["systems"].get(doc["baseline"]) if doc.get("baseline") else None
    if base is not None and all(base is not e for e in tied):
        if base["status"] != MET:
            text += f"; the baseline {base['system']} does not meet it within {t['max_gpus']} GPUs"
        elif base["gpus"] > fewest_gpus:
            saved = base["gpus"] - fewest_gpus
            text += (f"; that is {saved} GPU{'s' if saved != 1 else ''} ({saved / base['gpus']:.0%}) fewer than "
                     f"{base['system']}'s {base['gpus']}")
        else:
            text += f"; the baseline {base['system']} needs as many, with {base['headroom']:+.0%} headroom"
    return text + "." + bound_caveat(doc) + table_error_caveat(doc, best["headroom"])


# --- a fleet plan (simulate plan --probe-replicas) -----------------------------------------------------------------

def fleet_sentence(doc: dict) -> str:
    """What the verdict adds for a fleet plan: the probe, and how the full-size confirmations came out."""
    f = doc["fleet"]
    done = {k: e["confirmation"] for k, e in f["systems"].items() if e["confirmation"]}
    text = f"Capacity per replica probed on {f['probe_replicas']} replica(s)"
    if not done:
        return text + "; no system was confirmed at full size."
    inside = [k for k, c in done.items() if c["within_prediction"]]
    disagree = [k for k, c in done.items() if not c["agrees"]]
    text += (f"; confirmed at full size for {len(done)} system(s): attainment within the probe's interval for "
             f"{len(inside)} of {len(done)}")
    outside = [k for k in done if k not in inside]
    if outside:
        text += " (outside: " + ", ".join(
            f"{k} {done[k]['attainment']:.2%} vs {doc['systems'][k]['attainment_lo']:.2%}-"
            f"{doc['systems'][k]['attainment_hi']:.2%}" for k in outside) + ")"
    text += ("; the SLA verdict agrees with the probe's for all" if not disagree
             else f"; the SLA verdict differs from the probe's for {', '.join(disagree)}")
    return text + "."


# --- a day plan (simulate plan --per-segment) ----------------------------------------------------------------------

def day_verdict(doc: dict) -> str:
    """One sentence: who needs the fewest GPU-hours over the day, at what cost, and the saving over the
    baseline and over a fleet sized for the peak all day."""
    t = doc["target"]
    usd = t["gpu_hour_cost_usd"]
    systems = list(doc["systems"].values())
    rates = [s["rate"] for s in doc["segments"]]
    days = doc["days_per_span"]
    over = "a day" if abs(days - 1) < 1e-9 else f"a day (the {doc['span_s'] / 3600:g} h span repeated)"
    sla = sla_phrase(t)
    head = (f"Over {over} of {doc['scenario']} ({len(rates)} segments, {min(rates):,.1f}-{max(rates):,.1f} "
            f"requests/s) with {sla}, ")
    met = [e for e in systems if not e["unmet_segments"]]
    if not met:
        return head + f"no system meets the SLA in every segment within {t['max_gpus']} GPUs."
    least = min(e["gpu_hours_per_day"] for e in met)
    best = [e for e in met if e["gpu_hours_per_day"] <= least + 1e-9]
    names = [e["system"] for e in best]
    b = best[0]
    who = (f"{names[0]} needs" if len(names) == 1
           else f"{', '.join(names[:-1])} and {names[-1]} tie for")
    fleet = ""
    if len({(e["fewest_gpus"], e["peak_gpus"]) for e in best}) == 1:  # tied systems may follow different fleets
        fleet = (f"; {b['fewest_gpus']}-{b['peak_gpus']} GPUs through the day, {b['static_gpu_hours_per_day']:,.0f} "
                 "GPU-hours if sized for the peak all day")
    text = (head + f"{who} the fewest GPU-hours: {b['gpu_hours_per_day']:,.0f} per day "
            f"(${b['usd_per_day']:,.0f} at ${usd:g}/GPU-hour{fleet})")
    base = doc["systems"].get(doc.get("baseline") or "")
    if base is not None and base["system"] not in names:
        if base["unmet_segments"]:
            text += (f"; the baseline {base['system']} does not meet it in {len(base['unmet_segments'])} "
                     f"segment(s) within {t['max_gpus']} GPUs")
        else:
            saved = base["gpu_hours_per_day"] - b["gpu_hours_per_day"]
            text += (f"; that is {saved:,.0f} GPU-hours (${saved * usd:,.0f}, {saved / base['gpu_hours_per_day']:.0%})"
                     f" a day fewer than {base['system']}'s {base['gpu_hours_per_day']:,.0f}")
    unmet = [e["system"] for e in systems if e["unmet_segments"]]
    if unmet and (base is None or base["system"] not in unmet or len(unmet) > 1):
        text += f"; {', '.join(unmet)} miss the SLA in some segment (their GPU-hours are a lower bound)"
    return text + "."


# --- a hardware choice (simulate plan --hardware) ------------------------------------------------------------------

def _pair(r: dict) -> str:
    split = f" ({r['prefill_gpus']} prefill + {r['decode_gpus']} decode)" if r["prefill_gpus"] else ""
    return (f"{r['gpus']} {r['gpu']} GPU{'s' if r['gpus'] != 1 else ''}{split}, ${r['usd_per_hour']:,.2f}/hour, "
            f"${r['cost_per_mtok']:.3f} per million output tokens")


def _versus(best: dict, other: dict, what: str, error: float | None = None) -> str:
    """What ``best`` saves over ``other``: in spend per hour, which at the SLA buys the same traffic (the
    measured cost per token at equal spend differs only by the measurement window's tokens); "not told apart"
    where the saving is inside ``error``, the tables' typical step-time error (``table_error.error_between``)."""
    if other["usd_per_hour"] <= best["usd_per_hour"]:
        return f"{what} ({other['system']}: {_pair(other)}) costs as much, with {other['headroom']:+.0%} headroom"
    less = apart(best["usd_per_hour"], other["usd_per_hour"])
    if not_told_apart(less, error):
        return f"{what} ({other['system']}: {_pair(other)}) is {inside_phrase(less, error)}"
    return (f"{less:.0%} less (${other['usd_per_hour'] - best['usd_per_hour']:,.2f}/hour for the same traffic) "
            f"than {what} ({other['system']}: {_pair(other)})")


# an estimate with fewer of its points on measured kernels than this rests mostly on the kernel roofline
MOSTLY_ROOFLINE = 0.2


def kinds_caveat(doc: dict) -> str:
    """The sentences a hardware verdict ends with when an option's table is a roofline bound (its GPU counts are
    lower bounds, not comparable with estimates or measurements) or an estimate priced mostly from the kernel
    roofline beside one on measured kernels (too fast at low load: not an even comparison); "" when none is."""
    options = doc.get("options") or []
    return _bounds_caveat(options, doc.get("bounds_apart", True)) + _thin_estimates_caveat(options)


def _thin_estimates_caveat(options: list[dict]) -> str:
    shares = {o["name"]: (o.get("table_expected_error") or {}).get("inside_share") for o in options
              if o.get("table_kind") == "estimate"}
    shares = {name: s for name, s in shares.items() if isinstance(s, (int, float))}
    thin = [name for name, s in shares.items() if s < MOSTLY_ROOFLINE]
    if not thin or len(thin) == len(shares):
        return ""
    which = ", ".join(f"{name} ({shares[name]:.0%})" for name in thin)
    return (f" The estimate of {which} prices few of its points from measured kernels (the kernel roofline the "
            "rest), against "
            + ", ".join(f"{n} ({s:.0%})" for n, s in shares.items() if n not in thin)
            + ": a roofline is too fast at low load, so that comparison favours it; measure or calibrate it "
            "(hw-profile calibrate --prior) before choosing it.")


def _bounds_caveat(options: list[dict], bounds_apart: bool = True) -> str:
    bounds = [o["name"] for o in options if o.get("table_kind") == "roofline"]
    if not bounds:
        return ""
    others = sorted({o.get("table_kind", "unknown") for o in options if o["name"] not in bounds})
    versus = f"; not comparable with the {' and '.join(others)} table(s) of the others" if others else ""
    apart = "; ranked after the others" if others and bounds_apart else ""
    return (f" {', '.join(bounds)} {'is a speed bound' if len(bounds) == 1 else 'are speed bounds'} (a roofline "
            f"table: real steps are slower, so its GPU counts are lower bounds){versus}{apart}.")


def hardware_verdict(doc: dict) -> str:
    """One sentence: the cheapest pair (pairs at the same spend and headroom named as a tie), what it saves over
    the best pair on the next cheapest hardware (or that it is not told apart from it: a saving inside the two
    tables' typical step-time error) and over the baseline system on its own hardware; then what a
    roofline option's figures are (``kinds_caveat``)."""
    return _cheapest(doc) + kinds_caveat(doc)


def _cheapest(doc: dict) -> str:
    t = doc["target"]
    sla = sla_phrase(t)
    load = load_phrase(doc)
    rows = doc["pairs"]
    prices = ", ".join(f"{o['name']} at ${o['usd_per_gpu_hour']:.2f}" for o in doc["options"])
    met = [r for r in rows if r["status"] == MET]
    if not met:
        best = max(rows, key=lambda r: r["attainment"] if r["attainment"] is not None else -1)
        return (f"No (hardware, system) pair meets {sla} at {load} within {t['max_gpus']} GPUs (per GPU-hour: "
                f"{prices}); the closest is {best['system']} on {best['hardware']} ({best['attainment']:.1%} of "
                f"requests at the target with {best['gpus']} GPUs).")
    best = met[0]
    tol = t.get("rate_tolerance", 0.05)
    # the same spend serves the same traffic: pairs whose headroom intervals reach the best's bound tie, as
    # systems of equal GPUs do in each option's plan (ranked by spend, then headroom: the best leads them)
    tied = tied_at_best([r for r in met if r["usd_per_hour"] == best["usd_per_hour"]], tol)
    one_hw = len({r["hardware"] for r in tied}) == 1
    names = [r["system"] if one_hw else f"{r['system']} on {r['hardware']}" for r in tied]
    where = f" on {best['hardware']}" if one_hw else ""
    n_seeds = len(doc.get("seeds") or [0])
    precision = f"the search's {tol:.0%} precision" + (f" and {n_seeds} seeds" if n_seeds > 1 else "")
    who = names[0] if len(names) == 1 else (f"{', '.join(names[:-1])} and {names[-1]} (tied: the same spend, "
                                            f"each one's headroom interval reaching the best's bound at "
                                            f"{precision})")
    heads = sorted(r["headroom"] or 0 for r in tied)
    head = f"{heads[-1]:+.0%}" if heads[-1] - heads[0] < 0.005 else f"{heads[0]:+.0%} to {heads[-1]:+.0%}"
    text = (f"At {load} with {sla} (assumed per GPU-hour: {prices}), the cheapest is {who}{where}: "
            f"{_pair(best)}, {head} headroom")
    winners = {r["hardware"] for r in tied}
    others = [o["name"] for o in doc["options"] if o["name"] not in winners]
    other_best = [next((r for r in met if r["hardware"] == h), None) for h in others]
    met_other = [r for r in other_best if r is not None]
    if met_other:
        nxt = min(met_other, key=lambda r: r["rank"])
        options = {o["name"]: o for o in doc["options"]}
        error = error_between(options.get(best["hardware"], {}), options.get(nxt["hardware"], {}))
        text += "; " + _versus(best, nxt, f"the best on {nxt['hardware']}", error)
    missing = [h for h, r in zip(others, other_best, strict=True) if r is None]
    if missing:
        text += f"; on {', '.join(missing)} no system meets it within {t['max_gpus']} GPUs"
    base_name = doc.get("baseline")
    base = next((r for r in rows if r["system"] == base_name and r["hardware"] == best["hardware"]), None)
    if base is not None and all(base is not r for r in tied):
        if base["status"] != MET:
            text += f"; the baseline {base_name} does not meet it on {best['hardware']} within {t['max_gpus']} GPUs"
        else:
            text += "; " + _versus(best, base, f"the baseline on {best['hardware']}")
    return text + "."


# --- which policy the engine runs, per load segment (simulate plan, --per-segment) -----------------------------

# how to add the arm a plan lacks: a system with no drafter, verifying nothing (simulator/inputs/systems.py)
NO_SPECULATION_HINT = "--set systems+=ar"
_SIZED = (MET, MET_AT_HIGHER_RATE)


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _plan_order(e: dict) -> tuple:
    """The order a plan's verdict reads systems in: met first, fewest GPUs, then most headroom, then the cheapest
    per token (its ``best`` is the first); then unresolved, then unmet ones, fewest GPUs first."""
    head = e.get("headroom")
    cost = e.get("cost_per_mtok")
    return ({MET: 0, UNRESOLVED_STATUS: 1}.get(e["status"], 2), e["gpus"],
            math.inf if _missing(head) else -head, math.inf if _missing(cost) else cost)


def _beyond_noise(best: dict, other: dict, seeds: int, tied: list[str], headroom: bool) -> bool | None:
    """Whether ``best``'s lead over ``other`` is more than the plan's seeds leave open: ``other`` clearly fails
    with as many GPUs as ``best`` needs (its ``gpus_lo``, the fewest GPUs the seeds cannot rule out, is above
    them), or at equal GPUs clearly fails at a traffic ``best`` clearly meets (its ``headroom_hi`` at or below
    ``best``'s headroom), or it clearly fails within the budget (unmet, not unresolved). False for a margin of
    nothing (a tie); None with one seed, which measures no run-to-run noise."""
    if other["status"] in _SIZED and other["gpus"] == best["gpus"] and (other["system"] in tied or not headroom):
        return False
    if seeds <= 1:
        return None
    if other["status"] not in _SIZED:
        return other["status"] != UNRESOLVED_STATUS
    if other["gpus"] > best["gpus"]:
        lo = other.get("gpus_lo")
        return best["gpus"] < (other["gpus"] if _missing(lo) else lo)
    hi = other.get("headroom_hi")
    return not _missing(hi) and hi <= best["headroom"] + 1e-9


def _against(best: dict, other: dict, beyond: bool | None, tied: list[str], headroom: bool, seeds: int,
             max_gpus: int) -> str:
    """The margin over one other system, in words, with what the seeds say of it."""
    name, gpus = other["system"], other["gpus"]
    if other["status"] == UNRESOLVED_STATUS:
        margin = f"{name} cannot be resolved within {max_gpus} GPUs"
    elif other["status"] not in _SIZED:
        margin = f"{name} does not meet the SLA within {max_gpus} GPUs"
    elif gpus > best["gpus"]:
        d = gpus - best["gpus"]
        margin = f"{d} GPU{'s' if d != 1 else ''} fewer than {name}'s {gpus}"
    elif name in tied or not headroom:
        margin = f"as many GPUs as {name}, not told apart"
    else:
        margin = f"as many GPUs as {name}, headroom {best['headroom']:+.0%} against {other['headroom']:+.0%}"
    noise = ("" if beyond is False and gpus == best["gpus"] and other["status"] in _SIZED
             else ", noise not measured (one seed; more --replicates measure it)" if beyond is None
             else f", {'beyond' if beyond else 'within'} run-to-run noise ({seeds} seeds)")
    return margin + noise


def _choose(entries: list[dict], key, tied_of, headroom: bool, no_spec: list[str], seeds: int,
            max_gpus: int) -> dict:
    """One segment's choice from its systems' entries (each with system, status, gpus, gpus_lo and, where
    measured, headroom and headroom_hi): the first by ``key`` among those that meet, the runner-up the next,
    and the best of the no-speculation arms ``no_spec`` (names), each margin with its noise flag."""
    ranked = sorted(entries, key=key)
    out = {"policy": None, "speculation": None, "gpus": None, "tied_with": [], "runner_up": None,
           "margin_gpus": None, "margin_beyond_noise": None, "no_speculation": None,
           "no_speculation_margin_gpus": None, "no_speculation_beyond_noise": None, "seeds": seeds}
    if not ranked or ranked[0]["status"] not in _SIZED:
        open_ = [e["system"] for e in ranked if e["status"] == UNRESOLVED_STATUS]
        out["line"] = (f"no policy meets the SLA within {max_gpus} GPUs"
                       + (f" ({', '.join(open_)} unresolved at {seeds} seed(s))" if open_ else ""))
        return out
    best = ranked[0]
    tied = [e["system"] for e in tied_of([e for e in ranked if e["status"] in _SIZED and e["gpus"] == best["gpus"]])
            if e is not best]
    out.update(policy=best["system"], speculation=best["system"] not in no_spec, gpus=best["gpus"], tied_with=tied)
    off = not out["speculation"]
    gpus = f"{best['gpus']} GPU{'s' if best['gpus'] != 1 else ''}"
    line = (f"turn speculation off ({best['system']}, {gpus})" if off else f"run {best['system']} ({gpus})")
    if len(ranked) > 1:
        other = ranked[1]
        beyond = _beyond_noise(best, other, seeds, tied, headroom)
        out.update(runner_up=other["system"], margin_beyond_noise=beyond,
                   margin_gpus=other["gpus"] - best["gpus"] if other["status"] in _SIZED else None)
        what = "the best speculating policy" if off and other["system"] not in no_spec else "the runner-up"
        line += f"; against {what}: " + _against(best, other, beyond, tied, headroom, seeds, max_gpus)
    else:
        line += "; no other policy compared"
    arms = [e for e in ranked if e["system"] in no_spec]
    if not arms:
        line += f"; no-speculation not compared (add it: {NO_SPECULATION_HINT})"
    elif not off:
        arm = arms[0]
        beyond = _beyond_noise(best, arm, seeds, tied, headroom)
        out.update(no_speculation=arm["system"], no_speculation_beyond_noise=beyond,
                   no_speculation_margin_gpus=arm["gpus"] - best["gpus"] if arm["status"] in _SIZED else None)
        line += "; against no speculation: " + _against(best, arm, beyond, tied, headroom, seeds, max_gpus)
    else:
        out["no_speculation"] = best["system"]
    out["line"] = line
    return out


def plan_engine(doc: dict) -> dict:
    """Which policy the engine should run for a plan's traffic (plan.json's ``engine``): the system its verdict
    names (fewest GPUs at the SLA; at equal GPUs the most headroom, then the cheapest per token), "turn
    speculation off" when that is a no-speculation arm (``no_speculation``: the systems that verify nothing), its
    margins over the runner-up and over no speculation, and whether each exceeds the run-to-run noise of the
    plan's seeds (``_beyond_noise``)."""
    t = doc["target"]
    entries = list(doc["systems"].values())
    choice = _choose(entries, _plan_order, lambda rows: tied_at_best(rows, t.get("rate_tolerance", 0.05)), True,
                     doc.get("no_speculation") or [], len(doc.get("seeds") or [doc.get("seed")]), t["max_gpus"])
    return {"segment": None, "rate": doc.get("arrival_rate"), **choice}


def day_engine(doc: dict) -> list[dict]:
    """``plan_engine`` per segment of a day plan (day_plan.json's ``engine``). The peak's segments read the
    peak's whole plan (headroom included); a lower rate's runs measure no headroom, so systems with as many GPUs
    there are not told apart and the pick among them follows the peak plan's verdict order. A segment where
    nothing arrives needs no policy."""
    peak = doc["peak_plan"]
    order = {e["system"]: i for i, e in enumerate(sorted(peak["systems"].values(), key=_plan_order))}
    no_spec = doc.get("no_speculation") or peak.get("no_speculation") or []
    seeds = len(doc.get("seeds") or [None])
    max_gpus = doc["target"]["max_gpus"]
    peak_rate = max(s["rate"] for s in doc["segments"])
    at_peak = plan_engine(peak)
    out = []
    for seg in doc["segments"]:
        rows = [r for r in doc["rows"] if r["segment"] == seg["segment"] and r["start"] == seg["start"]]
        head = {"segment": seg["segment"], "rate": seg["rate"]}
        if seg["rate"] <= 0:
            out.append({**head, **_choose([], _plan_order, list, False, no_spec, seeds, max_gpus),
                        "line": "nothing arrives: no GPUs, no policy"})
        elif seg["rate"] == peak_rate:
            out.append({**at_peak, **head})
        else:
            def key(r: dict) -> tuple:
                return (0 if r["status"] in _SIZED else 1 if r["status"] == UNRESOLVED_STATUS else 2, r["gpus"],
                        order.get(r["system"], len(order)))
            out.append({**head, **_choose(rows, key, list, False, no_spec, seeds, max_gpus)})
    return out


def engine_lines(doc: dict) -> list[str]:
    """The engine choice for a terminal or a report: a plan's one line, or a day plan's line per rate naming the
    segments at it (segments at one rate share their plan, hence their choice)."""
    engine = doc.get("engine") or []
    if not engine:
        return []
    if engine[0]["segment"] is None:
        return [f"Engine policy: {engine[0]['line']}."]
    by_rate: dict[float, list[dict]] = {}
    for e in engine:
        by_rate.setdefault(e["rate"], []).append(e)
    return ["Engine policy per segment:", *(
        f"  {', '.join(e['segment'] for e in group)} ({rate:,.1f} requests/s): {group[0]['line']}"
        for rate, group in by_rate.items())]
