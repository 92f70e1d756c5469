"""Scenario files: the schema, validation with one-line errors, and command-line overrides.

A scenario is YAML. Every field is validated on load; unknown keys are errors; a wrong or missing field stops with
one line that names the file, the field path and what was expected. ``--set dotted.path=value`` (value parsed as
YAML; list items by index, e.g. ``systems.0.gamma=5``) overrides fields before validation; ``--set
dotted.path+=value`` appends to a list (``systems+=oracle``: one more system without retyping the list, its
baseline kept). Paths inside a scenario (tables, traces, profiles) are relative to the scenario file; a relative
path given with ``--set`` is relative to the working directory, as any path typed on the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from simulator.core.drafters import DRAFTER_KINDS
from simulator.core.plugins import did_you_mean
from simulator.errors import UserError
from simulator.inputs.library import find_builtin_scenario, library_dir

DRAFTERS = tuple(DRAFTER_KINDS)  # declared once, with their shapes, in simulator/core/drafters.py
DrafterName = Literal[DRAFTERS]  # type: ignore[valid-type]


class Strict(BaseModel):
    # strict: a quoted number ("60") is a string, not silently a number
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class FieldError(ValueError):
    """A model validator's complaint about one of its model's fields (a dotted path below the model): the one-line
    error names ``<model's path>.<field>`` (format_validation_error)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


# --- lengths -----------------------------------------------------------------------------------------------------

class FixedLength(Strict):
    dist: Literal["fixed"] = "fixed"
    value: PositiveInt = Field(description="every request has this many tokens")


class UniformLength(Strict):
    dist: Literal["uniform"]
    low: PositiveInt
    high: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError("high must be >= low")
        return self


class LognormalLength(Strict):
    dist: Literal["lognormal"]
    median: PositiveFloat
    sigma: PositiveFloat = Field(description="standard deviation of log length")
    max: PositiveInt | None = Field(None, description="lengths above are clipped")


class EmpiricalLength(Strict):
    dist: Literal["empirical"]
    trace: str = Field(description="Azure-format CSV (TIMESTAMP,ContextTokens,GeneratedTokens) to sample from")
    column: Literal["ContextTokens", "GeneratedTokens"]
    max: PositiveInt | None = None


class RecordedLength(Strict):
    dist: Literal["recorded"]
    trace: str = Field(description="a live run's acceptance trace (simulate --records): the real output lengths of "
                                   "the requests that finished in it")
    max: PositiveInt | None = None


Length = Annotated[FixedLength | UniformLength | LognormalLength | EmpiricalLength | RecordedLength,
                   Field(discriminator="dist")]


def _length_shorthand(v: Any) -> Any:
    return {"dist": "fixed", "value": v} if isinstance(v, int) and not isinstance(v, bool) else v


# --- blocks ------------------------------------------------------------------------------------------------------

