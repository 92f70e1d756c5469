"""The library's capacity plans, the search with early stops against the exhaustive one, in one run.

    python benchmarks/bench_plan.py [--plan peak|peak-x2|hardware]... [--quick] [--replicates 3] [--jobs 2]
        [--only new|exhaustive] [--json]

Plans (``simulate plan`` as the CLI runs it, on a fresh temporary run store each, so nothing is resumed):

- ``peak``: scenarios/peak.yaml (8 systems, prefill disaggregated, 38 requests/s);
- ``peak-x2``: the same at twice the traffic (``--set traffic.rate=76``);
- ``hardware``: peak.yaml's H200 table against its B200 twin at a 300 tok/s/user target
  (``--hardware h200=...h200...:3.50 --hardware b200=...b200...:5.50 --set sla.tps_targets=[300]``).

Each is planned twice, the exhaustive search first (``Planner(exhaustive=True)``: every candidate at every seed
in full, in rounds, as before early stops) and then the default one, back to back so that both see the same
machine. Printed per plan and mode: the runs executed, the simulated seconds they cover (a cost that does not
depend on the machine's load), the wall time, the CPU time of this process and its pool's workers, the
1-minute load average before and after, and each system's GPU count; then the ratios new / exhaustive, and
whether the two plans agree (the GPU counts, the ranges, the verdict).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.inputs.config import load_scenario  # noqa: E402
from simulator.runs.backends import Backend  # noqa: E402
from simulator.runs.hardware_choice import check_options, parse_options, plan_hardware  # noqa: E402
from simulator.runs.plan import Planner, Target  # noqa: E402

HARDWARE = ROOT / "scenarios" / "hardware"
PLANS = {
    "peak": ((), None),
    "peak-x2": (("traffic.rate=76",), None),
    "hardware": (("sla.tps_targets=[300]",),
                 [f"h200={HARDWARE / 'h200-qwen3-8b-bf16-vllm.csv'}:3.50",
                  f"b200={HARDWARE / 'b200-qwen3-8b-bf16-vllm.csv'}:5.50"]),
}


def cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (the local pool's workers)."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def simulated_seconds(store: Path) -> float:
    """Simulated seconds of every run in a store: a run's window and drain, or up to where it stopped."""
    total = 0.0
    for path in store.glob("*.json"):
        row = json.loads(path.read_text())
        stopped = row.get("stopped")
        total += stopped["at_s"] if stopped else row["sim_seconds"] + row["drain_seconds"]
    return total


def gpus(doc: dict) -> dict[str, str]:
    """Per system (per hardware option and system for a comparison) its GPUs, as a range where unresolved."""
    if "pairs" in doc:
        return {f"{p['hardware']}/{p['system']}": f"{p['gpus']} {p['status']}" for p in doc["pairs"]}
    return {k: (f"{e['gpus_lo']}-{e['gpus']}" if e["gpus_lo"] < e["gpus"] else f"{e['gpus']}") + f" {e['status']}"
            for k, e in doc["systems"].items()}


def plan_once(name: str, exhaustive: bool, args: argparse.Namespace, out: Path) -> dict:
    sets, hardware = PLANS[name]
    scn = load_scenario(ROOT / "scenarios" / "peak.yaml", sets)
    target = Target(tps=scn.model.sla.tps_targets[0])
    backend = Backend("local", args.jobs)
    load0, cpu0, t0 = os.getloadavg()[0], cpu_seconds(), time.perf_counter()
    if hardware:
        choices, _ = check_options(scn, parse_options(hardware))
        doc = plan_hardware(scn, out, target, backend, choices, args.quick, None, args.replicates,
                            exhaustive=exhaustive)
        runs = doc["runs_executed"]
    else:
        planner = Planner(scn, out, target, backend, args.quick, None, replicates=args.replicates,
                          exhaustive=exhaustive)
        doc = planner.run()
        runs = planner.runs
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    return {"plan": name, "mode": "exhaustive" if exhaustive else "new", "runs": runs,
            "simulated_s": round(simulated_seconds(out / ".runs"), 1), "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "load_average_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
            "gpus": gpus(doc), "verdict": doc["verdict"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plan", action="append", choices=sorted(PLANS), help="which plan (repeatable) [default: peak]")
    ap.add_argument("--quick", action="store_true", help="the scenario's quick runs (8 s) instead of full ones")
    ap.add_argument("--replicates", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", choices=["new", "exhaustive"], help="plan with one search only (no ratios)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    modes = [m == "exhaustive" for m in ([args.only] if args.only else ["exhaustive", "new"])]
    results = []
    for name in args.plan or ["peak"]:
        for exhaustive in modes:
            with tempfile.TemporaryDirectory() as tmp:
                r = plan_once(name, exhaustive, args, Path(tmp))
            results.append(r)
            if not args.json:
                print(f"{name} ({r['mode']}): {r['runs']} runs, {r['simulated_s']:.0f} simulated s, {r['wall_s']:.0f} s "
                      f"wall, {r['cpu_s']:.0f} CPU-s (load {r['load_average_1min'][0]:.1f} -> "
                      f"{r['load_average_1min'][1]:.1f}); GPUs: "
                      + ", ".join(f"{k} {v}" for k, v in r["gpus"].items()), flush=True)
        pair = {r["mode"]: r for r in results if r["plan"] == name}
        if len(pair) == 2 and not args.json:
            old, new = pair["exhaustive"], pair["new"]
            ratio = {k: new[k] / old[k] if old[k] else float("nan") for k in ("runs", "simulated_s", "wall_s", "cpu_s")}
            print(f"{name}: new / exhaustive: runs {ratio['runs']:.2f}, simulated s {ratio['simulated_s']:.2f}, "
                  f"wall {ratio['wall_s']:.2f}, CPU {ratio['cpu_s']:.2f}; GPU counts "
                  f"{'the same' if old['gpus'] == new['gpus'] else 'DIFFER'}, verdict "
                  f"{'the same' if old['verdict'] == new['verdict'] else 'DIFFERS'}", flush=True)
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
