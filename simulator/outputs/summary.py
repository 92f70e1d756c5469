"""What a planner reads first: per system, the open-loop operating point and the frontier at the SLA anchors.

Written as ``DIR/frontier.csv`` (closed-loop points averaged over seeds, frontier marked) and ``DIR/summary.json``;
the terminal and the report show the same headline table.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from atomic_files import atomic_write, atomic_write_text
from simulator.inputs.config import LoadedScenario
from simulator.outputs.frontier import anchors_summary, default_baseline, frontier_table, mean_ci
from simulator.outputs.metrics import OVERLOAD_SHARE, overloaded

OPEN_LOOP_FIELDS = ("throughput_per_gpu", "tps_per_user", "tps_per_user_p50", "tps_per_user_p10", "ttft_p99",
                    "admission_wait_p99", "sla_attainment", "tau", "mean_verify_budget", "joules_per_token",
                    "arrival_rate", "unfinished")


def build_summary(scn: LoadedScenario, runs: pd.DataFrame) -> dict:
    m = scn.model
    systems = list(dict.fromkeys(runs["policy"]))
    anchors = list(m.sla.tps_targets)
    baseline = default_baseline(systems, m.sla.baseline)
    frontier = anchors_summary(runs, anchors, baseline) if runs["concurrency"].notna().any() else {}
    out_systems = {}
    for system in systems:
        mine = runs[runs["policy"] == system]
        entry: dict = {"drafter": mine["drafter"].iloc[0], "gamma": int(mine["gamma"].iloc[0]),
                       "policy": mine["policy_impl"].iloc[0]}
        opened = mine[mine["concurrency"].isna()]
        if len(opened):
            entry["open_loop"] = {}
            for f in OPEN_LOOP_FIELDS:
                mean, ci = mean_ci(opened[f].to_numpy(dtype=float))
                entry["open_loop"][f] = mean
                entry["open_loop"][f"{f}_ci95"] = ci
            entry["open_loop"]["saturated"] = bool(opened["saturated"].any())
            entry["open_loop"]["overloaded"] = bool(overload_mask(opened).any())
            entry["open_loop"]["steady_state"] = bool(opened["steady_state"].all())
        entry.update(frontier.get(system, {}))
        g = entry.get("tps_gain_at_matched_throughput")
        if g is not None and "span" not in g and baseline in systems:
            g["span"] = shared_throughput_span(runs, system, baseline)
        entry["flags"] = run_flags(mine)
        out_systems[system] = entry
    return {
        "scenario": scn.name,
        "description": m.description,
        "sla_anchors": anchors,
        "baseline": baseline,
        "seeds": sorted(int(s) for s in runs["seed"].unique()),
        "quick": bool(runs["quick"].any()),
        "overrides": list(scn.overrides),
        "systems": out_systems,
    }


def shared_throughput_span(runs: pd.DataFrame, system: str, baseline: str) -> list[float]:
    """The throughput range (tok/s/GPU) both closed-loop curves cover: where TPS at matched throughput is read."""
    closed = runs[runs["concurrency"].notna()]
    spans = []
    for s in (system, baseline):
        thr = closed[closed["policy"] == s].groupby("concurrency")["throughput_per_gpu"].mean()
        spans.append((float(thr.min()), float(thr.max())) if len(thr) else (math.nan, math.nan))
    lo, hi = max(spans[0][0], spans[1][0]), min(spans[0][1], spans[1][1])
    return [lo, hi] if lo <= hi else [math.nan, math.nan]


# Why a run's numbers should not be planned on (``FLAG_CAUSES``), and what to change, which depends on the load
# point: a closed-loop point holds a fixed number of users (fewer users, or a longer run, clears it), an
# open-loop point takes the scenario's traffic (less traffic, or more replicas).
FLAG_LABELS = {"no_steps": "no engine steps", "no_finished": "no request finished", "saturated": "saturated",
               "overloaded": "overloaded", "beyond_table": "beyond the step-time table"}
FLAG_CAUSES = {
    "no_steps": "no engine step ran: the run is too short or no request arrived",
    "no_finished": "no request that arrived in the measurement window finished by the drain cap, so the point "
                   "has no speed to report",
    "saturated": "the queue was still growing at the end: the traffic is more than this deployment serves",
    "overloaded": f"more than {OVERLOAD_SHARE:.0%} of the requests that arrived in the window were still "
                  "unfinished at the drain cap, so their speed and latency figures are partial",
    "beyond_table": "steps ran beyond the step-time table's grid, so their times are extrapolated",
}
LONGER_RUN = "a longer run (run.duration_s, run.drain_cap_s)"
FLAG_ADVICE = {
    ("no_steps", "closed"): LONGER_RUN,
    ("no_steps", "open"): f"{LONGER_RUN}, or check traffic.rate",
    ("no_finished", "closed"): f"{LONGER_RUN} for the output lengths",
    ("no_finished", "open"): f"{LONGER_RUN} for the output lengths, or lower traffic.rate or add hardware.replicas",
    ("saturated", "closed"): "fewer users (frontier.concurrency) or a larger engine.max_running",
    ("saturated", "open"): "lower traffic.rate or add hardware.replicas; `simulate plan` sizes it",
    ("overloaded", "closed"): f"fewer users (frontier.concurrency) or {LONGER_RUN}",
    ("overloaded", "open"): "lower traffic.rate or add hardware.replicas (the running batch took on more than it "
                            f"serves, with no queue to show it), or {LONGER_RUN}",
    ("beyond_table", "closed"): "measure a larger grid (hw-profile), or fewer users or a lower "
                                "engine.max_batch_tokens / max_running",
    ("beyond_table", "open"): "measure a larger grid (hw-profile), or a lower engine.max_batch_tokens / max_running",
}
# the causes a short run can make: with --quick, the first thing to try is a run of full length
SHORT_RUN_KINDS = ("no_steps", "no_finished", "overloaded")


def _loop(point: str) -> str:
    return "open" if point == "open" else "closed"


def _point_order(point: str) -> tuple[int, int]:
    """Closed-loop points by their users, then the open-loop point."""
    return (1, 0) if point == "open" else (0, int(point.rsplit("-", 1)[-1]))


def flag_hint(kind: str, points: list[str], quick: bool = False) -> str:
    """The cause of a flag and the advice that fits its load points (closed loop, open loop or both)."""
    loops = list(dict.fromkeys(_loop(p) for p in points))
    advice = "; ".join(f"{'closed loop' if lp == 'closed' else 'open loop'}: {FLAG_ADVICE[kind, lp]}"
                       for lp in loops)
    if quick and kind in SHORT_RUN_KINDS:
        advice += "; --quick runs are short, so try without it first"
    return f"{FLAG_CAUSES[kind]}. {advice[0].upper()}{advice[1:]}"


def run_flags(runs: pd.DataFrame) -> list[dict]:
    """Flags of one system's runs, each with the load points it hit and a hint that fits them."""
    checks = {
        "no_steps": runs["steps"].fillna(0) == 0,
        # no request arrived in the window, or none of those that did finished by the drain cap
        "no_finished": (runs["steps"].fillna(0) > 0) & ((runs["requests"].fillna(0) == 0)
                                                        | (runs["unfinished"].fillna(0) >= runs["requests"].fillna(0))),
        "saturated": runs["saturated"].fillna(False).astype(bool),
    }
    checks["overloaded"] = overload_mask(runs) & ~checks["no_finished"]  # none finished says it already
    if "beyond_table" in runs.columns:
        checks["beyond_table"] = runs["beyond_table"].fillna(0) > 0.01
    quick = bool(runs["quick"].any()) if "quick" in runs.columns else False
    flags = []
    for kind, hit in checks.items():
        if hit.any():
            points = list(dict.fromkeys(runs.loc[hit, "load_point"]))
            flags.append({"kind": kind, "load_points": points, "hint": flag_hint(kind, points, quick)})
    return flags


