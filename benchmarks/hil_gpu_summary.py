"""The one-screen summary of ``benchmarks/hil_gpu.sh``: read what its steps left under OUT and print, from those
files only, live against profiled step times, the throttled steps, the measured H200 table's spread and what
each step took.

    python benchmarks/hil_gpu_summary.py OUT --h200 TABLE.csv [--dry-run]

Exits 1 with one line when a file a step should have left is missing or empty (the script then stops there).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd


class Missing(Exception):
    pass


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise Missing(f"{path} is missing")
    df = pd.read_csv(path)
    if df.empty:
        raise Missing(f"{path} has no rows")
    return df


def _spread(values: np.ndarray) -> str:
    return f"median {np.median(values):.3g} (p10 {np.percentile(values, 10):.3g}, p90 {np.percentile(values, 90):.3g})"


def live_lines(out: Path) -> list[str]:
    tables = sorted((out / "live" / "live-tables").glob("*__seed0.csv"))
    if not tables:
        raise Missing(f"{out / 'live' / 'live-tables'} holds no live table")
    meta = json.loads(tables[0].with_suffix(".json").read_text())
    tel = meta.get("telemetry", {})
    lines = [f"device: {tel.get('gpu_name', meta.get('device'))} | torch {meta.get('torch')} | "
             f"telemetry: {tel.get('telemetry')}",
             "live / profiled step time of the target (hw-profile compare at each live table's points):"]
    for table in tables:
        stem = table.stem
        side = json.loads(table.with_suffix(".json").read_text())
        ratio = _read(out / f"compare-{stem}.csv")["ratio"].to_numpy(dtype=float)
        steps, throttled = side.get("steps", {}), side.get("throttled_steps", {})
        lines.append(f"  {stem}: {len(ratio)} points, {_spread(ratio)}; steps {steps.get('target', '?')} "
                     f"target / {steps.get('drafter', '?')} drafter, throttled {throttled.get('target', '?')} / "
                     f"{throttled.get('drafter', '?')}")
    return lines


def h200_lines(table: Path) -> list[str]:
    df = _read(table)
    ok = df[df["status"] == "ok"]
    if ok.empty:
        raise Missing(f"{table} has no measured point")
    spread = (ok["step_ms_p90"] / ok["step_ms_p10"]).to_numpy(dtype=float)
    worst = ok.iloc[int(np.argmax(spread))]
    lines = [f"measured H200 table {table.name}: {len(ok)} points measured, {len(df) - len(ok)} skipped, "
             f"throttled {int(ok['throttled'].astype(bool).sum())}",
             f"  p90/p10 of the repeats per point: {_spread(spread)}, widest {spread.max():.3g} at "
             f"B={int(worst['batch_tokens'])} K={int(worst['kv_tokens'])}"]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--h200", type=Path, required=True, help="the measured H200 table")
    ap.add_argument("--ratio", type=Path, default=None, help="hw-profile compare's CSV of the H200 table vs roofline "
                    "(default: OUT/h200/h200-ratio.csv)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    try:
        head = ("hil_gpu summary -- DRY RUN on the CPU with stand-ins and tiny sizes: these numbers test the script, "
                "not a GPU" if a.dry_run else "hil_gpu summary")
        lines = [head, *live_lines(a.out)]
        lines += h200_lines(a.h200)
        ratio = _read(a.ratio or a.out / "h200" / "h200-ratio.csv")["ratio"].to_numpy(dtype=float)
        lines.append(f"  measured / roofline step time: {_spread(ratio)} over {len(ratio)} points")
        bench = a.out / "logs" / "step7.log"
        if bench.is_file():
            lines += ["bench_live: " + ln.strip() for ln in bench.read_text().splitlines()
                      if ln.startswith(("live step", "live run"))]
        steps = a.out / "logs" / "steps.tsv"
        if steps.is_file():
            rows = [ln.split("\t") for ln in steps.read_text().splitlines() if ln.strip()]
            lines.append("steps: " + " | ".join(f"{r[0]} {r[1]} {r[2]} s" for r in rows if r[1] != "summary") +
                         f" | total {sum(int(r[2]) for r in rows)} s")
    except (Missing, KeyError) as exc:
        print(f"hil_gpu_summary: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
