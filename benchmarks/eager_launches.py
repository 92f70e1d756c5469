"""What a step costs when it runs eagerly instead of replaying a CUDA graph, measured on the GPU at hand.

    ./run python benchmarks/eager_launches.py --model qwen3-8b --device cuda --out eager.json
    ./run python benchmarks/eager_launches.py --model CONFIG.json --device cpu --requests 1,4 --out x.json  # dry run
    ./run python benchmarks/eager_launches.py --summarize benchmarks/data/h200-lease/eager-launches.json

Serving engines replay CUDA graphs up to their largest captured size and run eagerly past it; `hw-profile
estimate` prices an eager step at max(the graph's cost, the host's launch floor), the floor being kernels per layer
x layers x `launch_us` plus the engine's host work (hw_profile/estimate/engine_costs.py). This measures the pieces
on one model (transformers' implementation, random weights, a static KV cache, as `hw-profile sps` builds it): per
point (R requests x t tokens over a context), the kernels one forward launches (torch.profiler's device-kernel
events), the eager forward's time (CUDA events around back-to-back forwards, so host gaps count), the captured
graph's replay time, and their difference per kernel. On a CPU there is no graph and no kernel: the dry run times
the eager forward and counts operator calls, so that the script's path is exercised without a GPU.

Prints one line per point and writes every figure to --out (JSON), with the device and library versions; then
(and with --summarize FILE, from a JSON written before) how well two rules for an eager step fit the points, the
floor taken as the one-token step's eager time, all launches and no GPU work: max(graph, floor), the estimate's
rule (launches issued while the GPU runs the kernels already launched), and graph + floor (launches never hidden).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from hw_profile.measure import model_builder as mb
from hw_profile.measure.profiler import ProfileConfig, cuda_event_times, resolve_shape


def count_launches(step, device: str) -> int:
    """Device kernels one eager forward launches (operator calls on a CPU, which launches none)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if device == "cuda" else [ProfilerActivity.CPU]
    with torch.inference_mode(), profile(activities=activities) as prof:
        step.forward()
        if device == "cuda":
            torch.cuda.synchronize()
    events = prof.events()
    if device == "cuda":
        return sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    return sum(1 for e in events if e.name.startswith("aten::"))


def cuda_event_ms(run, repeats: int) -> float:
    """Median ms of ``run()`` between CUDA events (``hw_profile.measure.profiler.cuda_event_times``)."""
    return float(np.median(cuda_event_times(torch, run, repeats)))


def time_eager(step, device: str, repeats: int) -> float:
    """Median ms of an eager forward."""
    with torch.inference_mode():
        if device == "cuda":
            return cuda_event_ms(step.forward, repeats)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step.forward()
            times.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(times))


def time_graph(step, repeats: int) -> float:
    """Median ms of one replay of the step captured as a CUDA graph (NaN, with the reason printed, when the model
    cannot be captured)."""
    with torch.inference_mode():
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                step.forward()
        except Exception as exc:  # a host sync inside the model: report it and keep the eager figures
            print(f"  graph capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}", flush=True)
            torch.cuda.synchronize()
            step.forward()  # puts the cache position back
            return float("nan")
        ms = cuda_event_ms(graph.replay, repeats)
    del graph
    return ms


def warm(step, device: str, n: int) -> None:
    with torch.inference_mode():
        if device == "cuda":  # on a side stream, as graph capture requires
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(n):
                    step.forward()
            torch.cuda.current_stream().wait_stream(stream)
            torch.cuda.synchronize()
        else:
            for _ in range(n):
                step.forward()


def rule_errors(points: list[dict]) -> dict:
    """Relative error of max(graph, floor) and of graph + floor against each point's eager time; the floor is the
    eager time of the smallest step (fewest tokens), where the GPU's own work is least."""
    first = min(points, key=lambda p: (p["batch_tokens"], p["requests"]))
    floor = first["eager_ms"]
    eager = np.array([p["eager_ms"] for p in points])
    graph = np.array([p["graph_ms"] for p in points])
    return {"floor_ms": floor, "us_per_launch": floor * 1e3 / first["launches"],
            "kernels_per_layer": first["launches"] / first["layers"],
            "max_rule": np.maximum(graph, floor) / eager - 1.0, "sum_rule": (graph + floor) / eager - 1.0}


