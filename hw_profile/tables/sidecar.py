"""A table's sidecar as typed facts: the one contract between hw_profile's producers and the simulator.

Every producer (``estimate``, ``analytic``, ``sps``, ``calibrate``, a live run's tables) writes a JSON sidecar
beside its CSV. On disk it stays a flat JSON object, so any tool can read it; in code it is read once, by
``Sidecar.of``, into frozen dataclasses whose fields carry their units:

- ``Provenance``: what the step times are (``kind``: measured, calibrated, estimate, roofline, unknown), who wrote
  them, the caveat and the expected error;
- ``DeploymentFacts``: the GPU's datasheet (the sidecar's ``gpu`` block, never a name parsed from a device string),
  how many GPUs a step spans, expert parallelism, the engine, the weights' and the cache's number types;
- ``MemoryFacts``: what one GPU holds, as numbers: its memory, the weights it stores, the KV bytes of one context
  token, activation bytes per batch token, the sampler's bytes per running request, a request's recurrent state;
  the KV pool is sized from these alone (``MemoryFacts.kv_capacity``);
- ``EngineFacts``: what the engine the table was estimated for does outside the forwards (overlap scheduling, the
  per-request cost), and what it changes when it speculates (``SpeculativeMode``: the sidecar's block
  ``speculative_mode``, which a simulator applies to its speculative systems only);
- ``DrafterFacts``: a drafter table's sequential head, attention window and the shares of its pass that the
  simulator's draft cost needs.

``schema_version`` says which contract a sidecar was written under. A sidecar without it (written before this
module) is read through ``upgrade``, which records the facts as its writer priced them (the rules the reader used
to re-derive) so that old tables keep their numbers; every bundled sidecar is written at ``SCHEMA_VERSION`` and
needs no upgrade. ``memory_fields`` is the one rule every producer writes its memory facts with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from hw_profile.errors import HwProfileError
from hw_profile.hardware.dtypes import DTYPE_BYTES, kv_cache_dtype
from hw_profile.hardware.gpus import GPU, named_gpu
from hw_profile.hardware.shapes import ModelShape
from hw_profile.tables.cuda_graphs import CudaGraphs

SCHEMA_VERSION = 2

# What a GPU of a serving replica holds besides weights and the KV cache, outside the activation peak: the CUDA
# context, NCCL buffers, captured CUDA graphs and the allocator's slack. A judgement (vLLM's start-up log reports
# graph capture at a few hundred MiB and a non-torch share near 1 GiB on an H100), not a measurement.
RUNTIME_BYTES_PER_GPU = 1.5e9

#: what a table's step times are, by ``Provenance.kind``
TABLE_KINDS = {"measured": "measured on the hardware", "calibrated": "calibrated on measurements",
               "estimate": "an estimate (measured kernels or a kernel roofline, plus the engine's costs)",
               "roofline": "a roofline speed bound, not a forecast", "unknown": "of unrecorded origin"}

#: what an analytic table's step times are, in words: its sidecar carries this (``caveat``) and the views print it
ROOFLINE_BOUND = (
    "a speed bound, not a forecast: the step time if every step reached the assumed shares of the device's "
    "datasheet FLOPs and bandwidth (comp_eff, mem_eff) with only a fixed launch overhead besides; real serving "
    "steps are slower (smaller kernels, scheduling, sampling, imbalance), so read it as how fast the hardware could "
    "go, and measure (hw-profile sps) or calibrate (hw-profile calibrate) a table to forecast"
)

# the memory facts every sidecar at SCHEMA_VERSION carries where it records a model shape (``memory_fields``)
MEMORY_KEYS = ("weight_bytes_per_gpu", "kv_bytes_per_token_per_gpu", "kv_bytes_per_token", "kv_dtype",
               "activation_bytes_per_batch_token", "logits_bytes_per_request", "state_bytes_per_request")


def roofline_caveat() -> dict:
    return {"kind": "roofline-bound", "text": ROOFLINE_BOUND}


# --- the facts ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Provenance:
    """Where a table's step times come from."""

    kind: str  # measured | calibrated | estimate | roofline | unknown (``table_kind``)
    writer: str  # the writer's own word (``kind`` in the sidecar: analytic, analytic-dp-ep, drafter, live, ...)
    name: str
    command: str
    caveat: dict | None  # {kind, text}: what the numbers are not
    expected_error: dict  # {kind, summary[, step_median]}: how far to trust them

    @property
    def words(self) -> str:
        """The kind in words (``TABLE_KINDS``)."""
        return TABLE_KINDS.get(self.kind, self.kind)


