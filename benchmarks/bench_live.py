"""Hardware in the loop, measured: what batching buys a live step, and what the simulator costs around it.

    ./run python benchmarks/bench_live.py [--requests 32] [--steps 20] [--runtime tiny|smoke|DIR] [--device cpu]

1. A live step (one drafting forward + one verification forward) for R requests at once, against R one-request
   steps doing the same work (the same slots, drafts and verification lengths), on the real runtime: the ratio is
   what batching across a replica's requests buys.
2. One live run of scenarios/hil-tiny.yaml's dspark system (one load point, table clock): the share of its wall
   time spent in the model forwards, in the live source's own bookkeeping around them, and in the simulator
   (engine, policy, metrics) -- the part hardware in the loop adds to a real serving step.

Both from one run; ratios printed, nothing hard-coded.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def batched_vs_single(runtime: str, device: str, requests: int, steps: int) -> dict:
    from dspark_runtime.live.session import LiveBatch
    from dspark_runtime.live.timing import StepTimer
    from dspark_runtime.live.world import load_world, resolve_world
    from dspark_runtime.target import TargetRunner

    paths = resolve_world(runtime, "dspark", "--runtime")
    world = load_world(str(paths.root), "dspark", device, "float32")
    prompts = [t for pool in world.prompts.values() for _, t in pool][:requests]
    prompts = (prompts * (requests // max(len(prompts), 1) + 1))[:requests]
    capacity = max(len(p) for p in prompts) + 2 * steps * (world.drafter.gamma + 1) + 8
    gen = torch.Generator(device=device).manual_seed(0)

    def fresh() -> tuple[LiveBatch, torch.Tensor]:
        batch = LiveBatch(TargetRunner(world.target, world.layer_ids), world.drafter, slots=requests,
                          capacity=capacity, temperature=1.0, eos_id=None, generator=gen,
                          timer=StepTimer(torch.device(device)))
        slots = torch.arange(requests, device=device)
        batch.load(slots, prompts)
        batch.prefill(slots)
        return batch, slots

    lengths = torch.full((requests,), 3, dtype=torch.long)
    batch, slots = fresh()
    t0 = time.perf_counter()
    for _ in range(steps):
        batch.verify(slots, batch.draft(slots), lengths, full=False)
    batched = (time.perf_counter() - t0) / steps
    batch, slots = fresh()
    one = lengths[:1]
    t0 = time.perf_counter()
    for _ in range(steps):
        for r in range(requests):  # the per-request loop batching removes
            s = slots[r : r + 1]
            batch.verify(s, batch.draft(s), one, full=False)
    single = (time.perf_counter() - t0) / steps
    return {"requests": requests, "batched_ms": 1e3 * batched, "single_ms": 1e3 * single, "world": str(paths.root)}


def simulator_share(requests: int, seconds: float, runtime: str, device: str) -> dict:
    from dspark_runtime.live.source import LiveSource
    from simulator.inputs.config import load_scenario
    from simulator.inputs.systems import resolve_systems
    from simulator.runs.run import LoadPoint, RunSpec, build

    spent = {"source": 0.0, "forwards_ms": 0.0}
    propose, verify, prefilled = LiveSource.propose, LiveSource.verify, LiveSource.prefilled

    def timed(call, claims_forwards: bool = False):
        """The source's call, its wall time added to spent["source"] (verify also claims the step's forwards)."""
        def wrapper(self, *args):
            t0 = time.perf_counter()
            try:
                return call(self, *args)
            finally:
                spent["source"] += time.perf_counter() - t0
                if claims_forwards:
                    spent["forwards_ms"] += self.step_ms()
        return wrapper

    timed_propose, timed_verify, timed_prefilled = timed(propose), timed(verify, True), timed(prefilled)

    LiveSource.propose, LiveSource.verify, LiveSource.prefilled = timed_propose, timed_verify, timed_prefilled
    try:
        scn = load_scenario(ROOT / "scenarios" / "hil-tiny.yaml", [f"run.duration_s={seconds}", f"run.warmup_s={seconds / 5}",
                                                                   f"acceptance.runtime={runtime}",
                                                                   f"acceptance.device={device}"])
        system = next(s for s in resolve_systems(scn) if s.name == "dspark")
        sim, _, duration, _ = build(scn, RunSpec(system, LoadPoint(requests), 0, False))
        t0 = time.perf_counter()
        sim.run(until=duration)
        wall = time.perf_counter() - t0
    finally:
        LiveSource.propose, LiveSource.verify, LiveSource.prefilled = propose, verify, prefilled
    forwards = spent["forwards_ms"] / 1e3
    return {"wall": wall, "forwards": forwards, "glue": spent["source"] - forwards,
            "simulator": wall - spent["source"], "steps": sim.steps.n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=0.5, help="simulated seconds of the live run")
    ap.add_argument("--runtime", default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    b = batched_vs_single(a.runtime, a.device, a.requests, a.steps)
    print(f"world {b['world']}, {a.device}, {a.threads} thread(s)")
    print(f"live step, {b['requests']} requests: batched {b['batched_ms']:.1f} ms, {b['requests']} one-request steps "
          f"{b['single_ms']:.1f} ms -> batching is {b['single_ms'] / b['batched_ms']:.1f}x faster")
    s = simulator_share(a.requests, a.seconds, a.runtime, a.device)
    print(f"live run ({s['steps']} steps, {s['wall']:.1f} s wall): forwards {100 * s['forwards'] / s['wall']:.1f}%, "
          f"live source bookkeeping {100 * s['glue'] / s['wall']:.1f}%, simulator {100 * s['simulator'] / s['wall']:.1f}% "
          f"({1e3 * s['simulator'] / max(s['steps'], 1):.2f} ms per step)")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
