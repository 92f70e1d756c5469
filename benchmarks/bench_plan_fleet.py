"""A fleet plan's wall time and its full-size confirmation's agreement with the probe, for traffic that needs
about 1,000 GPUs.

    python benchmarks/bench_plan_fleet.py [--rate-scale 200] [--probe-replicas 4] [--systems mtp-1,dspark]
        [--replicates 3] [--jobs 2] [--full] [--backend local|ray [--address ...]] [--out DIR] [--json]

The traffic: scenarios/peak.yaml (Poisson, 38 requests/s, H200 vLLM estimate table, Qwen3-8B shape, prefill
disaggregated) with the rate multiplied by ``--rate-scale`` (200: 7,600 requests/s). The plan is
``simulate plan --probe-replicas R`` (simulator/runs/fleet.py) at ``--replicates`` seeds over the named systems:
per system a probe of R decode replicas finds its capacity per replica, a probe of R prefill replicas the prefill
pool's, the counts for the whole traffic are derived from them, and one full-size run per system (the real
traffic on the derived decode and prefill replicas, seed 0) confirms them. Runs are the quick ones (8 simulated
seconds, 2 of warm-up) unless ``--full``; a fresh temporary run store unless ``--out``, so nothing is resumed.

Printed: the whole plan's wall time and CPU time (this process and the local pool's workers: on a machine shared
with other work the wall time stretches, the CPU time much less), and per system the probed capacity per replica, the GPUs derived (prefill +
decode), the attainment the probe predicts at the full size's load per replica (95% interval over the seeds), the
full-size run's attainment, whether it lies within that interval (widened by one request of a probe run) and
whether its SLA verdict agrees, and that run's own wall time.
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
from simulator.runs.fleet import FleetPlanner, write_fleet_plan  # noqa: E402
from simulator.runs.plan import Target  # noqa: E402


def timed_batches(planner: FleetPlanner) -> list[dict]:
    """Per batch of runs the planner hands the backend (a round of the probes, the prediction, the
    confirmations): its runs, wall time and CPU time. A local pool's workers are reaped when its batch ends, so
    their CPU time counts in the batch's."""
    batches: list[dict] = []
    evaluate = planner.evaluate

    def timed(cands, seeds=None):
        runs0, cpu0, t0 = planner.runs, cpu_seconds(), time.perf_counter()
        rows = evaluate(cands, seeds)
        batches.append({"runs": planner.runs - runs0, "largest_replicas": max((c.replicas for c in cands), default=0),
                        "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(cpu_seconds() - cpu0, 1)})
        return rows

    planner.evaluate = timed
    return batches


def fleet_plan(args: argparse.Namespace, out: Path) -> tuple[dict, float, int, list[dict]]:
    base = load_scenario(args.scenario)
    rate = base.model.traffic.rate * args.rate_scale
    scn = load_scenario(args.scenario, (f"traffic.rate={rate}", f"systems=[{', '.join(args.systems)}]"))
    target = Target(tps=scn.model.sla.tps_targets[0], max_gpus=args.max_gpus)
    t0 = time.perf_counter()
    planner = FleetPlanner(scn, out, target, Backend(args.backend, args.jobs, args.address), args.probe_replicas,
                           quick=not args.full, replicates=args.replicates,
                           on_stored=lambda task: print(f"  run stored after {time.perf_counter() - t0:.0f} s: "
                                                        f"{task.spec.system.name}, {task.scn.model.hardware.replicas}"
                                                        " decode replicas", file=sys.stderr, flush=True))
    batches = timed_batches(planner)
    doc = planner.run()
    return doc, time.perf_counter() - t0, planner.runs, batches


def cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (the local pool's workers; not Ray's)."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "peak.yaml")
    ap.add_argument("--rate-scale", type=float, default=200.0, help="multiplier of the scenario's traffic rate")
    ap.add_argument("--probe-replicas", type=int, default=4)
    ap.add_argument("--systems", type=lambda s: s.split(","), default=["mtp-1", "dspark"])
    ap.add_argument("--replicates", type=int, default=3)
    ap.add_argument("--max-gpus", type=int, default=1500)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--full", action="store_true", help="the scenario's run length instead of the quick one")
    ap.add_argument("--backend", choices=["local", "ray"], default="local")
    ap.add_argument("--address", help="--backend ray: an existing cluster")
    ap.add_argument("--out", type=Path, help="keep the plan's run store, plan.csv and plan.json here (a second "
                    "bench into it resumes) [default: a temporary folder]")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    cpu0, load0 = cpu_seconds(), os.getloadavg()[0]
    if args.out is not None:
        doc, wall, runs, batches = fleet_plan(args, args.out)
        write_fleet_plan(args.out, doc)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            doc, wall, runs, batches = fleet_plan(args, Path(tmp))
    cpu, load1 = cpu_seconds() - cpu0, os.getloadavg()[0]
    confirm = batches[-1]  # the full-size runs, one batch
    before = batches[:-1]
    # On `jobs` free cores: a round of probes (many similar small runs) takes about its CPU time / jobs; the
    # confirmations between their CPU time / jobs (equal runs side by side) and their CPU time (one run holding
    # it all). The wall time on a shared machine also carries the other jobs' load.
    probe_free = sum(b["cpu_s"] / min(args.jobs, max(b["runs"], 1)) for b in before)
    free_cores_s = [probe_free + confirm["cpu_s"] / min(args.jobs, max(confirm["runs"], 1)),
                    probe_free + confirm["cpu_s"]]
    systems = {}
    for k, e in doc["systems"].items():
        f = doc["fleet"]["systems"][k]
        conf, pred = f["confirmation"], f["predicted"]
        systems[k] = {
            "status": e["status"], "gpus": e["gpus"], "prefill_gpus": e["prefill_gpus"], "decode_gpus": e["decode_gpus"],
            "rate_per_replica_lo": f["rate_per_replica_lo"], "rate_per_replica_hi": f["rate_per_replica_hi"],
            "predicted_lo": pred and pred["attainment_lo"], "predicted_hi": pred and pred["attainment_hi"],
            "confirmed_attainment": conf and conf["attainment"], "within": conf and conf["within_prediction"],
            "sla_agrees": conf and conf["agrees"], "confirmation_wall_s": conf and conf["wall_seconds"],
            "reason": f["reason"]}
    result = {"scenario": args.scenario.name, "rate": doc["traffic"]["rate"], "probe_replicas": args.probe_replicas,
              "replicates": args.replicates, "quick": not args.full, "backend": args.backend, "jobs": args.jobs,
              "runs": runs, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
              "load_average_1min": [load0, load1], "probe_cpu_s": round(sum(b["cpu_s"] for b in before), 1),
              "probe_wall_s": round(sum(b["wall_s"] for b in before), 1), "confirm_cpu_s": confirm["cpu_s"],
              "confirm_wall_s": confirm["wall_s"], "free_cores_estimate_s": [round(x, 1) for x in free_cores_s],
              "batches": batches, "systems": systems, "verdict": doc["verdict"]}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.scenario.name} at {doc['traffic']['rate']:,.0f} requests/s (x{args.rate_scale:g}), probe "
          f"{args.probe_replicas} replica(s), {args.replicates} seed(s), {'quick' if not args.full else 'full'} runs: "
          f"{runs} runs in {wall:.0f} s ({args.backend}, {args.jobs} jobs; {cpu:.0f} CPU-seconds; "
          f"1-minute load average {load0:.1f} at the start, {load1:.1f} at the end)")
    print(f"  probes and predictions: {sum(b['runs'] for b in before)} runs, {result['probe_wall_s']:.0f} s wall, "
          f"{result['probe_cpu_s']:.0f} CPU-s; confirmations: {confirm['runs']} runs, {confirm['wall_s']:.0f} s wall, "
          f"{confirm['cpu_s']:.0f} CPU-s; on {args.jobs} free cores {free_cores_s[0]:.0f} to {free_cores_s[1]:.0f} s")
    for k, s in systems.items():
        if s["confirmed_attainment"] is None:
            print(f"  {k}: {s['status']}, {s['gpus']} GPUs, not confirmed: {s['reason']}")
            continue
        # no probed share failed clearly: the capacity is at least the most that met
        hi = s["rate_per_replica_hi"]
        rate = (f"{s['rate_per_replica_lo']:.1f}-{hi:.1f}" if hi is not None
                else f"at least {s['rate_per_replica_lo']:.1f}")
        print(f"  {k}: {rate} req/s per replica -> {s['gpus']} GPUs ({s['prefill_gpus']} prefill + {s['decode_gpus']} decode); predicted "
              f"{s['predicted_lo']:.2%}-{s['predicted_hi']:.2%}, full size {s['confirmed_attainment']:.2%} "
              f"({'within' if s['within'] else 'OUTSIDE'}, SLA verdict {'agrees' if s['sla_agrees'] else 'DIFFERS'}; "
              f"that run {s['confirmation_wall_s']:.0f} s)")
    print(doc["verdict"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
