"""A benchmark's profile as scenario sections: kubernetes-sigs/inference-perf profiles (YAML, or the JSON it also
reads), so that ``simulate bench`` replays the benchmark a planner ran (docs/benchmarks.md).

What is read, and what it becomes:

- ``load.type: constant`` with ``load.stages: [{rate, duration}]``: ``traffic`` of kind poisson, one segment per
  stage, ``repeat: false`` (sending stops after the last stage) and ``exact_counts: true`` (round(rate x duration)
  requests per stage, exponential gaps scaled to span it: inference-perf's constant timer is that exponential-gap
  timer, not evenly spaced requests). ``load.type: poisson`` is the same but ``exact_counts: false``: its timer
  draws a Poisson count each second, so a stage's count is itself Poisson, as in a Poisson stream (a note says
  that within each second the replay's arrivals are a Poisson stream's, not the timer's scaled gaps). Other load
  types (concurrent, trace replay) and ``load.sweep`` are refused, naming the field.
- ``data.type: shared_prefix``: ``data.shared_prefix.{num_unique_system_prompts | num_groups, system_prompt_len,
  question_len, output_len, num_users_per_system_prompt | num_prompts_per_group}`` becomes a fixed prompt of
  system + question tokens, a fixed output of ``output_len`` tokens and ``workload.shared_prefix {tokens:
  system_prompt_len, groups: num_unique_system_prompts, prompts_per_group: num_prompts_per_group}``: inference-perf
  generates that many whole prompts per group once and cycles its requests through them in one shuffled order, so
  a serving engine's prefix cache serves a repeated prompt whole. ``question_distribution`` /
  ``output_distribution`` replace the fixed lengths where they are given (each prompt is then drawn anew, and the
  pool is not modelled: a note says so).
- ``data.type: random`` or ``synthetic``: ``data.input_distribution`` and ``data.output_distribution``
  (``{min, max, mean, std_dev, type}``, inference-perf's own names) become length specs where the scenario has
  their equivalent: a fixed length (``type: fixed``, ``std_dev: 0`` or ``min == max``) or ``type: uniform``. Its
  default, a normal distribution clipped to [min, max], has no scenario equivalent yet and is refused.
- ``server.ignore_eos``: the benchmark forced every output to its drawn length; without it the lengths are upper
  bounds, and a note says so.

Settings of the client alone (api, report, storage, tokenizer, metrics, workers, timeouts, seeds) do not change
what the server sees and are skipped. Any other field stops with one line naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import UserError
from simulator.inputs.config import read_yaml

#: sections of a profile that configure only the client; skipped as a whole
CLIENT_SECTIONS = ("api", "report", "storage", "tokenizer", "metrics", "circuit_breakers")
#: load fields of the client alone (worker pool, pacing, retries, seeds)
LOAD_CLIENT = ("interval", "num_workers", "worker_max_concurrency", "worker_max_tcp_connections", "request_timeout",
               "request_retries", "request_retry_backoff_sec", "base_seed", "circuit_breakers")
SERVER_FIELDS = ("type", "model_name", "base_url", "api_key", "cert_path", "key_path", "ignore_eos")
LOAD_TYPES = ("constant", "poisson")
DATA_TYPES = ("shared_prefix", "random", "synthetic")
#: a distribution's fields (total_count sizes inference-perf's prompt pool, not the load)
DIST_FIELDS = ("min", "max", "mean", "std_dev", "total_count", "type")


@dataclass
class BenchProfile:
    """A benchmark profile read into scenario sections."""

    path: Path
    stages: list[tuple[float, float]]  # (duration seconds, requests per second), in order; none for a finite list
    workload: dict
    notes: list[str] = field(default_factory=list)  # what the replay does not model, one line each
    # a client's finite prompt list instead of stages: (prompts, at most this many at a time), all ready at once
    prompt_list: tuple[int, int] | None = None
    # each stage sends exactly round(rate x duration) requests (inference-perf's constant timer); false: a Poisson
    # count (its poisson timer)
    exact_counts: bool = True

    @property
    def send_seconds(self) -> float:
        return float(sum(d for d, _ in self.stages))

    @property
    def traffic(self) -> dict:
        return {"kind": "poisson", "segments": [{"duration_s": d, "rate": r} for d, r in self.stages],
                "repeat": False, "exact_counts": self.exact_counts}


class _Reader:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, what: str) -> UserError:
        return UserError(f"{self.path}: {where}: {what}")

    def mapping(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping, got {value!r}")
        return {k: v for k, v in value.items() if v is not None}  # a dumped config writes unset fields as null

    def known(self, doc: dict, where: str, allowed: tuple[str, ...]) -> None:
        for key in doc:
            if key not in allowed:
                raise self.fail(f"{where}.{key}" if where else str(key),
                                f"unknown or unsupported field; expected one of {', '.join(allowed)}")

    def number(self, doc: dict, key: str, where: str, positive: bool = True, integer: bool = False) -> float:
        if key not in doc:
            raise self.fail(f"{where}.{key}", "required field is missing")
        v = doc[key]
        kind = int if integer else (int, float)
        if isinstance(v, bool) or not isinstance(v, kind):
            raise self.fail(f"{where}.{key}", f"expected {'an integer' if integer else 'a number'}, got {v!r}")
        if v < 0 or (positive and v == 0):
            raise self.fail(f"{where}.{key}", f"expected a {'positive' if positive else 'non-negative'} number, "
                                              f"got {v!r}")
        return v

    def length(self, doc: dict, where: str) -> dict:
        """An inference-perf distribution as a scenario length spec (fixed or uniform), else an error."""
        d = self.mapping(doc, where)
        self.known(d, where, DIST_FIELDS)
        kind = d.get("type", "normal")
        if kind not in ("normal", "lognormal", "uniform", "fixed"):
            raise self.fail(f"{where}.type", f"expected normal, lognormal, uniform or fixed, got {kind!r}")
        if kind == "fixed":
            return {"dist": "fixed", "value": max(1, int(self.number(d, "mean", where)))}
        low = int(self.number(d, "min", where, integer=True))
        high = int(self.number(d, "max", where, integer=True))
        if high < low:
            raise self.fail(f"{where}.max", f"expected at least min ({low}), got {high}")
        if low == high:
            return {"dist": "fixed", "value": low}
        if kind == "uniform":
            return {"dist": "uniform", "low": low, "high": high}
        if kind == "normal" and self.number(d, "std_dev", where, positive=False) == 0:
            mean = self.number(d, "mean", where)
            return {"dist": "fixed", "value": int(min(max(round(mean), low), high))}
        raise self.fail(where, f"a {kind} distribution of lengths between {low} and {high} has no scenario "
                               "equivalent yet; supported: type fixed, type uniform, std_dev 0 or min == max")


def read_profile(path: str | Path) -> BenchProfile:
    """An inference-perf profile (YAML or JSON) as scenario sections; one-line UserErrors naming the field."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: benchmark profile not found")
    doc = read_yaml(path, "YAML or JSON")
    r = _Reader(path)
    if not isinstance(doc, dict) or "load" not in doc or "data" not in doc:
        raise UserError(f"{path}: expected an inference-perf profile (a mapping with 'load' and 'data' sections)")
    doc = r.mapping(doc, "(top level)")
    r.known(doc, "", ("load", "data", "server", *CLIENT_SECTIONS))
    notes: list[str] = []
    load = r.mapping(doc["load"], "load")
    stages = _stages(r, load, notes)
    workload = _workload(r, r.mapping(doc["data"], "data"), notes)
    server = r.mapping(doc.get("server", {}), "server")
    r.known(server, "server", SERVER_FIELDS)
    if server.get("ignore_eos") is not True:
        notes.append("server.ignore_eos is not true: the benchmark's outputs could end early at an end token; the "
                     "replay generates every output to its full length (an upper bound)")
    return BenchProfile(path, stages, workload, notes, exact_counts=load["type"] == "constant")


