"""How the engine's wall time grows with batch size R, replicas and simulated duration, measured in one run.

    python benchmarks/bench_scaling.py [--json] [--seconds 10]

Each sweep varies one thing from a base of one replica, R = 64 concurrent users (max_running = R), the dspark
system (gamma 7, paper-qwen3-8b profile, math/code/chat mix), prompts of 512 and outputs of 256 tokens on the H200
table with prefill disaggregated (so every step is a decode step at R), ``--seconds`` simulated; each point is
the fastest of three runs:

- R in 64, 256, 1024 (one replica, R users, simulated for ``--seconds`` x R / 64 so that every point runs about
  as many steps: a bigger batch's steps are longer): wall per step grows with R far less than R itself, and
  ``us_per_token`` falls (the batch work is compiled or numpy, the per-step cost is fixed);
- replicas in 1, 8, 64 (64 users each): ``wall_per_replica`` should stay flat (linear growth);
- simulated duration x1, x2, x4: ``wall_per_sim_second`` should stay flat.

Every figure is relative to the sweep's first point (``*_vs_first``), so the ratios hold on a shared machine.
A short first run pays the one-time costs (loading the compiled kernels) before anything is timed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.inputs.config import load_scenario  # noqa: E402
from simulator.inputs.systems import resolve_systems  # noqa: E402
from simulator.runs.run import LoadPoint, RunSpec, build  # noqa: E402


def scenario(users: int, replicas: int, seconds: float) -> dict:
    return {
        "name": "bench-scaling",
        "hardware": {"table": str(ROOT / "scenarios/hardware/h200-qwen3-8b-bf16.csv"), "replicas": replicas},
        # the cache holds the whole batch (no preemption), so R is the batch size at every step
        "engine": {"max_running": max(users // replicas, 1), "max_batch_tokens": 8192, "prefill": "disaggregated",
                   "kv_capacity_tokens": 1024 * 800},
        "acceptance": {"source": "profile", "profile": "paper-qwen3-8b"},
        "drafter": {"name": "dspark", "gamma": 7},
        "systems": ["dspark"],
        "workload": {"mix": {"math": 1, "code": 1, "chat": 1}, "prompt": 512, "output": 256},
        "frontier": {"concurrency": [users]},
        "run": {"duration_s": seconds, "warmup_s": 0.0},
    }


def timed(users: int, replicas: int, seconds: float, repeats: int = 3) -> dict:
    """The fastest of ``repeats`` identical runs (a shared machine only ever adds time)."""
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scaling.yaml"
        path.write_text(yaml.safe_dump(scenario(users, replicas, seconds)))
        scn = load_scenario(path)
        for _ in range(repeats):
            sim, *_ = build(scn, RunSpec(resolve_systems(scn)[0], LoadPoint(users), 0, False))
            t0 = time.perf_counter()
            sim.run(until=seconds)
            walls.append(time.perf_counter() - t0)
    wall = min(walls)
    return {"users": users, "replicas": replicas, "sim_seconds": seconds, "steps": sim.steps.n,
            "tokens": int(sim.steps.frame()["emitted"].sum()), "wall_s": wall}


def sweep(points: list[dict], per: str) -> list[dict]:
    first = points[0]["wall_s"] / points[0][per]
    for p in points:
        p[f"wall_per_{per}_vs_first"] = (p["wall_s"] / p[per]) / first
        p["us_per_token"] = p["wall_s"] / max(p["tokens"], 1) * 1e6
    return points


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--seconds", type=float, default=10.0, help="simulated seconds of the base point")
    args = ap.parse_args()
    s = args.seconds
    t0 = time.perf_counter()
    timed(64, 1, 1.0)
    out = {"first_run_s": time.perf_counter() - t0}
    out["batch"] = sweep([timed(r, 1, s * r / 64) for r in (64, 256, 1024)], "steps")
    out["replicas"] = sweep([timed(64 * n, n, s) for n in (1, 8, 64)], "replicas")
    out["duration"] = sweep([timed(64, 1, s * k) for k in (1, 2, 4)], "sim_seconds")
    if args.json:
        print(json.dumps(out, default=lambda v: round(v, 4)))
        return 0
    print(f"first run (one-time costs): {out['first_run_s']:.2f} s")
    for name, per in (("batch", "steps"), ("replicas", "replicas"), ("duration", "sim_seconds")):
        print(f"\n{name}: wall time per {per}, relative to the first point (flat = linear growth)")
        for p in out[name]:
            print(f"  R {p['users'] // p['replicas']:5d} replicas {p['replicas']:3d} sim {p['sim_seconds']:5.1f} s  steps {p['steps']:6d}  "
                  f"wall {p['wall_s']:7.2f} s  per {per} x{p[f'wall_per_{per}_vs_first']:.2f}  "
                  f"{p['us_per_token']:.2f} us/token")
    return 0


if __name__ == "__main__":
    sys.exit(main())