class Hardware(Strict):
    table: str = Field(description="step-time table T(B, K) of the target, CSV (see hw_profile)")
    policy_table: str | None = Field(None, description="a (smoothed) copy the policy sees; the clock uses `table`")
    drafter_tables: dict[str, str] = Field(default_factory=dict, description="drafter -> cost table; defaults from the table's sidecar")
    replicas: PositiveInt = 1
    gpus_per_replica: PositiveInt = Field(1, description="GPUs of one replica (its TP/EP size)")
    router: str = Field("least-loaded", description="'least-loaded', 'round-robin', a plug-in's entry-point name, "
                        "or package.module:Class (simulator/core/engine_rules.py)")
    clock: Literal["table", "live"] = Field(
        "table", description="step time: from `table` (simulated hardware), or the measured time of a live source's forwards")
    prefill_replicas: PositiveInt | None = Field(
        None, description="engine.prefill disaggregated: replicas of the prefill pool (default: unbounded)")
    prefill_table: str | None = Field(None, description="step-time table of a prefill replica (default: `table`)")
    prefill_gpus_per_replica: PositiveInt | None = Field(None, description="GPUs of one prefill replica (default: gpus_per_replica)")

    @field_validator("drafter_tables")
    @classmethod
    def _known(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if k not in DRAFTERS or k == "none":
                raise ValueError(f"unknown drafter {k!r}; expected one of {', '.join(DRAFTERS[1:])}")
        return v


class Engine(Strict):
    max_running: PositiveInt = Field(256, description="max requests in the running batch of one replica")
    max_batch_tokens: PositiveInt = Field(8192, description="max tokens in one forward (decode + prefill)")
    kv_capacity_tokens: PositiveInt | None = Field(
        None, description="KV cache per replica, tokens; default: as the engine sizes it from gpu_memory_utilization "
        "and the table's memory facts (simulator/inputs/hardware.py)")
    request_ms: NonNegativeFloat | None = Field(
        None, description="ms a request spends outside the forwards (API server, tokenisation, first streamed "
        "token), added to TTFT and E2E; default: the table's engine cost (an estimate's request_ms), else 0")
    schedule_ahead: bool | None = Field(
        None, description="the engine schedules each step while the previous one runs (vLLM's asynchronous "
        "scheduling, SGLang's overlap scheduler), so a new request joins two steps later; default: the table's "
        "engine costs (an estimate's overlap_schedule), else false")
    speculative_max_running: PositiveInt | None = Field(
        None, description="max requests in the running batch of one replica while a system speculates (SGLang's "
        "--max-running-requests under its EAGLE/MTP worker); default: the cap the engine sets itself in speculative "
        "mode as the table's sidecar records it (SGLang: 48 over the data-parallel ranks; vLLM: none), never above "
        "max_running")
    gpu_memory_utilization: float = Field(
        0.9, gt=0.0, le=1.0, description="vLLM's pool: share of each GPU's memory the engine may take (vLLM's "
        "--gpu-memory-utilization, default 0.9): KV tokens = (this x GPU memory - weights - activation peak - "
        "CUDA graphs and runtime) / KV bytes per token")
    pool: Literal["vllm", "sglang"] | None = Field(
        None, description="whose rule sizes the KV pool (hw_profile/tables/kv_pool.py): 'vllm' "
        "(gpu_memory_utilization) or 'sglang' (mem_fraction_static); default: the engine the table was estimated "
        "for, else vllm")
    mem_fraction_static: float | None = Field(
        None, gt=0.0, le=1.0, description="SGLang's pool: share of the memory free at start-up held for weights and "
        "the KV pool (SGLang's --mem-fraction-static); default: SGLang's own rule from the GPU's memory and the "
        "parallelism")
    prefill_chunk: PositiveInt = Field(
        2048, description="schedule mixed: max prompt tokens of one request per step (chunked prefill)")
    schedule: Literal["mixed", "prefill-first"] = Field(
        "mixed", description="mixed: prompt chunks ride in decode steps (vLLM, TensorRT-LLM); prefill-first: waiting "
        "prompts run in prefill-only steps of up to max_batch_tokens while decode waits (SGLang)")
    prefill: Literal["colocated", "disaggregated"] = Field(
        "colocated", description="disaggregated: a separate prefill pool (not counted) sends the KV and first token")
    sched_stall_ms: NonNegativeFloat = Field(0.3, description="stall of policies that need this step's confidences before verify")
    admission: str = Field("fcfs", description="which waiting requests join the batch: 'fcfs' (oldest first, no "
                           "overtaking), a plug-in's entry-point name, or package.module:Class")
    preemption: str = Field("newest", description="which request is evicted when the KV cache overflows: 'newest' "
                            "(recompute the most recently admitted), a plug-in's name, or package.module:Class")
    prefix_cache: bool = Field(
        True, description="keep computed shared prompt prefixes (full 16-token blocks) in the KV cache for later "
        "requests of the same prefix group, evicted least recently used when room is needed (vLLM V1 and SGLang "
        "cache prefixes by default); false: every request prefills and holds its whole prompt")


class Acceptance(Strict):
    # a plug-in source's own settings may sit beside `source` (e.g. `runtime`, `device`, `temperature` of the live
    # runtime): they join `options`; the built-in sources take none
    model_config = ConfigDict(extra="allow", frozen=True)

    source: str = Field("profile", description="'profile', 'trace', a plug-in's entry-point name, or package.module:Class")
    profile: str = "paper-qwen3-8b"
    trace: str | None = None
    confidence: Literal["calibrated", "raw"] = "calibrated"
    acceptance_length: PositiveFloat | None = Field(
        None, description="a measured mean accepted length (emitted tokens per request-step, bonus included): the "
        "profile's entry for the scenario's drafter is scaled to it (simulator/core/acceptance/scaling.py)")
    acceptance_length_at: PositiveInt | None = Field(
        None, description="draft tokens verified per step where acceptance_length was measured (default: the "
        "scenario drafter's gamma)")
    options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of a plug-in source")

    @model_validator(mode="after")
    def _source(self) -> Acceptance:
        if self.source == "trace" and not self.trace:
            raise ValueError("source 'trace' needs a 'trace' path")
        if not self.source.strip():
            raise ValueError("source must be 'profile', 'trace', an installed plug-in's name or module:Class")
        extra = sorted(self.model_extra or {})
        if extra and self.source in ("profile", "trace"):
            raise ValueError(f"unknown field {extra[0]!r} (the {self.source} source takes none)")
        return self


class DrafterDefault(Strict):
    name: DrafterName = "dspark"
    gamma: PositiveInt = Field(7, description="draft tokens a step (default 7; mtp's 1, MTP-1: mtp with gamma k is "
                               "MTP-k, k chained passes of the module)")

    @model_validator(mode="before")
    @classmethod
    def _kind_gamma(cls, data: Any) -> Any:
        # `drafter: {name: mtp}` is MTP-1, the kind's own default, not seven chained passes
        name = data.get("name") if isinstance(data, dict) else None
        kind = DRAFTER_KINDS.get(name) if isinstance(name, str) else None
        if kind is not None and kind.default_gamma is not None and "gamma" not in data:
            return {**data, "gamma": kind.default_gamma}
        return data

    @model_validator(mode="after")
    def _drafts_what_is_asked(self) -> DrafterDefault:
        fixed = DRAFTER_KINDS[self.name].fixed_gamma
        if fixed is not None and "gamma" in self.model_fields_set and self.gamma != fixed:
            raise FieldError("gamma", f"drafter {self.name!r} drafts {fixed} tokens a step; expected no gamma, got "
                             f"{self.gamma}")
        return self


class System(Strict):
    name: str | None = None
    drafter: DrafterName | None = None
    gamma: PositiveInt | None = None
    policy: str
    params: dict[str, Any] = Field(default_factory=dict)


class SharedPrefix(Strict):
    tokens: PositiveInt = Field(description="tokens of each shared prefix (a system prompt)")
    groups: PositiveInt = Field(description="distinct prefixes; each request's is drawn uniformly")
    prompts_per_group: PositiveInt | None = Field(
        None, description="a benchmark's finite prompt pool (inference-perf's num_prompts_per_group, alias "
        "num_users_per_system_prompt): each group has this many whole prompts, and requests cycle through the "
        "groups x prompts_per_group prompts in one shuffled order, so a repeated prompt is cached whole (the prompt "
        "length must be fixed); unset: every prompt is its own after the shared prefix")


def longest_prompt(spec: Any) -> int | None:
    """The most tokens a prompt spec can draw, where the spec says it (fixed, uniform, or a clipping ``max``)."""
    if isinstance(spec, FixedLength):
        return spec.value
    if isinstance(spec, UniformLength):
        return spec.high
    return getattr(spec, "max", None)


def shortest_prompt(spec: Any) -> int | None:
    """The fewest tokens a prompt spec can draw, where the spec alone says it (fixed, uniform); None for the
    others (lognormal: no positive minimum; empirical: known once its trace is read)."""
    if isinstance(spec, FixedLength):
        return spec.value
    if isinstance(spec, UniformLength):
        return spec.low
    return None


class Workload(Strict):
    mix: dict[str, PositiveFloat] = Field(default_factory=lambda: {"math": 1.0, "code": 1.0, "chat": 1.0},
                                          description="domain or benchmark -> weight")
    prompt: Length = Field(default_factory=lambda: FixedLength(value=512))
    output: Length = Field(default_factory=lambda: FixedLength(value=256))
    shared_prefix: SharedPrefix | None = Field(
        None, description="every prompt starts with one of `groups` shared prefixes of `tokens` tokens (a system "
        "prompt), then its own tokens; a drawn prompt no longer than the prefix is lengthened to tokens + 1")

    @model_validator(mode="after")
    def _prefix_fits(self) -> Workload:
        sp = self.shared_prefix
        low = shortest_prompt(self.prompt)
        if sp is not None and low is not None and sp.tokens >= low:
            raise FieldError("shared_prefix.tokens", f"{sp.tokens} tokens do not fit in the shortest prompt "
                             f"({low} tokens, workload.prompt); expected fewer than {low}, so that every prompt has "
                             "tokens of its own after the shared prefix")
        if sp is not None and sp.prompts_per_group is not None and not isinstance(self.prompt, FixedLength):
            raise FieldError("shared_prefix.prompts_per_group", "a pool of repeated prompts needs a fixed prompt "
                             f"length (workload.prompt dist fixed), got dist {self.prompt.dist!r}")
        return self

    @field_validator("prompt", "output", mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return _length_shorthand(v)

    @field_validator("prompt")
    @classmethod
    def _not_recorded(cls, v: Any) -> Any:
        if isinstance(v, RecordedLength):
            raise ValueError("dist 'recorded' gives output lengths (a live trace records no prompt lengths)")
        return v

    @field_validator("mix")
    @classmethod
    def _nonempty(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            raise ValueError("mix needs at least one entry")
        return v


class Frontier(Strict):
    concurrency: list[PositiveInt] = Field(min_length=1, description="closed-loop users (whole deployment), one run each")
    requests: list[PositiveInt] | None = Field(
        None, description="a finite prompt list per point, as a benchmark client sends one (vllm bench serve "
        "--num-prompts N --max-concurrency C): one count per concurrency point, none smaller than it. Such a point "
        "runs until its last request finishes (run.duration_s caps it) and is measured from the first request to "
        "the last, ramp-up and drain included (docs/model.md)")

    @model_validator(mode="after")
    def _lists_fit(self) -> Frontier:
        if self.requests is None:
            return self
        if len(self.requests) != len(self.concurrency):
            raise ValueError(f"requests: one count per concurrency point ({len(self.concurrency)}), got "
                             f"{len(self.requests)}")
        for c, n in zip(self.concurrency, self.requests, strict=True):
            if n < c:
                raise ValueError(f"requests: {n} prompts at concurrency {c}: a list no shorter than its concurrency")
        return self


class Segment(Strict):
    duration_s: PositiveFloat
    rate: NonNegativeFloat = Field(description="mean arrivals per second")


class Traffic(Strict):
    kind: Literal["poisson", "trace"]
    # positive: at 0 nothing arrives, the open-loop run measures nothing and a plan has nothing to size
    rate: PositiveFloat | None = Field(None, description="poisson: constant arrivals per second")
    segments: list[Segment] | None = Field(None, description="poisson: piecewise-constant rate (a tide), repeated to fill the run")
    repeat: bool = Field(True, description="poisson: segments repeat to fill the run; false: arrivals stop at the end "
                                           "of the last segment (a benchmark's stages)")
    exact_counts: bool = Field(False, description="poisson: each segment sends exactly round(rate x duration) "
                                                  "requests, exponential gaps scaled to span it (inference-perf)")
    time_scale: PositiveFloat = Field(1.0, description="segments run this many times faster (a 24 h tide in minutes)")
    trace: str | None = Field(None, description="trace: Azure-format CSV to replay")
    rate_scale: PositiveFloat = Field(1.0, description="trace: replay at this multiple of the recorded arrival rate")
    start_s: NonNegativeFloat = Field(0.0, description="trace: skip this much of the recording")
    lengths_from_trace: bool = Field(True, description="trace: prompt and output lengths from the trace")

    @model_validator(mode="after")
    def _consistent(self) -> Traffic:
        if self.kind == "poisson" and (self.rate is None) == (self.segments is None):
            raise ValueError("poisson traffic needs exactly one of 'rate' or 'segments'")
        if self.kind == "trace" and not self.trace:
            raise ValueError("trace traffic needs a 'trace' path")
        if self.kind == "trace" and (not self.repeat or self.exact_counts):
            raise FieldError("repeat" if not self.repeat else "exact_counts",
                             "applies to poisson traffic; a replayed trace has its own arrivals")
        return self


class Run(Strict):
    duration_s: PositiveFloat = Field(300.0, description="simulated seconds per run")
    warmup_s: NonNegativeFloat = Field(30.0, description="excluded from the metrics (at least; longer when the "
                                                         "run detects that its state settles later)")
    quick_duration_s: PositiveFloat = Field(20.0, description="--quick: simulated seconds per run")
    quick_warmup_s: NonNegativeFloat = 4.0
    drain_cap_s: NonNegativeFloat = Field(60.0, description="after the window, follow its requests to completion "
                                                            "for at most this long (the rest count as unfinished)")
    quick_drain_cap_s: NonNegativeFloat = 10.0
    replicates: PositiveInt = Field(1, description="seeds per load point")

    @model_validator(mode="after")
    def _warm(self) -> Run:
        if self.warmup_s >= self.duration_s:
            raise ValueError("warmup_s must be shorter than duration_s")
        if self.quick_warmup_s >= self.quick_duration_s:
            raise ValueError("quick_warmup_s must be shorter than quick_duration_s")
        return self


# Plausible ranges of SLA figures: a per-user speed under 1 tok/s or a TTFT limit over a minute is far more often a
# unit slip (tok/s/GPU for tok/s/user, milliseconds for seconds) than a target; `force` accepts one anyway.
MIN_TPS_PER_USER = 1.0  # tok/s/user
MAX_TTFT_S = 60.0  # seconds


class SLA(Strict):
    tps_targets: list[PositiveFloat] = Field(min_length=1, description="tokens/s/user; the first is the one sla_attainment uses")
    baseline: str | None = Field(None, description="system the gains are measured against (default: mtp-1 if present)")
    force: bool = Field(False, description=f"accept tps_targets under {MIN_TPS_PER_USER:g} tok/s/user (refused "
                                           "otherwise, as a likely unit slip)")

    @model_validator(mode="after")
    def _plausible(self) -> SLA:
        low = [t for t in self.tps_targets if t < MIN_TPS_PER_USER]
        if low and not self.force:
            i = self.tps_targets.index(low[0])
            raise FieldError(f"tps_targets[{i}]", f"expected a per-user speed of at least {MIN_TPS_PER_USER:g} "
                             f"tok/s/user, got {low[0]:g} tok/s/user (set sla.force: true to keep it)")
        return self


class Scenario(Strict):
    name: str | None = None
    description: str = ""
    seed: int = 0
    hardware: Hardware
    engine: Engine = Field(default_factory=Engine)
    acceptance: Acceptance = Field(default_factory=Acceptance)
    drafter: DrafterDefault = Field(default_factory=DrafterDefault, description="default drafter of systems that name none")
    systems: list[str | System] = Field(min_length=1)
    workload: Workload = Field(default_factory=Workload)
    frontier: Frontier | None = None
    traffic: Traffic | None = None
    run: Run = Field(default_factory=Run)
    sla: SLA = Field(default_factory=lambda: SLA(tps_targets=[80.0]))

    @model_validator(mode="after")
    def _load_points(self) -> Scenario:
        if self.frontier is None and self.traffic is None:
            raise ValueError("a scenario needs a 'frontier' (closed loop), a 'traffic' (open loop) or both")
        if self.hardware.prefill_replicas is not None and self.engine.prefill != "disaggregated":
            raise ValueError("hardware.prefill_replicas sizes a disaggregated prefill pool; set engine.prefill: disaggregated")
        if self.hardware.prefill_table is not None and self.engine.prefill != "disaggregated":
            raise ValueError("hardware.prefill_table prices a disaggregated prefill pool; set engine.prefill: disaggregated")
        self._acceptance_length()
        return self

    def _acceptance_length(self) -> None:
        acc = self.acceptance
        if acc.acceptance_length is None:
            if acc.acceptance_length_at is not None:
                raise FieldError("acceptance.acceptance_length_at", "says where acceptance.acceptance_length was "
                                 "measured; set acceptance_length too")
            return
        if acc.source != "profile":
            raise FieldError("acceptance.acceptance_length", f"scales an acceptance profile; source {acc.source!r} "
                             "takes none (use source: profile)")
        at = acceptance_length_at(self)
        if not 1.0 < acc.acceptance_length < 1.0 + at:
            raise FieldError("acceptance.acceptance_length", f"expected a length above 1 and below {1 + at} (one "
                             f"target token plus at most the {at} drafts verified per step, acceptance_length_at or "
                             f"the drafter's gamma), got {acc.acceptance_length:g}")


def acceptance_length_at(scenario: Scenario) -> int:
    """Drafts verified per step where ``acceptance.acceptance_length`` was measured: its ``acceptance_length_at``,
    else the scenario drafter's gamma (MTP's default 1)."""
    fixed = DRAFTER_KINDS[scenario.drafter.name].fixed_gamma
    given = scenario.acceptance.acceptance_length_at
    return int(given if given is not None else (fixed if fixed is not None else scenario.drafter.gamma))


def unused_settings(scenario: Scenario) -> list[str]:
    """Settings a `simulate` run of this scenario reads nothing from, though `simulate plan` does: one warning line
    each (the run and `check` print them)."""
    hw = scenario.hardware
    if hw.prefill_table is not None and hw.prefill_replicas is None:
        return ["hardware.prefill_table prices the replicas of a finite prefill pool (hardware.prefill_replicas, or "
                "the pools `simulate plan` sizes); this run's unbounded pool prices every prompt from hardware.table"]
    return []


# --- loading -----------------------------------------------------------------------------------------------------

class LoadedScenario:
    """A validated scenario and where it came from (for resolving relative paths)."""

    def __init__(self, model: Scenario, path: Path, overrides: list[str]):
        self.model = model
        self.path = path
        self.overrides = overrides

    @property
    def base(self) -> Path:
        return self.path.parent

    @property
    def name(self) -> str:
        return self.model.name or self.path.stem

    def resolve(self, rel: str) -> Path:
        """A path the scenario names, relative to the scenario's folder; a relative path found there falls back
        to the built-in library (``hardware/h200-qwen3-8b-bf16.csv`` works from any folder)."""
        p = Path(rel)
        if p.is_absolute():
            return p
        here = self.base / p
        if not here.exists() and (library_dir() / p).exists():
            return library_dir() / p
        return here


# Scenario fields that name a file (`*` any key of a mapping; list indices are skipped when matching)
PATH_FIELDS = ("hardware.table", "hardware.policy_table", "hardware.prefill_table", "hardware.drafter_tables.*",
               "acceptance.trace", "acceptance.profile", "traffic.trace", "workload.prompt.trace",
               "workload.output.trace")


def _path_field(keys: list[str]) -> bool:
    named = [k for k in keys if not k.isdigit()]
    return any(len(f) == len(named) and all(a in ("*", b) for a, b in zip(f, named, strict=True))
               for f in (p.split(".") for p in PATH_FIELDS))


def _from_cwd(keys: list[str], value: Any) -> Any:
    """An override's value with each relative file path in it made absolute against the working directory: a path
    typed on the command line means what the shell around it means (the scenario's own paths stay relative to
    its folder). A path not found there but in the built-in library keeps the library's meaning, and a name
    that is not a file (a built-in acceptance profile) is kept as it is."""
    if isinstance(value, dict):
        return {k: _from_cwd([*keys, str(k)], v) for k, v in value.items()}
    if not isinstance(value, str) or not _path_field(keys) or Path(value).is_absolute():
        return value
    here = Path.cwd() / value
    if here.exists():
        return str(here)
    if keys[-1] == "profile" or (library_dir() / value).exists():
        return value
    return str(here)  # missing: the error names where it was looked for


def parse_override(text: str) -> tuple[list[str], Any, bool]:
    """(field path, value, whether to append to the list there rather than replace it: ``path+=value``)."""
    if "=" not in text:
        raise UserError(f"--set {text!r}: expected dotted.path=value (or dotted.path+=value to append to a list)")
    key, _, raw = text.partition("=")
    key = key.strip()
    append = key.endswith("+")
    key = key.removesuffix("+").strip()
    if not key:
        raise UserError(f"--set {text!r}: empty field path")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise UserError(f"--set {key}: value is not valid YAML ({exc})") from None
    return key.split("."), value, append


def apply_override(doc: dict, path: list[str], value: Any, text: str, append: bool = False) -> None:
    node: Any = doc
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if last and append:
            where = ".".join(path)
            current = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, list) or not isinstance(current, list):
                raise UserError(f"--set {text}: {where}: += appends to a list, and {where} is not one")
            current.extend(value if isinstance(value, list) else [value])
            return
        if isinstance(node, list):
            try:
                idx = int(part)
                node[idx]
            except (ValueError, IndexError):
                raise UserError(f"--set {text}: {'.'.join(path[:i + 1])}: expected a list index 0..{len(node) - 1}") from None
            if last:
                node[idx] = value
            else:
                if isinstance(node[idx], str):  # a shorthand system name becomes a mapping to edit
                    node[idx] = {"policy": node[idx]}
                node = node[idx]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            raise UserError(f"--set {text}: {'.'.join(path[:i])} is a value, not a mapping")


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("fixed", "uniform", "lognormal", "empirical", "recorded", "str", "System"):
            continue  # union-member tags pydantic adds
        elif part.startswith("function-"):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The scenario models an annotation may hold (through Optional, unions, lists and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _tags(model: type[BaseModel]) -> tuple:
    dist = model.model_fields.get("dist")  # the discriminator of the length distributions
    return get_args(dist.annotation) if dist is not None else ()


def _fields_at(loc: tuple) -> list[str]:
    """The field names of the model at ``loc`` in a Scenario (pydantic's error location, union tags included)."""
    models: list[type[BaseModel]] = [Scenario]
    for part in loc:
        if isinstance(part, int):
            continue
        tagged = [m for m in models if m.__name__ == part or part in _tags(m)]
        if tagged:  # a union member pydantic names by class or discriminator tag
            models = tagged
            continue
        models = [m for model in models if part in model.model_fields
                  for m in _models_in(model.model_fields[part].annotation)]
    return [name for model in models for name in model.model_fields]


def format_validation_error(path: Path, exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    # a system given as a mapping fails both the str and the System branch; report the System one
    errors.sort(key=lambda e: 1 if (len(e["loc"]) > 2 and e["loc"][0] == "systems" and e["loc"][2] == "str") else 0)
    err = errors[0]
    msg = err["msg"]
    got = err.get("input")
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):  # a model validator naming one of its fields: name it in the path
        err = {**err, "loc": (*err["loc"], *cause.field.split("."))}
        msg = cause.message
    if err["type"] == "extra_forbidden":
        msg = "unknown field" + did_you_mean(str(err["loc"][-1]), _fields_at(err["loc"][:-1]))
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif err["type"] in ("int_type", "float_type") and isinstance(got, str) and _is_number(got):
        msg = f"expected a number, got the string {got!r}; write it without quotes"
    extra = "" if err["type"] in ("missing", "extra_forbidden") or isinstance(got, dict | list) else f" (got {got!r})"
    more = f" [+{len(errors) - 1} more]" if len(errors) > 1 else ""
    return f"{path}: {_loc(err['loc'])}: {msg}{extra}{more}"


def read_yaml(path: Path, kind: str = "YAML") -> object:
    """A YAML (or JSON) file's document; a one-line UserError naming the file (and the line) when it is not one."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise UserError(f"{path}: {where}not valid {kind} ({getattr(exc, 'problem', exc)})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file") from None


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> LoadedScenario:
    path = Path(path)
    if not path.is_file():
        # a built-in scenario named as in the docs (`peak`, `scenarios/peak.yaml`), from any folder or an install
        builtin = find_builtin_scenario(str(path)) if path.parent.name in ("", "scenarios") else None
        if builtin is None:
            raise UserError(f"{path}: scenario file not found (built-in scenarios: `simulate list`)")
        path = builtin
    doc = read_yaml(path)
    if not isinstance(doc, dict):
        raise UserError(f"{path}: expected a mapping of scenario fields at the top level")
    for text in overrides:
        keys, value, append = parse_override(text)
        apply_override(doc, keys, _from_cwd(keys, value), text, append)
    try:
        model = Scenario.model_validate(doc)
    except ValidationError as exc:
        raise UserError(format_validation_error(path, exc)) from None
    return LoadedScenario(model, path, list(overrides))