def _stages(r: _Reader, load: dict, notes: list[str]) -> list[tuple[float, float]]:
    r.known(load, "load", ("type", "stages", "sweep", "lora_traffic_split", "trace", *LOAD_CLIENT))
    kind = load.get("type")
    if kind not in LOAD_TYPES:
        raise r.fail("load.type", f"{kind!r} is not supported; supported: constant (rate stages, exponential gaps "
                                  "scaled to each stage's exact count) and poisson (rate stages, a Poisson count)")
    if kind == "poisson":
        notes.append("load.type poisson: each stage's request count is Poisson, as the benchmark's; within a second "
                     "the benchmark spaces that second's requests by scaled exponential gaps, the replay by a "
                     "Poisson stream's")
    for key, what in (("sweep", "a rate sweep chosen at run time; give the stages it chose as load.stages"),
                      ("lora_traffic_split", "LoRA adapters are not modelled"),
                      ("trace", "trace replay: use a scenario with traffic kind trace")):
        if key in load:
            raise r.fail(f"load.{key}", f"not supported ({what})")
    raw = load.get("stages")
    if not isinstance(raw, list) or not raw:
        raise r.fail("load.stages", "expected a non-empty list of {rate, duration}")
    stages = []
    for i, s in enumerate(raw):
        where = f"load.stages[{i}]"
        s = r.mapping(s, where)
        r.known(s, where, ("rate", "duration"))
        stages.append((float(r.number(s, "duration", where)), float(r.number(s, "rate", where, positive=False))))
    if not any(rate > 0 for _, rate in stages):
        raise r.fail("load.stages", "every stage has rate 0; expected at least one stage that sends requests")
    if "request_timeout" in load:
        notes.append(f"load.request_timeout {load['request_timeout']} s: requests are not timed out; a request "
                     "still unfinished at the end of the drain allowance counts as unfinished instead")
    return stages