@dataclass(frozen=True)
class DeploymentFacts:
    """What the table was priced or measured on."""

    device: str  # the device's name as recorded
    datasheet: GPU | None  # the sidecar's ``gpu`` block; None where the writer recorded none (a CPU, say)
    gpus: int  # GPUs one step spans (tensor parallel; 1 for a data-parallel rank)
    replica_gpus: int  # GPUs of the deployment the table prices (``deployment.gpus``), else ``gpus``
    expert_parallel: int | None  # MoE: ranks the experts are spread over; None for a dense model
    engine: str  # the serving engine priced ("" for a measured forward)
    dtype: str  # weights' and activations' number type
    kv_dtype: str  # the KV cache's number type as priced ("" where the table records no model)


@dataclass(frozen=True)
class MemoryFacts:
    """What one GPU of a table's deployment holds, as numbers (bytes unless named otherwise)."""

    device_memory_gb: float  # decimal GB, as the writer recorded it
    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    activation_bytes_per_batch_token: float  # the activation peak's share per token of the batch-token cap
    logits_bytes_per_request: float  # the sampler's fp32 logits and probabilities, per running request
    state_bytes_per_request: float  # a linear hybrid's recurrent states on one GPU; 0 for other models

    def states_bytes_per_gpu(self, max_running: int) -> float:
        """What ``max_running`` requests' recurrent states take on one GPU."""
        return max_running * self.state_bytes_per_request

    def activation_peak_bytes(self, max_batch_tokens: int, max_running: int) -> float:
        """The activation peak of one GPU's forward at the batch-token cap, which the engine reserves before sizing
        its KV pool (vLLM profiles a forward of max_num_batched_tokens)."""
        return max_batch_tokens * self.activation_bytes_per_batch_token + max_running * self.logits_bytes_per_request

    def kv_capacity(self, utilization: float = 0.9, max_batch_tokens: int = 8192, max_running: int = 256) -> int | None:
        """KV tokens one replica holds, as vLLM sizes its pool: on each GPU, ``utilization`` x its memory less the
        weights it stores, the activation peak at the batch-token cap, the runtime (``RUNTIME_BYTES_PER_GPU``) and,
        for a linear hybrid, ``max_running`` requests' recurrent states, over the KV bytes one token holds there;
        None when nothing is left."""
        free = (self.device_memory_gb * 1e9 * utilization - self.weight_bytes_per_gpu
                - self.states_bytes_per_gpu(max_running)
                - self.activation_peak_bytes(max_batch_tokens, max_running) - RUNTIME_BYTES_PER_GPU)
        per_token = self.kv_bytes_per_token_per_gpu
        return int(free / per_token) if free > 0 and per_token > 0 else None


SPECULATIVE_MODE = "speculative_mode"  # the sidecar's block