def summarize(facts: dict) -> str:
    points = [{**p, "layers": facts["layers"]} for p in facts["points"]]
    if not all(np.isfinite(p["graph_ms"]) for p in points):
        return "no graph replays measured (a CPU run, or capture failed): nothing to compare"
    e = rule_errors(points)
    worst = lambda r: f"{np.abs(r).max():.0%} at worst, median {np.median(np.abs(r)):.0%}"  # noqa: E731
    return (f"{facts['device']}, {facts['model_shape']['name']} ({facts['layers']} layers, {facts['dtype']}): "
            f"{e['kernels_per_layer']:.0f} kernels a layer; a one-token eager step {e['floor_ms']:.1f} ms, "
            f"{e['us_per_launch']:.1f} us a kernel\n"
            f"  max(graph, floor) against the eager steps: {worst(e['max_rule'])} "
            f"({' '.join(f'{x:+.0%}' for x in e['max_rule'])})\n"
            f"  graph + floor against the eager steps:     {worst(e['sum_rule'])} "
            f"({' '.join(f'{x:+.0%}' for x in e['sum_rule'])})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--summarize", type=Path, default=None, help="print the summary of a JSON this wrote; no run")
    ap.add_argument("--model", help="a built-in shape (hw-profile's) or a transformers config.json")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default=None,
                    help="default: bf16 on cuda, fp32 on cpu")
    ap.add_argument("--requests", default="1,4,16,64,256", help="comma list of request counts R")
    ap.add_argument("--tokens-per-request", default="1,4", help="comma list of t")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.summarize is not None:
        print(summarize(json.loads(args.summarize.read_text())))
        return
    if args.model is None or args.out is None:
        ap.error("--model and --out are needed (or --summarize FILE)")
    dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"eager_launches: --device cuda, but torch {torch.__version__} sees no CUDA device")
    requests = [int(x) for x in args.requests.split(",")]
    tprs = [int(x) for x in args.tokens_per_request.split(",")]

    shape, _, base = resolve_shape(ProfileConfig(model=args.model, requests=requests, tokens_per_request=tprs,
                                                 contexts=[args.context]))
    model = mb.build_model(shape, dtype, args.device, base=base, max_positions=max(args.context + max(tprs) + 16, 4096))
    points = []
    for r in requests:
        cache = mb.prepare_cache(model, r, args.context, max(tprs))
        for t in tprs:
            step = mb.step_inputs(model, cache, r, args.context, t)
            warm(step, args.device, 3)
            launches = count_launches(step, args.device)
            eager = time_eager(step, args.device, args.repeats)
            graph = time_graph(step, args.repeats) if args.device == "cuda" else float("nan")
            point = {"requests": r, "tokens_per_request": t, "batch_tokens": r * t, "context": args.context,
                     "launches": launches, "eager_ms": eager, "graph_ms": graph,
                     "eager_over_graph": eager / graph, "gap_us_per_launch": (eager - graph) * 1e3 / launches}
            points.append(point)
            print(f"R={r:>4} t={t} B={r * t:>5}: {launches} {'kernels' if args.device == 'cuda' else 'ops'}, "
                  f"eager {eager:.3f} ms, graph {graph:.3f} ms, eager/graph {eager / graph:.2f}x, "
                  f"(eager - graph) / launch {(eager - graph) * 1e3 / launches:.2f} us", flush=True)
        del cache
        if args.device == "cuda":
            torch.cuda.empty_cache()
    facts = {"model": args.model, "model_shape": shape.to_dict(), "layers": shape.layers, "dtype": dtype,
             "device": torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu",
             "torch": torch.__version__, "transformers": __import__("transformers").__version__,
             "python": platform.python_version(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "repeats": args.repeats, "points": points}
    args.out.write_text(json.dumps(facts, indent=1, default=float) + "\n")
    print(f"wrote {args.out}")
    print(summarize(facts))


if __name__ == "__main__":
    main()
