"""A replayed benchmark's figures as the benchmark tools report them, per load stage and for the whole run
(``simulate bench``; docs/benchmarks.md).

A request belongs to the stage it arrived in. Latencies are over the requests that completed (a benchmark's
"successes"), in seconds:

- E2E: finish - arrival. TTFT: first token - arrival.
- TPOT per request: (E2E - TTFT) / (output - 1), requests with more than one output token.
- ITL: the gaps between a request's successive emissions, pooled over the stage's requests. A request emits its
  first token, then at the end of every step of its replica that started once it had been admitted and had its
  first token, up to its last token: for plain decoding one token a step, so each gap is a step time
  (``metrics.emission_gaps``, the rule runs.csv's ITL uses too).
- Throughput (input tokens, output tokens, requests per second): the stage's completed requests over its span,
  from its first arrival to its last completion (as inference-perf divides).

``overloaded`` (per stage): more than ``metrics.OVERLOAD_SHARE`` of the stage's requests never finished (still
running or queued at the end of the drain allowance, or rejected as too long for the KV cache), or the queue grew
through the stage: the requests queued (summed over replicas) at the stage's end exceed both max(10, a tenth of
replicas x max_running) and those queued at its midpoint (``metrics.saturated``'s rule on the stage's window). The
whole run is overloaded when a stage is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.outputs.metrics import emission_gaps, overloaded

LATENCIES = ("e2e", "ttft", "tpot", "itl")
STATS = ("mean", "p90", "p99")
COLUMNS = ("stage", "start_s", "end_s", "rate", "requests", "completed", "unfinished",
           *(f"{m}_{s}_s" for m in LATENCIES for s in STATS),
           "input_tokens_per_s", "output_tokens_per_s", "requests_per_s", "queued_at_end", "overloaded")


def request_stages(arrival: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Stage index of each arrival time (stage i spans [edges[i], edges[i + 1])); -1 outside every stage."""
    s = np.searchsorted(edges, arrival, side="right") - 1
    return np.where((s >= 0) & (s < len(edges) - 1), s, -1)


def queued_at(steps: dict[str, np.ndarray], times: np.ndarray, replicas: int) -> np.ndarray:
    """Requests queued at each of ``times``, summed over replicas, as each replica's last step by then saw them."""
    total = np.zeros(len(times), dtype=np.int64)
    for r in range(replicas):
        mine = np.flatnonzero(steps["replica"] == r)
        j = np.searchsorted(steps["end"][mine], times, side="right") - 1
        total += np.where(j >= 0, steps["queued"][mine][np.maximum(j, 0)], 0)
    return total


def _stats(x: np.ndarray) -> list[float]:
    if not len(x):
        return [float("nan")] * len(STATS)
    return [float(x.mean()), float(np.percentile(x, 90)), float(np.percentile(x, 99))]


def bench_table(req: dict[str, np.ndarray], steps: dict[str, np.ndarray], stages: list[tuple[float, float]],
                stop: float, replicas: int, max_running: int) -> pd.DataFrame:
    """One row per stage (``stages``: (seconds, rate) in order from time 0) and a last row ``all``; ``stop`` is
    when the run stopped following the requests."""
    edges = np.concatenate([[0.0], np.cumsum([d for d, _ in stages])])
    stage = request_stages(req["arrival"], edges)
    done = ~np.isnan(req["finish"])
    gaps, owner = emission_gaps(req, steps, (stage >= 0) & done, stop)
    gap_stage = stage[owner]
    out_tokens = req["output"].astype(float)
    e2e = req["finish"] - req["arrival"]
    ttft = req["first_token"] - req["arrival"]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_tokens > 1, (req["finish"] - req["first_token"]) / (out_tokens - 1), np.nan)
    mids, ends = (edges[:-1] + edges[1:]) / 2, edges[1:]
    q_mid, q_end = queued_at(steps, mids, replicas), queued_at(steps, ends, replicas)
    floor = max(10.0, 0.1 * replicas * max_running)
    rows = []
    for s in [*range(len(stages)), None]:
        mine = stage >= 0 if s is None else stage == s
        ok = mine & done
        n, completed = int(mine.sum()), int(ok.sum())
        span = (req["finish"][ok].max() - req["arrival"][mine].min()) if completed else float("nan")
        rate = stages[s][1] if s is not None else float(n / edges[-1])
        growing = bool(q_end[s] > floor and q_end[s] > q_mid[s]) if s is not None else False
        row = {"stage": "all" if s is None else str(s), "start_s": float(edges[0 if s is None else s]),
               "end_s": float(edges[-1 if s is None else s + 1]), "rate": float(rate), "requests": n,
               "completed": completed, "unfinished": n - completed}
        itl = gaps[gap_stage >= 0] if s is None else gaps[gap_stage == s]
        tp = tpot[ok]
        for name, values in (("e2e", e2e[ok]), ("ttft", ttft[ok]), ("tpot", tp[~np.isnan(tp)]), ("itl", itl)):
            row.update({f"{name}_{k}_s": v for k, v in zip(STATS, _stats(values), strict=True)})
        span = span if completed and span > 0 else float("nan")
        row.update({"input_tokens_per_s": float(req["prompt"][ok].sum() / span),
                    "output_tokens_per_s": float(req["output"][ok].sum() / span),
                    "requests_per_s": float(completed / span),
                    "queued_at_end": int(q_end[-1] if s is None else q_end[s]),
                    "overloaded": overloaded(n, n - completed) or growing})
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table.loc[table["stage"] == "all", "overloaded"] = bool(table["overloaded"].any())
    return table