@dataclass(frozen=True)
class SpeculativeMode:
    """What the engine changes when speculation is on, against the table's plain steps: a speculative system runs
    in this mode, a system without a drafter as the table prices it. The defaults change nothing (a measured
    table, or an engine whose speculative mode is not recorded).

    overlap_schedule: whether the engine still schedules each step while the one before runs (SGLang turns its
    overlap scheduler off under its EAGLE/MTP worker unless spec v2 is on; vLLM keeps asynchronous scheduling for
    EAGLE-family drafters). host_ms: host time a speculative step pays beyond the table's plain step (the
    scheduler's work the overlap scheduler hid: 0 where the overlap stays, or where the plain steps were priced
    without it). max_running: the running-request cap the engine sets in speculative mode where the deployment
    sets none (SGLang: 48); None: none. cuda_graphs: the sizes captured in speculative mode (None: the table's).
    forward_host_ms: host time to prepare and launch each forward a speculative step runs beyond the target's one
    (``extra_forwards``), exposed where no overlap scheduler hides it. version and source: the engine release these
    facts were read from, and where."""

    engine: str = ""
    version: str = ""
    overlap_schedule: bool = True
    host_ms: float = 0.0
    max_running: int | None = None
    cuda_graphs: CudaGraphs | None = None
    source: str = ""
    forward_host_ms: float = 0.0

    @property
    def changes(self) -> bool:
        return bool(self.host_ms or self.forward_host_ms or self.max_running or self.cuda_graphs is not None
                    or not self.overlap_schedule)

    @staticmethod
    def extra_forwards(parallel: bool, gamma: int) -> int:
        """Forwards a speculative step launches beside the target's verify, each prepared by the host apart (as
        SGLang's EAGLE worker runs them): a parallel drafter's one pass; an autoregressive drafter's draft extend
        over the accepted tokens, and from two drafts on one more launch that chains the rest of its passes (one
        captured graph)."""
        if gamma <= 0:
            return 0
        return 1 if parallel else (2 if gamma >= 2 else 1)

    def step_host_ms(self, parallel: bool, gamma: int) -> float:
        """Host ms a speculative step of ``gamma`` drafts pays beyond the table's plain step."""
        return self.host_ms + self.forward_host_ms * self.extra_forwards(parallel, gamma)

    @property
    def words(self) -> str:
        """One line: what a speculative system runs differently, and from which engine release."""
        return self.describe()

    def describe(self, cap_set_by: str | None = None) -> str:
        """``words``, with the running-request cap named as set by ``cap_set_by`` (a deployment's own setting)
        instead of as the engine's default."""
        if not self.changes:
            return (f"{self.engine or 'the engine'} {self.version}".strip() + ": as plain decoding"
                    + (f" ({self.source})" if self.source and not self.version else ""))
        parts = []
        if not self.overlap_schedule:
            host = [f"+{self.host_ms:g} ms a step"] if self.host_ms else []
            host += [f"+{self.forward_host_ms:g} ms a drafter forward"] if self.forward_host_ms else []
            parts.append(f"no overlap scheduler ({', '.join(host)})" if host else "no overlap scheduler")
        if self.max_running:
            parts.append(f"at most {self.max_running} running requests "
                         + (f"({cap_set_by})" if cap_set_by else "unless the deployment sets its own"))
        if self.cuda_graphs is not None:
            parts.append(f"CUDA graphs at {len(self.cuda_graphs.sizes)} sizes up to {self.cuda_graphs.largest} "
                         f"{self.cuda_graphs.counts}")
        return f"{self.engine} {self.version}: " + "; ".join(parts)

    def to_meta(self) -> dict:
        return {"engine": self.engine, "version": self.version, "overlap_schedule": self.overlap_schedule,
                "host_ms": self.host_ms, "max_running": self.max_running,
                "cuda_graphs": None if self.cuda_graphs is None else self.cuda_graphs.to_meta(),
                "source": self.source, "forward_host_ms": self.forward_host_ms}

    @classmethod
    def from_meta(cls, meta: dict, where: str) -> SpeculativeMode:
        """The sidecar's block (``SPECULATIVE_MODE``), checked; the defaults without one."""
        block = meta.get(SPECULATIVE_MODE)
        if block is None:
            return cls()
        if not isinstance(block, dict):
            raise HwProfileError(f"{where}: {SPECULATIVE_MODE} must be an object, got {block!r}")
        host, cap, overlap = block.get("host_ms", 0.0), block.get("max_running"), block.get("overlap_schedule", True)
        for name in ("host_ms", "forward_host_ms"):
            ms = block.get(name, 0.0)
            if isinstance(ms, bool) or not isinstance(ms, int | float) or not (math.isfinite(ms) and ms >= 0):
                raise HwProfileError(f"{where}: {SPECULATIVE_MODE}.{name}: expected a number of ms >= 0, got {ms!r}")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise HwProfileError(f"{where}: {SPECULATIVE_MODE}.max_running: expected a whole number >= 1 or null, "
                                 f"got {cap!r}")
        if not isinstance(overlap, bool):
            raise HwProfileError(f"{where}: {SPECULATIVE_MODE}.overlap_schedule: expected true or false, got "
                                 f"{overlap!r}")
        graphs = (CudaGraphs.from_meta({"cuda_graphs": block["cuda_graphs"]}, f"{where}: {SPECULATIVE_MODE}")
                  if block.get("cuda_graphs") is not None else None)
        return cls(str(block.get("engine") or ""), str(block.get("version") or ""), overlap, float(host), cap, graphs,
                   str(block.get("source") or ""), float(block.get("forward_host_ms", 0.0)))