def overload_mask(runs: pd.DataFrame) -> pd.Series:
    """``overloaded`` per run: the column where runs.csv has it, else from requests and unfinished (runs stored
    before it existed)."""
    if "overloaded" in runs.columns and runs["overloaded"].notna().all():
        return runs["overloaded"].astype(bool)
    return pd.Series([overloaded(int(r), int(u)) for r, u in zip(runs["requests"].fillna(0),
                                                                runs["unfinished"].fillna(0), strict=True)],
                     index=runs.index, dtype=bool)


def flag_lines(summary: dict) -> list[str]:
    """One line per cause, for the terminal and the report: the load points it hit, each with the systems hit
    there ("every system" when all were), then the cause and the advice that fits those points."""
    systems = list(summary["systems"])
    hits: dict[str, dict[str, list[str]]] = {}  # kind -> point -> systems
    for system, e in summary["systems"].items():
        for f in e.get("flags", []):
            for point in f["load_points"]:
                hits.setdefault(f["kind"], {}).setdefault(point, []).append(system)
    lines = []
    for kind in FLAG_CAUSES:
        if kind not in hits:
            continue
        by_point = dict(sorted(hits[kind].items(), key=lambda kv: _point_order(kv[0])))
        # points hit by the same systems share one list of names
        groups: dict[tuple[str, ...], list[str]] = {}
        for point, names in by_point.items():
            groups.setdefault(tuple(names), []).append(point)
        where = "; ".join(f"{', '.join(points)} ({'every system' if len(names) == len(systems) > 1 else ', '.join(names)})"
                          for names, points in groups.items())
        lines.append(f"! {FLAG_LABELS[kind]} at {where}: {flag_hint(kind, list(by_point), bool(summary.get('quick')))}")
    return lines


