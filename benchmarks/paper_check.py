"""Predicted against published: the paper-v4 scenarios' results beside the DSpark paper's production figures.

    python benchmarks/paper_check.py results/paper-v4-flash results/paper-v4-pro [--out docs/paper-v4-table.md]

Reads each result directory's frontier.csv and summary.json (written by ``simulate``) and the MTP-1 telemetry the
scenarios were calibrated on (scenarios/reference/paper_fig7_fig8_mtp1.csv), and prints markdown tables:

1. the calibration check: simulated MTP-1 throughput per GPU at each swept concurrency against the Figure 8 line
   it was fitted to, and against Figure 7 (throughput at the same per-user speed);
2. the prediction: DSpark's throughput per GPU, per-user speed and mean verification budget against concurrency;
3. the gains at the SLA anchors and the per-user speed-up at matched throughput, beside the paper's stated ones;
   and, since the paper reads its gains off Figure 7, the predicted DSpark throughput at each anchor over Figure 7's
   MTP-1 line there (baseline telemetry, like the calibration data).

The paper's stated gains (section 5.4 and Figure 7) are constants here; nothing in the scenarios reads them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from atomic_files import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "scenarios" / "reference" / "paper_fig7_fig8_mtp1.csv"
# DSpark paper, section 5.4 and Figure 7: throughput gains of DSpark over MTP-1 at the SLA anchors, and the
# per-user speed-up at matched throughput
PUBLISHED = {
    "paper-v4-flash": {"model": "v4-flash", "anchors": {80: 0.51, 120: 6.61}, "matched_tps": (0.60, 0.85)},
    "paper-v4-pro": {"model": "v4-pro", "anchors": {35: 0.52, 50: 4.06}, "matched_tps": (0.57, 0.78)},
}
PREDICTED = ("dspark-async", "dspark")  # the paper's production scheduler first


def _line(ref: pd.DataFrame, figure: str, model: str) -> tuple[np.ndarray, np.ndarray]:
    sel = ref[(ref["figure"] == figure) & (ref["model"] == model) & (ref["system"] == "mtp-1")]
    order = np.argsort(sel["x"].to_numpy(float))
    return sel["x"].to_numpy(float)[order], sel["y"].to_numpy(float)[order]


def _interp(x: np.ndarray, y: np.ndarray, q: float, slack: float = 0.02) -> float:
    """y at q along a digitised line, never extrapolated beyond its ends (but for the digitising slack)."""
    lo, hi = x[0] - slack * abs(x[0]), x[-1] + slack * abs(x[-1])
    return float(np.interp(q, x, y)) if lo <= q <= hi else float("nan")


def _pct(v: float) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v * 100:+.0f}%"


def _num(v: float, fmt: str = ",.0f") -> str:
    return "-" if v is None or not np.isfinite(v) else format(v, fmt)


def calibration_rows(frontier: pd.DataFrame, ref: pd.DataFrame, model: str) -> list[str]:
    x8, y8 = _line(ref, "fig8", model)
    x7, y7 = _line(ref, "fig7", model)
    mtp = frontier[frontier["policy"] == "mtp-1"].sort_values("concurrency")
    by_y = np.argsort(y7)  # Figure 7 read the other way: speed at a throughput
    out = ["| requests/GPU | MTP-1 simulated tok/s/GPU | Figure 8 | error | simulated tok/s/user | Figure 7 tok/s/user "
           "at that throughput | error |", "|---|---|---|---|---|---|---|"]
    for row in mtp.itertuples():
        f8 = _interp(x8, y8, row.concurrency)
        f7 = _interp(y7[by_y], x7[by_y], row.throughput_per_gpu)
        out.append(f"| {row.concurrency:g} | {_num(row.throughput_per_gpu)} | {_num(f8)} | "
                   f"{_pct(row.throughput_per_gpu / f8 - 1)} | {_num(row.tps_per_user, '.1f')} | "
                   f"{_num(f7, '.1f')} | {_pct(row.tps_per_user / f7 - 1)} |")
    return out


def prediction_rows(frontier: pd.DataFrame) -> list[str]:
    systems = [s for s in ("mtp-1", *PREDICTED) if s in set(frontier["policy"])]
    head = "| requests/GPU | " + " | ".join(f"{s} tok/s/GPU | {s} tok/s/user | {s} budget" for s in systems) + " |"
    out = [head, "|" + "---|" * (1 + 3 * len(systems))]
    for c in sorted(frontier["concurrency"].unique()):
        cells = []
        for s in systems:
            r = frontier[(frontier["policy"] == s) & (frontier["concurrency"] == c)]
            if r.empty:
                cells += ["-", "-", "-"]
                continue
            r = r.iloc[0]
            cells += [_num(r["throughput_per_gpu"]), _num(r["tps_per_user"], ".1f"),
                      _num(r["mean_verify_budget"], ".2f")]
        out.append(f"| {c:g} | " + " | ".join(cells) + " |")
    return out


def _anchor(anchors: dict, a: float) -> dict:
    return anchors.get(f"{a:g}") or anchors.get(str(int(a))) or anchors.get(str(float(a))) or {}


def gain_rows(summary: dict, published: dict, ref: pd.DataFrame) -> list[str]:
    out = ["| | " + " | ".join(f"gain @{a:g} tok/s/user" for a in published["anchors"]) +
           " | TPS gain at matched throughput |", "|---|" + "---|" * (len(published["anchors"]) + 1)]
    pub = " | ".join(_pct(g) for g in published["anchors"].values())
    lo, hi = published["matched_tps"]
    out.append(f"| paper (measured in production) | {pub} | {_pct(lo)}..{_pct(hi)} |")
    systems = summary.get("systems", {})
    for s in PREDICTED:
        if s not in systems:
            continue
        anchors = systems[s].get("anchors", {})
        cells = []
        for a in published["anchors"]:
            entry = _anchor(anchors, a)
            gain = entry.get("gain_vs_baseline")
            cells.append(_pct(gain) if gain is not None else entry.get("status", "-"))
        matched = systems[s].get("tps_gain_at_matched_throughput") or {}
        m = f"{_pct(matched.get('min'))}..{_pct(matched.get('max'))}" if matched else "-"
        out.append(f"| predicted: {s} | " + " | ".join(cells) + f" | {m} |")
    base = systems.get(summary.get("baseline", "mtp-1"), {}).get("anchors", {})
    mtp = " | ".join(_num(_anchor(base, a).get("throughput_per_gpu")) for a in published["anchors"])
    out.append(f"| simulated MTP-1 tok/s/GPU at the anchor | {mtp} | |")
    # the paper reads its gains off Figure 7, whose MTP-1 line is baseline telemetry (not DSpark's)
    x7, y7 = _line(ref, "fig7", published["model"])
    fig7 = {a: _interp(x7, y7, a) for a in published["anchors"]}
    out.append("| Figure 7's MTP-1 tok/s/GPU at the anchor | " + " | ".join(_num(v) for v in fig7.values()) + " | |")
    for s in PREDICTED:
        if s not in systems:
            continue
        cells = []
        for a, base7 in fig7.items():
            thr = _anchor(systems[s].get("anchors", {}), a).get("throughput_per_gpu")
            cells.append(_pct(thr / base7 - 1) if thr is not None and np.isfinite(base7) else "-")
        out.append(f"| predicted {s} against Figure 7's MTP-1 | " + " | ".join(cells) + " | |")
    return out


def report(result_dirs: list[Path], reference: Path = REFERENCE) -> str:
    ref = pd.read_csv(reference)
    lines = []
    for d in result_dirs:
        summary = json.loads((d / "summary.json").read_text())
        name = summary.get("scenario", d.name)
        if name not in PUBLISHED:
            raise SystemExit(f"paper_check: {d}/summary.json: scenario {name!r} is not one of "
                             f"{', '.join(PUBLISHED)}")
        pub = PUBLISHED[name]
        frontier = pd.read_csv(d / "frontier.csv")
        lines += [f"### {name}", "", "Gains over MTP-1 (the paper's against this scenario's prediction):", "",
                  *gain_rows(summary, pub, ref), "", "Prediction against concurrency (closed loop, per GPU):", "",
                  *prediction_rows(frontier), "", "Calibration check (MTP-1, the only curve the tables were "
                  "fitted to):", "", *calibration_rows(frontier, ref, pub["model"]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="result directories of the paper-v4 scenarios")
    ap.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    args = ap.parse_args(argv)
    for d in args.results:
        for f in ("summary.json", "frontier.csv"):
            if not (d / f).is_file():
                print(f"paper_check: {d / f}: not found (run `simulate` on the scenario first)", file=sys.stderr)
                return 2
    text = report(args.results)
    print(text)
    if args.out:
        atomic_write_text(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
