"""From a run's request and step logs to the numbers a planner reads (DESIGN.md, "Metrics").

The measurement window is [warmup, end]: throughput, tau and budget count the steps that end inside it; per-request
figures count the requests that arrived inside it and finished before the end (rejected requests excluded).
"""

from __future__ import annotations

import numpy as np

from hw_profile.table import StepTimeGrid


def percentile(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def request_metrics(req: dict[str, np.ndarray], warmup: float, end: float, sla_tps: float) -> dict[str, float]:
    sel = (req["arrival"] >= warmup) & (req["finish"] <= end) & ~req["rejected"]
    arrival, first, finish, out = req["arrival"][sel], req["first_token"][sel], req["finish"][sel], req["output"][sel]
    gen_time = finish - first
    ok = gen_time > 0  # one-token outputs have no generation phase
    tps = out[ok] / gen_time[ok]  # DESIGN.md: output tokens / (finish - first token)
    tpot = gen_time[ok] / np.maximum(out[ok] - 1, 1)
    ttft = first - arrival
    return {
        "requests": int(sel.sum()),
        "tps_per_user": float(tps.mean()) if len(tps) else float("nan"),
        "tps_per_user_p50": percentile(tps, 50),
        "tps_per_user_p10": percentile(tps, 10),
        "ttft_p50": percentile(ttft, 50),
        "ttft_p99": percentile(ttft, 99),
        "tpot_p50": percentile(tpot, 50),
        "sla_attainment": float((tps >= sla_tps).mean()) if len(tps) else float("nan"),
    }


def step_metrics(steps: dict[str, np.ndarray], warmup: float, end: float, gpus: int,
                 energy: StepTimeGrid | None = None, clock: StepTimeGrid | None = None) -> dict[str, float]:
    sel = (steps["end"] > warmup) & (steps["end"] <= end)
    span = end - warmup
    emitted = steps["emitted"][sel].sum()
    decoding = steps["decoding"][sel].sum()
    out = {
        "throughput_per_gpu": float(emitted / span / gpus),
        "tau": float((steps["accepted"][sel].sum() + decoding) / decoding) if decoding else float("nan"),
        "mean_verify_budget": float((steps["verified"][sel].sum() + decoding) / decoding) if decoding else float("nan"),
        "mean_running": float(np.average(steps["running"][sel], weights=steps["step_ms"][sel])) if sel.any() else 0.0,
        "mean_kv_tokens": float(np.average(steps["kv_tokens"][sel], weights=steps["step_ms"][sel])) if sel.any() else 0.0,
        "joules_per_token": float("nan"),
    }
    if energy is not None and clock is not None and sel.any() and emitted:
        b, k, ms = steps["batch_tokens"][sel], steps["kv_tokens"][sel], steps["step_ms"][sel]
        forward_ms = clock.values(b, k)
        # the forward's energy at its own average power, stretched over the whole step (draft and stall included)
        joules = energy.values(b, k) * ms / np.maximum(forward_ms, 1e-9)
        out["joules_per_token"] = float(joules.sum() / emitted)
    return out


def saturated(steps: dict[str, np.ndarray], end: float, replicas: int, max_running: int) -> bool:
    """Open loop: the queue is still growing at the end (longer than a tenth of the batch capacity, and longer
    than at mid-run)."""
    if not len(steps["end"]):
        return False
    queued_at = []
    for t in (end / 2, end):
        total = 0
        for r in range(replicas):
            mine = np.flatnonzero((steps["replica"] == r) & (steps["end"] <= t))
            total += int(steps["queued"][mine[-1]]) if len(mine) else 0
        queued_at.append(total)
    return queued_at[1] > max(10, 0.1 * replicas * max_running) and queued_at[1] > queued_at[0]


def tau_by_mix(req: dict[str, np.ndarray], warmup: float, keys: list[str]) -> dict[str, float]:
    """tau per workload mix entry (domain or benchmark), over the requests that arrived after the warm-up."""
    sel = (req["arrival"] >= warmup) & (req["decode_steps"] > 0)
    out = {}
    for i, key in enumerate(keys):
        mine = sel & (req["mix"] == i)
        steps = req["decode_steps"][mine].sum()
        out[key] = float((req["accepted"][mine].sum() + steps) / steps) if steps else float("nan")
    return out


def time_series(steps: dict[str, np.ndarray], req: dict[str, np.ndarray], end: float, replicas: int, gpus: int,
                sla_tps: float, bins: int = 60) -> dict[str, list[float]]:
    """Open-loop behaviour over time, in equal bins of the run: arrivals/s, queued and running requests (summed
    over replicas, step-averaged), mean verification budget, throughput per GPU, and SLA attainment of the
    requests finishing in each bin."""
    edges = np.linspace(0.0, end, bins + 1)
    width = edges[1] - edges[0]
    b = np.clip(np.searchsorted(edges, steps["end"], side="right") - 1, 0, bins - 1)

    def per_bin(values: np.ndarray) -> np.ndarray:
        return np.bincount(b, weights=values, minlength=bins)

    count = np.maximum(per_bin(np.ones_like(b, dtype=float)), 1)
    decoding = per_bin(steps["decoding"].astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        budget = (per_bin(steps["verified"].astype(float)) + decoding) / decoding
    fin = ~np.isnan(req["finish"]) & ~req["rejected"]
    gen = req["finish"][fin] - req["first_token"][fin]
    ok = gen > 0
    tps = req["output"][fin][ok] / gen[ok]
    fb = np.clip(np.searchsorted(edges, req["finish"][fin][ok], side="right") - 1, 0, bins - 1)
    finished = np.bincount(fb, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        sla = np.bincount(fb, weights=(tps >= sla_tps).astype(float), minlength=bins) / finished
    arrivals, _ = np.histogram(req["arrival"], bins=edges)

    def clean(a: np.ndarray) -> list[float]:
        return [None if np.isnan(v) else round(float(v), 6) for v in a]

    return {
        "time": clean((edges[:-1] + edges[1:]) / 2),
        "arrivals_per_s": clean(arrivals / width),
        # each replica's queue and batch, averaged over its steps in the bin, then summed over replicas
        "queued": clean(per_bin(steps["queued"].astype(float)) / count * replicas),
        "running": clean(per_bin(steps["running"].astype(float)) / count * replicas),
        "verify_budget": clean(budget),
        "throughput_per_gpu": clean(per_bin(steps["emitted"].astype(float)) / width / gpus),
        "sla_attainment": clean(sla),
    }