def matched_gain_column(baseline: str | None) -> str:
    """The headline's column of the median TPS gain at matched throughput."""
    return f"TPS gain vs {baseline} at matched throughput (median)"


def matched_gain_range(g: dict) -> str:
    """What a matched-throughput median summarises: the gain's range and the throughput it is read over."""
    span = [math.nan if g.get(k) is None else g[k] for k in ("from", "to")]
    over = (f" over {span[0]:,.0f}-{span[1]:,.0f} tok/s/GPU, the throughput both frontiers cover"
            if not any(math.isnan(x) for x in span) else "")
    return f"from {g['min']:+.0%} to {g['max']:+.0%}{over}"


def matched_gain_tips(summary: dict) -> list[str | None]:
    """Per headline row, the range behind its matched-throughput median (None where it has none)."""
    out = []
    for e in summary["systems"].values():
        g = e.get("tps_gain_at_matched_throughput")
        ok = g and g["min"] is not None and not math.isnan(g["min"])
        out.append(matched_gain_range(g) if ok else None)
    return out


def headline_table(summary: dict) -> pd.DataFrame:
    """One row per system: the open-loop operating point, then throughput and gain at each SLA anchor."""
    rows = []
    sla = summary["sla_anchors"][0] if summary.get("sla_anchors") else None
    base = summary.get("baseline")
    for system, e in summary["systems"].items():
        row = {"system": system + (" !" if e.get("flags") else "")}
        ol = e.get("open_loop")
        if ol:
            row.update({"tok/s/GPU": ol["throughput_per_gpu"], "TPS p10 (tok/s/user)": ol["tps_per_user_p10"],
                        "TPS p50 (tok/s/user)": ol["tps_per_user_p50"], "TTFT p99 (s)": ol["ttft_p99"],
                        f"SLA (share >={sla:g} tok/s/user)": ol["sla_attainment"]})
        for a, v in e.get("anchors", {}).items():
            row[f"@{a} tok/s/user: tok/s/GPU"] = (f">={v['at_least']:,.0f}" if v.get("status") == "above"
                                                  else v["throughput_per_gpu"])
            if "gain_vs_baseline" in v:
                row[f"@{a} gain vs {base}"] = v["gain_vs_baseline"]
        g = e.get("tps_gain_at_matched_throughput")
        if g and g["min"] is not None and not math.isnan(g["min"]):
            # one number to read, the range it summarises in matched_gain_tips (the report's tooltip)
            row[matched_gain_column(base)] = g["median"] if g.get("median") is not None else f"{g['min']:+.0%}..{g['max']:+.0%}"
        rows.append(row)
    return pd.DataFrame(rows)


def format_headline(df: pd.DataFrame) -> pd.DataFrame:
    def fmt(col: str, v):
        if isinstance(v, str):
            return v
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        if " gain vs " in col:
            return f"{v:+.0%}"
        if col.startswith("SLA"):
            return f"{v:.0%}"
        if "TTFT" in col:
            return f"{v:.3f}"
        return f"{v:,.0f}"

    return pd.DataFrame({c: [fmt(c, v) for v in df[c]] if c != "system" else df[c] for c in df.columns})


def headroom_text(lo: float | None, hi: float | None, tolerance: float) -> str:
    """A plan's headroom as the interval its verdict's tie rule reads (``verdicts.tied_at_best``): the most traffic
    seen to meet .. the least seen to fail clearly, minus one ("+24..+100%"); where nothing above failed
    clearly, the search's precision above the bound; "< -50%" where even the least traffic tried failed; one
    figure where both ends round alike."""
    def missing(v) -> bool:
        return v is None or (isinstance(v, float) and math.isnan(v))

    if missing(lo):
        return "-" if missing(hi) else f"< {hi:+.0%}"
    top = hi if not missing(hi) else (1 + lo) * (1 + tolerance) - 1
    a, b = f"{lo:+.0%}", f"{top:+.0%}"
    return a if a == b else f"{a[:-1]}..{b}"