def _workload(r: _Reader, data: dict, notes: list[str]) -> dict:
    kind = data.get("type")
    if kind not in DATA_TYPES:
        raise r.fail("data.type", f"{kind!r} is not supported; supported: {', '.join(DATA_TYPES)}")
    wl: dict[str, Any] = {"mix": {"chat": 1.0}}
    if kind == "shared_prefix":
        r.known(data, "data", ("type", "shared_prefix"))
        if "shared_prefix" not in data:
            raise r.fail("data.shared_prefix", "required field is missing (data.type is shared_prefix)")
        where = "data.shared_prefix"
        sp = r.mapping(data["shared_prefix"], where)
        r.known(sp, where, ("num_unique_system_prompts", "num_groups", "num_users_per_system_prompt",
                            "num_prompts_per_group", "system_prompt_len", "question_len", "output_len",
                            "question_distribution", "output_distribution", "enable_multi_turn_chat",
                            "max_model_len"))
        groups_key = "num_unique_system_prompts" if "num_unique_system_prompts" in sp else "num_groups"
        groups = int(r.number(sp, groups_key, where, integer=True))
        system = int(r.number(sp, "system_prompt_len", where, integer=True))
        if "question_distribution" in sp:
            question = r.length(sp["question_distribution"], f"{where}.question_distribution")
        else:
            question = {"dist": "fixed", "value": int(r.number(sp, "question_len", where, integer=True))}
        wl["prompt"] = _shifted(question, system)
        wl["output"] = (r.length(sp["output_distribution"], f"{where}.output_distribution")
                        if "output_distribution" in sp
                        else {"dist": "fixed", "value": int(r.number(sp, "output_len", where, integer=True))})
        wl["shared_prefix"] = {"tokens": system, "groups": groups}
        pool_key = "num_prompts_per_group" if "num_prompts_per_group" in sp else "num_users_per_system_prompt"
        if pool_key in sp:
            per_group = int(r.number(sp, pool_key, where, integer=True))
            if wl["prompt"]["dist"] == "fixed":
                wl["shared_prefix"]["prompts_per_group"] = per_group
            else:
                notes.append(f"{where}.{pool_key}: the benchmark cycles through {groups * per_group} prompts, which a "
                             "prefix cache serves whole once seen; with distributed question lengths the replay draws "
                             "each prompt anew and shares only the system prompt")
        if sp.get("enable_multi_turn_chat") is True:
            notes.append("data.shared_prefix.enable_multi_turn_chat: each request is modelled as its system prompt "
                         "plus one question; a conversation's growing history is not")
    else:
        r.known(data, "data", ("type", "input_distribution", "output_distribution", "path"))
        if "path" in data:
            raise r.fail("data.path", "prompts read from a dataset are not supported; give input_distribution")
        for key in ("input_distribution", "output_distribution"):
            if key not in data:
                raise r.fail(f"data.{key}", f"required field is missing (data.type is {kind})")
        wl["prompt"] = r.length(data["input_distribution"], "data.input_distribution")
        wl["output"] = r.length(data["output_distribution"], "data.output_distribution")
    return wl


def _shifted(spec: dict, tokens: int) -> dict:
    """A length spec ``tokens`` longer (a question after a system prompt)."""
    if spec["dist"] == "fixed":
        return {"dist": "fixed", "value": spec["value"] + tokens}
    return {**spec, "low": spec["low"] + tokens, "high": spec["high"] + tokens}


# simulated seconds a replayed prompt list may take: a closed loop cannot overload, so it ends long before
LIST_CAP_S = 86_400.0


def bench_scenario(profile: BenchProfile, table: str, *, gpus_per_replica: int = 1, replicas: int = 1,
                   max_running: int = 128, max_batch_tokens: int = 2048, kv_capacity_tokens: int | None = None,
                   seed: int = 0, drain_s: float = 120.0) -> dict:
    """The scenario (a mapping, as YAML has it) that replays ``profile``: plain decoding (system ``ar``), vLLM's
    engine shape (mixed steps with chunked prefill of up to ``max_batch_tokens`` per step, prefill colocated),
    the whole benchmark as the measurement window (no warm-up: a benchmark reports every request), and
    ``drain_s`` after the last stage to follow its requests to their end. A profile's finite prompt list (a
    closed-loop ``vllm bench serve`` result) is one frontier point instead, run until its last request finishes."""
    engine: dict[str, Any] = {"max_running": max_running, "max_batch_tokens": max_batch_tokens,
                              "prefill_chunk": max_batch_tokens, "schedule": "mixed", "prefill": "colocated"}
    if kv_capacity_tokens is not None:
        engine["kv_capacity_tokens"] = kv_capacity_tokens
    doc = {
        "name": profile.path.stem,
        "description": f"replay of the benchmark {profile.path.name} (simulate bench)",
        "seed": seed,
        "hardware": {"table": table, "replicas": replicas, "gpus_per_replica": gpus_per_replica},
        "engine": engine,
        "systems": ["ar"],
        "workload": profile.workload,
    }
    if profile.prompt_list is not None:  # one frontier point: the list, run to its last request
        prompts, at_once = profile.prompt_list
        return {**doc, "frontier": {"concurrency": [at_once], "requests": [prompts]},
                "run": {"duration_s": LIST_CAP_S, "warmup_s": 0.0}}
    return {**doc, "traffic": profile.traffic,
            "run": {"duration_s": profile.send_seconds, "warmup_s": 0.0, "drain_cap_s": float(drain_s)}}