@dataclass(frozen=True)
class EngineFacts:
    """What the serving engine the table was estimated for does outside the forwards (nothing for a measured
    table: it times forwards only), and what it changes when it speculates."""

    engine: str = ""
    overlap_schedule: bool = False  # schedules each step while the previous one runs
    request_ms: float = 0.0  # per request, outside the forwards
    costs: dict = field(default_factory=dict)  # every engine cost as recorded (hw_profile.estimate.engine_costs)
    speculative: SpeculativeMode = field(default_factory=SpeculativeMode)

    @property
    def drafter_takes_in(self) -> str:
        """What an autoregressive drafter's first pass takes in: SGLang's draft extend the accepted tokens, vLLM's
        proposer (and a table that names no engine) every token the target processed."""
        return "accepted" if self.engine == "sglang" else "processed"


@dataclass(frozen=True)
class DrafterFacts:
    """What a drafter table's forward adds beside its T(B, K)."""

    sequential_head: dict = field(default_factory=dict)  # {per_position_ms, per_row_position_ms, ...}: DSpark's heads
    attention_window: int = 0  # KV tokens its layers read per request (0: the whole context)
    calibrated_share: bool = False  # fitted as a share of its target, on one token a request
    first_pass_share: float = 1.0  # of a pass's per-token matrix work, the share outside the LM head
    fusion_share: float = 0.0  # weights run over the target tokens it takes in, over a pass's matrix work


@dataclass(frozen=True)
class Sidecar:
    """A sidecar's facts, read once (``Sidecar.of``)."""

    schema_version: int
    provenance: Provenance
    deployment: DeploymentFacts
    memory: MemoryFacts | None  # None where the sidecar records no model shape or no device memory
    engine: EngineFacts
    drafter: DrafterFacts
    shape: ModelShape | None  # the model the table timed
    target_shape: ModelShape | None  # a profile of part of a model: the whole target (its cache sizes the pool)
    machine_load: dict  # hw_profile.measure.load's record ({} where none)
    max_sm_clock_mhz: float | None  # the GPU's top SM clock from NVML telemetry

    @classmethod
    def of(cls, meta: dict, where: str = "table metadata") -> Sidecar:
        """The facts of a sidecar (``upgrade``d first when written before ``SCHEMA_VERSION``); ``where`` names it
        in errors."""
        if not isinstance(meta, dict):
            raise HwProfileError(f"{where}: a sidecar must be a JSON object")
        meta = upgrade(meta)
        shape = _shape(meta.get("model_shape"), f"{where}: model_shape")
        target_shape = _shape(meta.get("target_shape"), f"{where}: target_shape")
        deployment = _deployment(meta, shape)
        return cls(
            schema_version=int(meta["schema_version"]),
            provenance=Provenance(table_kind(meta), str(meta.get("kind") or ""), str(meta.get("name") or ""),
                                  str(meta.get("command") or ""), table_caveat(meta), expected_error(meta)),
            deployment=deployment,
            memory=_memory(meta, where),
            engine=_engine(meta.get("engine_costs"), SpeculativeMode.from_meta(meta, where)),
            drafter=_drafter(meta, shape, where),
            shape=shape,
            target_shape=target_shape,
            machine_load=dict(meta["machine_load"]) if isinstance(meta.get("machine_load"), dict) else {},
            max_sm_clock_mhz=_positive((meta.get("telemetry") or {}).get("max_sm_clock_mhz")
                                       if isinstance(meta.get("telemetry"), dict) else None),
        )


# --- the one rule producers write ----------------------------------------------------------------------------------