# the tie rule of plan verdicts, in words, beside every headroom shown
HEADROOM_RULE = ("headroom: the traffic beyond the scenario's that the chosen size sustains, from the most seen to "
                 "meet to the least seen to fail clearly (none failing clearly: the search's precision); at equal "
                 "GPUs, systems whose interval reaches the best lower bound tie, the others have less headroom")


TERMINAL_WIDTH = 120


def fold(line: str) -> list[str]:
    """A terminal line folded at ``TERMINAL_WIDTH``, later lines indented; a word (a path) is never split."""
    return textwrap.wrap(line, TERMINAL_WIDTH, subsequent_indent="  ", break_long_words=False,
                         break_on_hyphens=False)


def fit_width(df: pd.DataFrame, width: int = TERMINAL_WIDTH) -> tuple[str, list[str]]:
    """``df`` as text at most ``width`` columns wide: columns are dropped from the right (never the first)
    until it fits. Returns the text and the dropped columns' names (the report has them)."""
    dropped: list[str] = []
    while True:
        text = df.to_string(index=False)
        if max(len(line) for line in text.splitlines()) <= width or df.shape[1] <= 1:
            return text, dropped
        dropped.insert(0, df.columns[-1])
        df = df.iloc[:, :-1]


def terminal_headline(summary: dict, width: int = TERMINAL_WIDTH) -> str:
    """The headline table for a terminal: short headers (their units in a legend line), at most ``width``
    columns wide; what does not fit is named and left to the report."""
    df = format_headline(headline_table(summary))
    base = summary.get("baseline")

    def short(col: str) -> str:
        if col.startswith("TPS p"):
            return col.split(" (")[0]
        if col.startswith("TTFT"):
            return "TTFT p99 s"
        if col.startswith("SLA"):
            return "SLA>=" + col.split(">=")[1].split(" ")[0]
        if col.startswith("@") and col.endswith("tok/s/GPU"):
            return col.split(" ")[0] + " tok/s/GPU"
        if col.startswith("@") and " gain vs " in col:
            return col.split(" ")[0] + " gain"
        if col == matched_gain_column(base):
            return "matched gain"
        return col

    text, dropped = fit_width(df.rename(columns=short), width)
    matched = "the median TPS gain at matched throughput"
    legend = ("TPS: tok/s/user; @X: where the frontier crosses X tok/s/user; SLA>=X: share of requests at X or "
              f"more; gains vs {base}")
    if "matched gain" in text.splitlines()[0]:
        legend += f"; matched gain: {matched} (its range in summary.json and the report)"
    if dropped:
        legend += f"; in the report: {', '.join(matched if d == 'matched gain' else d for d in dropped)}"
    import textwrap

    return text + "\n" + textwrap.fill(legend, width, break_on_hyphens=False)


def write_outputs(out: Path, scn: LoadedScenario, runs: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    table = frontier_table(runs)
    atomic_write(out / "frontier.csv", lambda p: table.to_csv(p, index=False, float_format="%.6g"))
    summary = build_summary(scn, runs)
    atomic_write_text(out / "summary.json", json.dumps(plain(summary), indent=2, allow_nan=False) + "\n")
    return summary, table


def write_table_and_json(out: Path, stem: str, table: pd.DataFrame, doc: dict) -> tuple[Path, Path]:
    """``STEM.csv`` (the table) and ``STEM.json`` (the whole document, JSON-ready) in ``out``, each written
    atomically (which makes ``out`` if need be): a plan's outputs."""
    csv, js = out / f"{stem}.csv", out / f"{stem}.json"
    atomic_write(csv, lambda p: table.to_csv(p, index=False, float_format="%.6g"))
    atomic_write_text(js, json.dumps(plain(doc), indent=2, allow_nan=False) + "\n")
    return csv, js


def plain(o):
    """JSON-ready: numpy scalars to Python, NaN and infinities to null (undefined, e.g. an anchor a system never
    reaches; JSON has no infinity, and a crash here would lose a whole sweep's summary)."""
    if isinstance(o, dict):
        return {k: plain(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [plain(v) for v in o]
    if isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o
