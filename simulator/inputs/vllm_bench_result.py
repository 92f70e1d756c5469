"""A ``vllm bench serve --save-result`` JSON read for its settings, so that ``simulate bench`` replays the benchmark
that produced it: ``num_prompts`` requests sent as a Poisson stream at ``request_rate`` (``burstiness`` 1, the
tool's default), each with the run's mean input and output lengths (``total_input_tokens`` and
``total_output_tokens`` over ``completed``; the result does not record the dataset's length spread, which a note
says). Closed-loop runs (``max_concurrency``), an unlimited rate and bursty (gamma) arrivals are refused, each in
one line naming the field."""

from __future__ import annotations

import math
from pathlib import Path

from simulator.errors import UserError
from simulator.inputs.config import read_yaml
from simulator.inputs.inference_perf import BenchProfile

#: the fields that say a JSON document is a ``vllm bench serve`` result
SIGNATURE = ("num_prompts", "request_rate", "completed")


def is_vllm_bench_result(doc: object) -> bool:
    return isinstance(doc, dict) and all(k in doc for k in SIGNATURE)


def _number(path: Path, doc: dict, key: str, positive: bool = True) -> float:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or (positive and v <= 0):
        raise UserError(f"{path}: {key}: expected a {'positive ' if positive else ''}number, got {v!r}")
    return float(v)


def read_vllm_result(path: str | Path) -> BenchProfile:
    """The benchmark behind a ``vllm bench serve`` result, as ``simulate bench`` replays it."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: vllm bench serve result not found")
    doc = read_yaml(path, "JSON")
    if not is_vllm_bench_result(doc):
        raise UserError(f"{path}: expected a `vllm bench serve --save-result` JSON (fields {', '.join(SIGNATURE)})")
    if doc.get("max_concurrency") is not None:
        raise UserError(f"{path}: max_concurrency: {doc['max_concurrency']!r}: a closed-loop benchmark is not "
                        "supported; replay an open-loop one (--request-rate), or sweep concurrency with a scenario's "
                        "frontier")
    rate = doc["request_rate"]
    if isinstance(rate, str) and rate.lower() in ("inf", "infinity"):
        raise UserError(f"{path}: request_rate: inf (every request at once) is not supported; expected a finite rate")
    rate = _number(path, doc, "request_rate")
    burst = doc.get("burstiness", 1.0)
    if burst is not None and burst != 1.0:
        raise UserError(f"{path}: burstiness: {burst!r}: only Poisson arrivals (1.0) are supported")
    prompts = _number(path, doc, "num_prompts")
    done = _number(path, doc, "completed")
    prompt = _number(path, doc, "total_input_tokens") / done
    output = _number(path, doc, "total_output_tokens") / done
    notes = [f"prompt and output lengths fixed at the run's means ({prompt:.0f} and {output:.0f} tokens): the result "
             "does not record their spread"]
    workload = {"mix": {"chat": 1.0}, "prompt": {"dist": "fixed", "value": max(1, round(prompt))},
                "output": {"dist": "fixed", "value": max(1, round(output))}}
    return BenchProfile(path, [(prompts / rate, rate)], workload, notes)