def memory_fields(shape: ModelShape, dtype: str, *, head_split: int, gpus: int, weight_bytes_per_gpu: float,
                  device_memory_gb: float | None, kv_dtype: str | None = None) -> dict[str, Any]:
    """The memory facts a producer records for ``shape`` in ``dtype`` on a table of ``gpus`` GPUs whose attention
    heads are split ``head_split`` ways, each with ``device_memory_gb`` (None: not a GPU, no pool) and storing
    ``weight_bytes_per_gpu`` (the producer's layout decides it): the
    KV cache in the one cache type rule (``kv_cache_dtype``; ``kv_dtype`` where a measurement held another), the
    activation peak's per-token and per-request parts and a linear hybrid's state. Every producer calls this, so
    two producers of one deployment record the same bytes."""
    kv = kv_dtype or kv_cache_dtype(shape, dtype)
    width = shape.hidden * 4.0 + max(shape.intermediate, shape.expert_intermediate) * 3.0 / max(gpus, 1)
    return {
        "schema_version": SCHEMA_VERSION,
        **({"device_memory_gb": float(device_memory_gb)} if device_memory_gb is not None else {}),
        "weight_bytes_per_gpu": float(weight_bytes_per_gpu),
        **shape.kv_cache_facts(DTYPE_BYTES[kv], head_split, gpus),
        "kv_dtype": kv,
        # one layer's residual, attention and MLP activations at 16 bits per batch token (split over the GPUs)
        "activation_bytes_per_batch_token": width * 2.0,
        "logits_bytes_per_request": shape.vocab * 4.0 * 2.0,
        "state_bytes_per_request": shape.state_bytes_per_request / max(gpus, 1),
    }


# --- old sidecars ----------------------------------------------------------------------------------------------------

def upgrade(meta: dict) -> dict:
    """A sidecar at ``SCHEMA_VERSION``: ``meta`` itself when it is one, else a copy with the facts its writer
    priced recorded as fields. What a sidecar from before schema 2 leaves out is read as its writer priced it:
    the datasheet from the ``gpu`` block, else the device name the GPU list knows; the device memory from the
    datasheet, else what a measurement recorded (``device_memory_gb``); weights from ``weight_bytes_per_gpu``,
    else the parameters in the table's dtype; the cache from ``kv_bytes_per_token_per_gpu`` (or the replica's
    ``kv_bytes_per_token`` over its GPUs), else an estimate's cache type rule and other writers' table dtype."""
    version = meta.get("schema_version")
    if version == SCHEMA_VERSION:
        return meta
    if version is not None and (not isinstance(version, int) or version > SCHEMA_VERSION):
        raise HwProfileError(f"sidecar schema_version {version!r}: this hw_profile reads versions up to "
                             f"{SCHEMA_VERSION}; upgrade dspark-sim")
    out = dict(meta)
    out["schema_version"] = SCHEMA_VERSION
    block = meta.get("gpu")
    if isinstance(block, dict) and isinstance(block.get("memory_gb"), int | float):
        out["device_memory_gb"] = float(block["memory_gb"])  # an estimate's pool was sized on its datasheet
    elif "gpu" not in out and "device_peaks" not in out and (gpu := named_gpu(out.get("device"))) is not None:
        out["gpu"] = gpu.to_dict()  # the part a measurement named, for the table checks' bound
    try:
        shape = ModelShape(**meta["model_shape"])
    except (KeyError, TypeError, ValueError):
        return out
    gpus = _whole(meta.get("gpus"), 1)
    dtype = str(meta.get("dtype", "bf16"))
    value = DTYPE_BYTES.get(dtype, 2.0)
    weights = (float(meta["weight_bytes_per_gpu"]) if "weight_bytes_per_gpu" in meta
               else shape.total_params * value / gpus)
    if meta.get("kind") == "estimate":
        kv_type = kv_cache_dtype(shape, "bf16")
    else:
        kv_type = dtype if dtype in DTYPE_BYTES else "bf16"
    fields_ = memory_fields(shape, dtype, head_split=gpus, gpus=gpus, weight_bytes_per_gpu=weights,
                            device_memory_gb=None, kv_dtype=kv_type)
    if "kv_bytes_per_token_per_gpu" in meta:
        fields_["kv_bytes_per_token_per_gpu"] = float(meta["kv_bytes_per_token_per_gpu"])
        fields_["kv_bytes_per_token"] = float(meta.get("kv_bytes_per_token", fields_["kv_bytes_per_token_per_gpu"] * gpus))
    elif "kv_bytes_per_token" in meta:
        fields_["kv_bytes_per_token"] = float(meta["kv_bytes_per_token"])
        fields_["kv_bytes_per_token_per_gpu"] = float(meta["kv_bytes_per_token"]) / gpus
    for key in MEMORY_KEYS:
        out.setdefault(key, fields_[key])
    return out


