"""From a run's request and step logs to the numbers a planner reads (docs/model.md, "Metrics").

The measurement window is [warmup, end). Throughput, tau and budget count the steps that end inside it.
Per-request figures follow every request that arrived inside it (rejected ones aside) to completion: the run goes
on after ``end`` (the load unchanged, new arrivals unmeasured) until they have all finished or a cap ``stop`` is
reached; requests still unfinished at the cap are reported, count as SLA misses, and enter the speed and TTFT
figures with what they had at the cap. Counting only the requests that finished inside the window would drop the
slow ones and flatter the system.
"""

from __future__ import annotations

import numpy as np

from hw_profile.tables.step_table import StepTimeGrid


def percentile(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def user_speed(output: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Per-user generation speed, the one definition that TPS, TPOT (its inverse) and SLA attainment share: the
    tokens after the first over the time from the first token to the last one, (output - 1) / (last - first).
    TTFT is excluded. NaN where there is no generation phase (a one-token output)."""
    gen = np.asarray(last, dtype=float) - np.asarray(first, dtype=float)
    tokens = np.asarray(output, dtype=float) - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((tokens > 0) & (gen > 0), tokens / gen, np.nan)


def followed(req: dict[str, np.ndarray], warmup: float, end: float) -> np.ndarray:
    """Mask of the requests a run's per-request metrics follow: arrived in [warmup, end), not rejected."""
    return (req["arrival"] >= warmup) & (req["arrival"] < end) & ~req["rejected"]


def request_metrics(req: dict[str, np.ndarray], warmup: float, end: float, stop: float,
                    sla_tps: float) -> dict[str, float]:
    """Per-request figures over the followed requests (see the module docstring); ``stop`` is when the run
    stopped following them (all finished, or the drain cap)."""
    sel = followed(req, warmup, end)
    arrival, first, finish = req["arrival"][sel], req["first_token"][sel], req["finish"][sel]
    out, generated = req["output"][sel], req["generated"][sel]
    done = ~np.isnan(finish)
    # finished: their speed; unfinished at the cap: their speed so far (0 before a second token), and a miss
    speed = np.where(done, user_speed(out, first, finish),
                     np.nan_to_num(user_speed(generated, first, np.full_like(first, stop)), nan=0.0))
    defined = ~np.isnan(speed)  # all but finished one-token outputs
    met = (done & (speed >= sla_tps))[defined]
    speed = speed[defined]
    # TTFT of a request still without a first token at the cap is at least stop - arrival
    ttft = np.where(np.isnan(first), stop, first) - arrival
    routed, admitted = req["routed"][sel], req["admitted"][sel]
    queued = ~np.isnan(routed)
    wait = np.where(np.isnan(admitted), stop, admitted)[queued] - routed[queued]
    p50 = percentile(speed, 50)
    # end-to-end latency, a lower bound (stop - arrival) for a request unfinished at the cap, as TTFT's
    e2el = np.where(done, finish, stop) - arrival
    return {
        "requests": int(sel.sum()),
        "unfinished": int((~done).sum()),
        "tps_per_user": float(speed.mean()) if len(speed) else float("nan"),
        "tps_per_user_p50": p50,
        "tps_per_user_p10": percentile(speed, 10),
        "ttft_p50": percentile(ttft, 50),
        "ttft_p99": percentile(ttft, 99),
        "admission_wait_p50": percentile(wait, 50),
        "admission_wait_p99": percentile(wait, 99),
        "tpot_p50": 1.0 / p50 if p50 > 0 else float("nan"),
        **latency_stats(ttft, speed, e2el),
        "sla_attainment": float(met.mean()) if len(met) else float("nan"),
        "preemptions": int(req["preemptions"][sel].sum()),
        "rejected": int((req["rejected"] & (req["arrival"] >= warmup) & (req["arrival"] < end)).sum()),
    }


def latency_stats(ttft: np.ndarray, speed: np.ndarray, e2el: np.ndarray) -> dict[str, float]:
    """The figures ``vllm bench serve`` prints, over the same followed requests as the rest: TTFT mean and p90
    (p50 and p99 are ``ttft_p50``, ``ttft_p99``), TPOT (seconds per output token after the first, 1 / speed:
    its percentiles are the speed's mirrored, as ``tpot_p50`` is; a request still without a second token at
    the cap has an unbounded TPOT, so the mean is then infinite) and end-to-end latency (arrival to last
    token). Seconds, as every time in runs.csv."""
    with np.errstate(divide="ignore"):
        tpot = 1.0 / speed
    mirrored = {q: percentile(speed, 100 - q) for q in (90, 99)}
    return {
        "ttft_mean": float(ttft.mean()) if len(ttft) else float("nan"),
        "ttft_p90": percentile(ttft, 90),
        "tpot_mean": float(tpot.mean()) if len(tpot) else float("nan"),
        **{f"tpot_p{q}": (1.0 / v if v > 0 else float("inf")) if not np.isnan(v) else v
           for q, v in mirrored.items()},
        "e2el_mean": float(e2el.mean()) if len(e2el) else float("nan"),
        "e2el_p50": percentile(e2el, 50),
        "e2el_p90": percentile(e2el, 90),
        "e2el_p99": percentile(e2el, 99),
    }


def inter_token_gaps(req: dict[str, np.ndarray], steps: dict[str, np.ndarray], warmup: float, end: float,
                     stop: float) -> np.ndarray:
    """Every gap between successive emissions of the followed requests (seconds), pooled, as ``vllm bench
    serve`` pools its inter-token latencies (a step that emits several tokens of a request at once is one
    emission); ``emission_gaps`` says which. A request's count of emissions after its first equals its
    ``decode_steps`` (tests/simulator/test_latency.py checks it); a request preempted and recomputed sat some of
    those steps out, which the logs do not say, so its pause reads as several shorter gaps."""
    return emission_gaps(req, steps, followed(req, warmup, end), stop)[0]


def emission_gaps(req: dict[str, np.ndarray], steps: dict[str, np.ndarray], chosen: np.ndarray,
                  stop: float) -> tuple[np.ndarray, np.ndarray]:
    """(gaps, owner): every gap between successive emissions of the requests ``chosen`` (a mask) and the request
    each belongs to, in no particular order. A request emits at its first token, then at the end of every step of
    its replica that started once it had been admitted and had its first token, up to its last token (or ``stop``):
    the steps it runs in. Per replica one searchsorted for every request's first and last step, the gaps gathered
    by index: no loop over requests or tokens."""
    ids = np.flatnonzero(chosen & ~np.isnan(req["first_token"]) & ~np.isnan(req["admitted"]))
    gaps, owners = [], []
    for i in np.unique(req["replica"][ids]):
        mine = np.flatnonzero(steps["replica"] == i)
        starts, ends = steps["start"][mine], steps["end"][mine]
        rs = ids[req["replica"][ids] == i]
        first = req["first_token"][rs]
        last = np.where(np.isnan(req["finish"][rs]), stop, req["finish"][rs])
        lo = np.searchsorted(starts, np.maximum(first, req["admitted"][rs]) - 1e-12, side="left")
        hi = np.searchsorted(ends, last + 1e-12, side="right")
        k = np.maximum(hi - lo, 0)
        total = int(k.sum())
        if not total:
            continue
        pos = np.arange(total) - np.repeat(np.cumsum(k) - k, k)  # position of each emission in its request
        at = np.repeat(lo, k) + pos  # index of the step that emitted it
        prev = np.where(pos == 0, np.repeat(first, k), ends[np.maximum(at - 1, 0)])
        gaps.append(ends[at] - prev)
        owners.append(np.repeat(rs, k))
    if not gaps:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    return np.concatenate(gaps), np.concatenate(owners)


def itl_metrics(gaps: np.ndarray) -> dict[str, float]:
    return {"itl_mean": float(gaps.mean()) if len(gaps) else float("nan"),
            **{f"itl_p{q}": percentile(gaps, q) for q in (50, 90, 99)}}


def bench_counts(req: dict[str, np.ndarray], steps: dict[str, np.ndarray], warmup: float,
                 end: float) -> dict[str, int]:
    """The counts a ``vllm bench serve`` result carries besides its latencies: the followed requests that
    completed and their prompt and output tokens, and the speculative decoding counters over the window's steps
    (drafts: request-steps; draft tokens: tokens verified beyond the bonus one; accepted drafts)."""
    sel = followed(req, warmup, end) & ~np.isnan(req["finish"])
    win = (steps["end"] > warmup) & (steps["end"] <= end)
    return {"completed": int(sel.sum()), "input_tokens": int(req["prompt"][sel].sum()),
            "output_tokens": int(req["output"][sel].sum()), "drafts": int(steps["decoding"][win].sum()),
            "draft_tokens": int(steps["verified"][win].sum()), "accepted": int(steps["accepted"][win].sum())}


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
    """Open loop: the queue is still growing at the window's end ``end``. Both must hold: the requests queued
    (summed over replicas, as each replica's last step by then saw them) exceed max(10, a tenth of the batch
    capacity replicas x max_running), and exceed what was queued at mid-run. The first keeps a short queue,
    which any busy Poisson stream builds now and then, from counting (10 is the floor for small deployments,
    where a tenth of the capacity is a handful of requests); the second asks that it grew rather than stood."""
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


#: share of the followed requests still unfinished at the drain cap above which a run is ``overloaded``
OVERLOAD_SHARE = 0.05


def overloaded(requests: int, unfinished: int) -> bool:
    """Overload the running batch absorbs: more than ``OVERLOAD_SHARE`` of the followed requests were still
    unfinished at the drain cap. A deployment whose batch admits whatever arrives (ample KV cache, a large
    ``max_running``) grows no queue, so ``saturated`` stays false, yet every request slows down until most
    cannot finish: 247 of 341 followed requests unfinished at 0% SLA attainment read as unsaturated. In a
    healthy run the drain cap (``run.drain_cap_s``) outlasts the last followed request's lifetime; a share
    unfinished at it says the batch took on more than it serves (or the cap is short for the output lengths)."""
    return bool(requests > 0 and unfinished > OVERLOAD_SHARE * requests)


def tau_by_mix(req: dict[str, np.ndarray], warmup: float, end: float, keys: list[str]) -> dict[str, float]:
    """tau per workload mix entry (domain or benchmark), over the followed requests, with the steps they had
    taken when the run stopped."""
    sel = followed(req, warmup, end) & (req["decode_steps"] > 0)
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
    steps = {k: v[steps["end"] <= end] for k, v in steps.items()}  # the drain after the window is not shown
    edges = np.linspace(0.0, end, bins + 1)
    width = edges[1] - edges[0]
    b = np.clip(np.searchsorted(edges, steps["end"], side="right") - 1, 0, bins - 1)

    def per_bin(values: np.ndarray) -> np.ndarray:
        return np.bincount(b, weights=values, minlength=bins)

    count = np.maximum(per_bin(np.ones_like(b, dtype=float)), 1)
    decoding = per_bin(steps["decoding"].astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        budget = (per_bin(steps["verified"].astype(float)) + decoding) / decoding
    fin = (req["finish"] <= end) & ~req["rejected"]
    speed = user_speed(req["output"][fin], req["first_token"][fin], req["finish"][fin])
    ok = ~np.isnan(speed)
    tps = speed[ok]
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
