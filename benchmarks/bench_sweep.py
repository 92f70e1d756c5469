"""A sweep's wall time on 1 and on 2 workers, measured in one run, as a ratio (the speed-up of parallel runs).

    python benchmarks/bench_sweep.py [--backend local|ray] [--address auto|HOST:PORT] [--workers 2] [--json]

The sweep: scenarios/peak.yaml with --quick (8 systems x 6 load points = 48 short runs), into fresh temporary
stores so that nothing is resumed. ``speedup`` = wall(1 worker) / wall(N workers); on N free cores it approaches N
when the runs are many and similar. With ``--backend ray`` both sweeps run as Ray tasks (a local Ray of that many
CPUs, or the cluster at ``--address``; then ``--workers`` only names the row) and Ray's start-up is counted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.inputs.config import load_scenario  # noqa: E402
from simulator.runs.backends import Backend  # noqa: E402
from simulator.runs.sweep import Sweep  # noqa: E402


def timed_sweep(scenario: Path, backend: Backend) -> tuple[float, int]:
    scn = load_scenario(scenario)
    with tempfile.TemporaryDirectory() as tmp:
        sweep = Sweep.plan(scn, Path(tmp), quick=True, seed=None, replicates=None)
        t0 = time.perf_counter()
        runs = sweep.execute(backend.jobs, None, backend)
        return time.perf_counter() - t0, runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "peak.yaml")
    ap.add_argument("--backend", choices=["local", "ray"], default="local")
    ap.add_argument("--address", help="--backend ray: an existing cluster")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    one, runs = timed_sweep(args.scenario, Backend(args.backend, 1, args.address))
    many, _ = timed_sweep(args.scenario, Backend(args.backend, args.workers, args.address))
    result = {"backend": args.backend, "runs": runs, "wall_s_1": round(one, 2), f"wall_s_{args.workers}": round(many, 2),
              "speedup": round(one / many, 3)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.scenario.name} --quick, {runs} runs on {args.backend}: 1 worker {one:.1f} s, "
              f"{args.workers} workers {many:.1f} s, speed-up x{one / many:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