# --- reading -----------------------------------------------------------------------------------------------------

def _whole(value: object, default: int) -> int:
    try:
        return max(int(value), 1) if value is not None else default
    except (TypeError, ValueError):
        return default


def _positive(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _shape(block: object, where: str) -> ModelShape | None:
    """The model shape a sidecar records; None without one, or with a partial one (a name alone, say), which
    prices nothing."""
    if not block:
        return None
    if not isinstance(block, dict):
        raise HwProfileError(f"{where}: expected an object, got {block!r}")
    try:
        return ModelShape(**block)
    except (TypeError, ValueError):
        return None


def datasheet(meta: dict) -> GPU | None:
    """The GPU datasheet a sidecar records (its ``gpu`` or ``device_peaks`` block); None without one, or with one
    lacking the rates a bound needs."""
    for key in ("gpu", "device_peaks"):
        block = meta.get(key)
        if isinstance(block, dict):
            known = {f.name for f in fields(GPU)}
            args = {"tdp_w": math.nan, "idle_w": math.nan, **{k: v for k, v in block.items() if k in known}}
            try:
                gpu = GPU(**args)
            except (TypeError, ValueError):
                return None
            return gpu if gpu.hbm_tb_s > 0 and gpu.bf16_tflops > 0 else None
    return None


def _deployment(meta: dict, shape: ModelShape | None) -> DeploymentFacts:
    gpus = _whole(meta.get("gpus"), 1)
    deployment = meta.get("deployment") if isinstance(meta.get("deployment"), dict) else {}
    costs = meta.get("engine_costs") if isinstance(meta.get("engine_costs"), dict) else {}
    ep = meta.get("expert_parallel", deployment.get("ep"))
    sheet = datasheet(meta)
    return DeploymentFacts(
        device=str(meta.get("device") or (sheet.name if sheet else "")),
        datasheet=sheet,
        gpus=gpus,
        replica_gpus=_whole(deployment.get("gpus"), gpus),
        expert_parallel=_whole(ep, 1) if (shape is not None and shape.is_moe and ep is not None) else None,
        engine=str(costs.get("engine") or deployment.get("engine") or ""),
        dtype=str(meta.get("dtype") or ""),
        kv_dtype=str(meta.get("kv_dtype") or ""),
    )


def _memory(meta: dict, where: str) -> MemoryFacts | None:
    memory = meta.get("device_memory_gb")
    if not isinstance(memory, int | float) or isinstance(memory, bool) or not all(k in meta for k in MEMORY_KEYS):
        return None
    try:
        return MemoryFacts(float(memory), *(float(meta[k]) for k in (
            "weight_bytes_per_gpu", "kv_bytes_per_token_per_gpu", "activation_bytes_per_batch_token",
            "logits_bytes_per_request", "state_bytes_per_request")))
    except (TypeError, ValueError) as exc:
        raise HwProfileError(f"{where}: memory facts must be numbers ({exc})") from None


def _engine(costs: object, speculative: SpeculativeMode) -> EngineFacts:
    if not isinstance(costs, dict):
        return EngineFacts(speculative=speculative)
    request = costs.get("request_ms")
    ok = isinstance(request, int | float) and not isinstance(request, bool) and request >= 0
    return EngineFacts(str(costs.get("engine") or ""), bool(costs.get("overlap_schedule", False)),
                       float(request) if ok else 0.0, dict(costs), speculative)


def _drafter(meta: dict, shape: ModelShape | None, where: str) -> DrafterFacts:
    head = meta.get("sequential_head") or {}
    if not isinstance(head, dict):
        raise HwProfileError(f"{where}: sequential_head must be an object, got {head!r}")
    calibration = meta.get("calibration") if isinstance(meta.get("calibration"), dict) else {}
    calibrated = bool(calibration.get("draft_share"))
    usable = shape is not None and not calibrated and shape.matmul_params > 0
    return DrafterFacts(
        sequential_head=dict(head),
        attention_window=_whole(meta.get("attention_window"), 0) if meta.get("attention_window") else 0,
        calibrated_share=calibrated,
        # a calibrated drafter's fit took it on one token a request, as it keeps being charged: nothing is added by
        # shape; without a shape, the whole pass is matrix work outside a head
        first_pass_share=(0.0 if calibrated else
                          (shape.matmul_params - shape.head_params) / shape.matmul_params if usable else 1.0),
        fusion_share=shape.fusion_params / shape.matmul_params if usable else 0.0,
    )


# --- kind, caveat, expected error ------------------------------------------------------------------------------------

def table_kind(meta: dict) -> str:
    """What a table's step times are: ``measured`` (``hw-profile sps``), ``calibrated`` (``calibrate``, from
    telemetry or on an estimate), ``estimate`` (``hw-profile estimate``), ``roofline`` (``hw-profile analytic``: a
    speed bound), or ``unknown`` (a sidecar that does not say). A smoothed table is of the kind it was smoothed
    from."""
    smoothed = meta.get("smoothed") if isinstance(meta.get("smoothed"), dict) else {}
    kind = str(smoothed.get("from_kind") or meta.get("kind") or "")
    caveat = meta.get("caveat") if isinstance(meta.get("caveat"), dict) else {}
    if kind.startswith("analytic") or caveat.get("kind") == "roofline-bound":
        return "roofline"
    if kind.startswith("calibrated"):
        return "calibrated"
    if kind in ("estimate", "measured"):
        return kind
    if kind == "drafter":
        return "measured"
    return "unknown"


def expected_error(meta: dict) -> dict:
    """How far a table's step times are to be trusted, as one block: the sidecar's ``expected_error`` where its
    writer recorded one (``hw-profile estimate``), else what its kind says: a roofline table is a speed bound, a
    measured one is as good as the machine was quiet, a calibrated one fits its points to its residuals. Always
    has ``kind`` and a one-line ``summary``; ``step_median`` (a fraction) where a typical step-time error is known."""
    if isinstance(meta.get("expected_error"), dict) and meta["expected_error"].get("summary"):
        return meta["expected_error"]
    kind = table_kind(meta)
    if kind == "roofline":
        summary = ("a roofline speed bound, not a forecast: real steps are slower (a few times at low load), so "
                   "GPU counts on it are lower bounds")
    elif kind == "estimate":
        caveat = table_caveat(meta) or {}
        summary = f"an estimate: {caveat.get('text', 'its accuracy was not recorded')}"
    elif kind == "measured":
        load = meta.get("machine_load") if isinstance(meta.get("machine_load"), dict) else {}
        busy = "; the machine was busy while it measured" if load.get("verdict") == "busy" else ""
        summary = f"measured on {meta.get('device') or 'the hardware'} (each point's p10-p90 in the table){busy}"
    elif kind == "calibrated":
        calibration = meta.get("calibration") if isinstance(meta.get("calibration"), dict) else {}
        residuals = calibration.get("residuals_pct")
        # telemetry fits record their rms; a fit on one to three points records each point's residual
        rms = (residuals.get("rms") if isinstance(residuals, dict) else
               math.sqrt(sum(r * r for r in residuals) / len(residuals)) if isinstance(residuals, list) and residuals
               else None)
        summary = ("calibrated on measurements" + (f": residuals rms {rms:.1f}% on the points it was fitted to"
                                                  if isinstance(rms, int | float) else ""))
    else:
        summary = "of unrecorded origin: its error is unknown"
    return {"kind": kind, "summary": summary}


def table_caveat(meta: dict) -> dict | None:
    """The sidecar's ``caveat`` ({kind, text}); analytic tables written before sidecars carried one (kind
    ``analytic``/``analytic-dp-ep``, or smoothed from one) get the roofline caveat. None: no caveat."""
    if isinstance(meta.get("caveat"), dict):
        return meta["caveat"]
    smoothed = meta.get("smoothed") if isinstance(meta.get("smoothed"), dict) else {}
    kinds = (meta.get("kind"), smoothed.get("from_kind"))
    return roofline_caveat() if any(str(k).startswith("analytic") for k in kinds) else None
