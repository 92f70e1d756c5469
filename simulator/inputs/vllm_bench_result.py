"""A ``vllm bench serve --save-result`` JSON read for its settings, so that ``simulate bench`` replays the benchmark
that produced it, each request with the run's mean input and output lengths (``total_input_tokens`` and
``total_output_tokens`` over ``completed``; the result does not record the dataset's length spread, which a note
says): ``num_prompts`` requests sent as a Poisson stream at ``request_rate`` (``burstiness`` 1, the tool's
default), or, at an unlimited rate, the finite list of ``num_prompts`` sent at most ``max_concurrency`` at a time
(all at once without a cap). A cap on a finite rate and bursty (gamma) arrivals are refused, each in one line
naming the field."""

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
    prompts = _number(path, doc, "num_prompts")
    done = _number(path, doc, "completed")
    prompt = _number(path, doc, "total_input_tokens") / done
    output = _number(path, doc, "total_output_tokens") / done
    notes = [f"prompt and output lengths fixed at the run's means ({prompt:.0f} and {output:.0f} tokens): the result "
             "does not record their spread"]
    workload = {"mix": {"chat": 1.0}, "prompt": {"dist": "fixed", "value": max(1, round(prompt))},
                "output": {"dist": "fixed", "value": max(1, round(output))}}
    cap, rate = doc.get("max_concurrency"), doc["request_rate"]
    if isinstance(rate, str) and rate.lower() in ("inf", "infinity"):  # a finite list, as fast as the cap lets it
        if not prompts.is_integer():
            raise UserError(f"{path}: num_prompts: expected a whole number, got {doc['num_prompts']!r}")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise UserError(f"{path}: max_concurrency: expected a positive whole number or null, got {cap!r}")
        at_once = int(prompts) if cap is None else min(cap, int(prompts))
        return BenchProfile(path, [], workload, notes, prompt_list=(int(prompts), at_once))
    if cap is not None:
        raise UserError(f"{path}: max_concurrency: {cap!r} with request_rate {rate!r}: a concurrency cap on a finite "
                        "rate is not supported; replay the rate alone, or the cap at request_rate inf")
    rate = _number(path, doc, "request_rate")
    burst = doc.get("burstiness", 1.0)
    if burst is not None and burst != 1.0:
        raise UserError(f"{path}: burstiness: {burst!r}: only Poisson arrivals (1.0) are supported")
    return BenchProfile(path, [(prompts / rate, rate)], workload, notes)
