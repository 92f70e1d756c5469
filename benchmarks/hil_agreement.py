"""Observe -> replay -> calibrate on one scenario: run it under ``source: live``, under its own recorded trace
(``source: trace``) and under the profile fitted to that trace (``source: profile``), and print tau per domain and
throughput per GPU side by side (markdown), with the largest relative gap.

    ./run python benchmarks/hil_agreement.py [--scenario scenarios/hil-tiny.yaml] [--systems static-3,dspark]
                                             [--users 64] [--seconds 10] [--out results/hil-agreement]

Every run uses the scenario's table clock, so the three differ only in where acceptance comes from.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    from simulator.core.acceptance.trace_fit import fit_profile_file
    from simulator.inputs.config import load_scenario
    from simulator.inputs.systems import resolve_systems
    from simulator.runs.run import LoadPoint, RunSpec, run_one

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "hil-tiny.yaml"))
    ap.add_argument("--systems", default="static-3,dspark")
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--out", default="results/hil-agreement")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    a = ap.parse_args()
    out = Path(a.out)
    base = [f"run.duration_s={a.seconds}", f"run.warmup_s={a.seconds / 10}", "hardware.clock=table", *a.sets]
    live = load_scenario(a.scenario, base)
    mix = list(live.model.workload.mix)
    rows = []
    for name in a.systems.split(","):
        system = next(s for s in resolve_systems(live) if s.name == name)
        spec = RunSpec(system, LoadPoint(a.users), live.model.seed, False)
        rec = out / "records" / name
        live_row, _ = run_one(live, spec, rec)
        trace = next(rec.glob("*.trace.csv"))
        profile = out / f"{name}-fitted.yaml"
        fit_profile_file(trace, profile)
        for label, sets in (("live", []), ("trace", [f"acceptance={{source: trace, trace: {trace.resolve()}}}"]),
                            ("profile", [f"acceptance={{source: profile, profile: {profile.resolve()}}}"])):
            row = live_row if label == "live" else run_one(load_scenario(a.scenario, [*base, *sets]), spec)[0]
            rows.append({"system": name, "source": label, **{f"tau {k}": row["tau_by_mix"][k] for k in mix},
                         "throughput/GPU": row["throughput_per_gpu"]})
    df = pd.DataFrame(rows)
    metrics = [c for c in df.columns if c not in ("system", "source")]
    gaps = []
    for _, g in df.groupby("system", sort=False):
        ref = g[g.source == "live"][metrics].iloc[0]
        for _, r in g[g.source != "live"].iterrows():
            gaps.append(((r[metrics] - ref) / ref).abs().max())
    print("| " + " | ".join(df.columns) + " |")
    print("|" + "---|" * len(df.columns))
    for _, r in df.iterrows():
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r) + " |")
    print(f"\nlargest relative gap to live: {100 * max(gaps):.1f}%")


if __name__ == "__main__":
    main()
