"""Runs as ``vllm bench serve --save-result`` JSON files, so that a simulated benchmark and a measured one sit side
by side (``simulate --format vllm-bench``).

Field names are vllm's: the counts (``completed``, ``total_input_tokens``, ``total_output_tokens``), the rates
(``request_throughput``, ``output_throughput``, ``total_token_throughput``), and per latency (TTFT, TPOT, ITL,
end-to-end ``e2el``) ``mean_*_ms``, ``median_*_ms``, ``p90_*_ms``, ``p99_*_ms``, in milliseconds; the speculative
decoding counters ``num_drafts``, ``num_draft_tokens``, ``num_accepted_tokens``. The figures are runs.csv's
(docs/model.md), over the measurement window's requests followed to completion. A closed-loop run of N users is
a benchmark at ``--max-concurrency N`` (``request_rate`` inf), an open-loop run one at its arrival rate with no
cap. Each system's closed-loop files share a folder, the layout ``hw-profile calibrate`` reads back.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from atomic_files import atomic_write_text
from simulator.outputs.summary import plain

LATENCIES = {"ttft": ("ttft_mean", "ttft_p50", "ttft_p90", "ttft_p99"),
             "tpot": ("tpot_mean", "tpot_p50", "tpot_p90", "tpot_p99"),
             "itl": ("itl_mean", "itl_p50", "itl_p90", "itl_p99"),
             "e2el": ("e2el_mean", "e2el_p50", "e2el_p90", "e2el_p99")}


def bench_result(row: dict, scenario: str, traffic_kind: str | None) -> dict:
    """One run (a row of the run store) as a ``vllm bench serve --save-result`` document."""
    counts = row.get("bench") or {}
    window = float(row["sim_seconds"]) - float(row["warmup_s"])
    closed = row.get("concurrency") is not None and not _isnan(row.get("concurrency"))
    done = counts.get("completed", 0)
    out_tokens = float(row["throughput_per_gpu"]) * float(row["gpus"])  # emitted per second in the window
    doc = {
        "backend": "dspark-sim",
        "model_id": scenario,
        "system": row["policy"],
        "seed": row["seed"],
        "num_prompts": row["requests"],
        "request_rate": "inf" if closed else row["arrival_rate"],
        "burstiness": 1.0 if (not closed and traffic_kind == "poisson") else None,
        "max_concurrency": int(row["concurrency"]) if closed else None,
        "duration": window,
        "completed": done,
        "total_input_tokens": counts.get("input_tokens"),
        "total_output_tokens": counts.get("output_tokens"),
        "request_throughput": done / window if window > 0 else None,
        "output_throughput": out_tokens,
        "total_token_throughput": out_tokens + counts.get("input_tokens", 0) / window if window > 0 else None,
        "num_drafts": counts.get("drafts"),
        "num_draft_tokens": counts.get("draft_tokens"),
        "num_accepted_tokens": counts.get("accepted"),
    }
    for name, (mean, p50, p90, p99) in LATENCIES.items():
        for label, col in (("mean", mean), ("median", p50), ("p90", p90), ("p99", p99)):
            v = row.get(col)
            doc[f"{label}_{name}_ms"] = None if v is None or _isnan(v) else float(v) * 1e3
    return doc


def _isnan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def write_bench_results(out: Path, runs: pd.DataFrame, scenario: str, traffic_kind: str | None) -> Path:
    """``out/vllm-bench/<system>/closed-<N>-seed<S>.json`` per closed-loop run (a folder ``hw-profile calibrate``
    reads) and ``out/vllm-bench/open/<system>-seed<S>.json`` per open-loop run. Returns the folder."""
    root = out / "vllm-bench"
    for row in runs.to_dict("records"):
        doc = bench_result(row, scenario, traffic_kind)
        name = str(row["policy"]).replace("/", "_").replace(":", "_")  # a plug-in policy's module:Class
        if doc["max_concurrency"] is not None:
            path = root / name / f"closed-{doc['max_concurrency']}-seed{int(row['seed'])}.json"
        else:
            path = root / "open" / f"{name}-seed{int(row['seed'])}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(plain(doc), indent=2, allow_nan=False) + "\n")
    return root
