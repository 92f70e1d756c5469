"""A table set: the one contract between hw_profile, which makes step times, and the simulator, which spends them.

A set is the target's step-time table and the drafters' tables beside it, with the facts both halves need:

- ``target``: T(B, K) of the target's forward (``StepTable``) with its sidecar's blocks: prompt chunks' attention
  (``prefill_cost``), verification's attention (``verify_attention``) and the engine's captured CUDA graphs
  (``cuda_graphs``);
- ``drafters``: each drafter's table with its sequential head's cost and its attention window (``DrafterTable``);
- ``memory``: what one GPU holds (``MemoryFacts``: its memory, the weights it stores, the KV bytes of one context
  token), from which the KV pool is sized the one way (``MemoryFacts.kv_capacity``);
- the deployment and engine costs it was priced for, and its provenance (kind, caveat, expected error, command).

On disk a set is what the tables have always been, so every table written before still loads: the target's CSV and
JSON sidecar, the sidecar's ``drafter_tables`` naming each drafter's CSV beside it (``{"mtp": {"table":
"NAME.drafter-mtp.csv"}, "dspark": {"table": ..., "sequential_head": {...}, "attention_window": W}}``). The
format of each CSV and sidecar is in ``hw_profile.tables.step_table``; docs/hw-profile.md has it for users.
``TableSet.write`` is the one writer (``hw-profile estimate`` and ``calibrate --prior`` write sets; ``sps``,
``analytic`` and ``calibrate`` from telemetry a set of one table) and ``TableSet.read`` the one reader the
simulator uses (the bundled tables' regeneration scripts in ``tools/`` keep their own file names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hw_profile.errors import HwProfileError
from hw_profile.hardware.dtypes import DTYPE_BYTES, kv_cache_bytes
from hw_profile.hardware.shapes import ModelShape
from hw_profile.tables.cuda_graphs import CudaGraphs
from hw_profile.tables.step_table import ChunkAttention, StepTable, TableError, VerifyAttention

DRAFTER_TABLES = "drafter_tables"  # the target sidecar's entry naming the drafters' tables
# What a GPU of a serving replica holds besides weights and the KV cache, outside the activation peak: the CUDA
# context, NCCL buffers, captured CUDA graphs and the allocator's slack. A judgement (vLLM's start-up log reports
# graph capture at a few hundred MiB and a non-torch share near 1 GiB on an H100), not a measurement.
RUNTIME_BYTES_PER_GPU = 1.5e9


@dataclass(frozen=True)
class DrafterTable:
    """One drafter's step-time table and what its forward adds: a sequential head's cost per drafted position
    (DSpark's Markov and confidence heads: ``per_position_ms``, ``per_row_position_ms``) and the KV window its
    layers read (0: the whole context)."""

    table: StepTable
    sequential_head: dict = field(default_factory=dict)
    attention_window: int = 0

    def entry(self, file_name: str) -> dict:
        """The target sidecar's entry for this drafter, its table saved as ``file_name``."""
        out: dict = {"table": file_name}
        if self.sequential_head:
            out["sequential_head"] = self.sequential_head
        if self.attention_window:
            out["attention_window"] = self.attention_window
        return out


@dataclass(frozen=True)
class MemoryFacts:
    """What one GPU of a table's deployment holds: its memory, the weights it stores and the KV bytes one context
    token takes on it (the cache the table priced), and the model shape the activation peak is sized from."""

    memory_gb: float
    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    shape: ModelShape

    @classmethod
    def of(cls, meta: dict, gpus: int) -> MemoryFacts | None:
        """The facts a sidecar records, on ``gpus`` GPUs per replica; None without GPU memory and model shape.
        A sidecar written before tables recorded their cache and weights is read as its writer priced them (an
        estimate: a bf16 cache unless the model fixes one; other tables: the table's dtype). The memory is the
        sidecar's ``gpu.memory_gb``, or a measured table's ``device_memory_gb``."""
        try:
            # a table measured on a GPU records the memory the device reported (hw-profile sps)
            mem = float(meta["gpu"]["memory_gb"] if "gpu" in meta else meta["device_memory_gb"])
            shape = ModelShape(**meta["model_shape"])
        except (KeyError, TypeError, ValueError):
            return None
        return cls(mem, weight_bytes_per_gpu(meta, shape, gpus), kv_bytes_per_token_per_gpu(meta, shape, gpus), shape)

    def states_bytes_per_gpu(self, gpus: int, max_running: int) -> float:
        """What ``max_running`` requests' recurrent states take on one of ``gpus`` GPUs (split with the heads): a
        linear hybrid's ``ModelShape.state_bytes_per_request`` each; 0 for other models."""
        return max_running * self.shape.state_bytes_per_request / gpus

    def kv_capacity(self, gpus: int, utilization: float = 0.9, max_batch_tokens: int = 8192,
                    max_running: int = 256) -> int | None:
        """KV tokens one replica holds, as vLLM sizes its pool: on each GPU, ``utilization`` x its memory less the
        weights it stores, the activation peak of a forward at the batch-token cap (``activation_peak_bytes``), the
        runtime (``RUNTIME_BYTES_PER_GPU``) and, for a linear hybrid, ``max_running`` requests' recurrent states
        (``states_bytes_per_gpu``), divided by the KV bytes one token holds there; None when nothing is left."""
        free = (self.memory_gb * 1e9 * utilization - self.weight_bytes_per_gpu
                - self.states_bytes_per_gpu(gpus, max_running)
                - activation_peak_bytes(self.shape, gpus, max_batch_tokens, max_running) - RUNTIME_BYTES_PER_GPU)
        per_token = self.kv_bytes_per_token_per_gpu
        return int(free / per_token) if free > 0 and per_token > 0 else None


def weight_bytes_per_gpu(meta: dict, shape: ModelShape, gpus: int) -> float:
    """Weight bytes one GPU stores: the sidecar's ``weight_bytes_per_gpu`` where the table knows it (expert-parallel
    ranks), else the model's parameters in the table's dtype spread over ``gpus``."""
    if "weight_bytes_per_gpu" in meta:
        return float(meta["weight_bytes_per_gpu"])
    return shape.total_params * DTYPE_BYTES.get(str(meta.get("dtype", "bf16")), 2.0) / gpus


def kv_bytes_per_token_per_gpu(meta: dict, shape: ModelShape, gpus: int) -> float:
    """KV bytes one context token holds on one GPU, as the table priced its cache: the sidecar's
    ``kv_bytes_per_token_per_gpu``, or its replica's ``kv_bytes_per_token`` over the table's GPUs; a sidecar written
    before tables recorded it is read as its writer priced it (an estimate: a bf16 cache unless the model fixes
    one; other tables: the table's dtype) on ``gpus`` GPUs."""
    if "kv_bytes_per_token_per_gpu" in meta:
        return float(meta["kv_bytes_per_token_per_gpu"])
    if "kv_bytes_per_token" in meta:
        return float(meta["kv_bytes_per_token"]) / max(int(meta.get("gpus", gpus) or gpus), 1)
    dtype_bytes = DTYPE_BYTES.get(str(meta.get("dtype", "bf16")), 2.0)
    value = kv_cache_bytes(shape) if meta.get("kind") == "estimate" else dtype_bytes
    return shape.kv_cache_facts(value, gpus, gpus)["kv_bytes_per_token_per_gpu"]


def activation_peak_bytes(shape: ModelShape, gpus: int, max_batch_tokens: int, max_running: int) -> float:
    """The activation peak of one GPU's forward at the batch-token cap, which the engine reserves before sizing its
    KV pool (vLLM profiles a forward of max_num_batched_tokens): one layer's residual, attention and MLP activations
    at 16 bits (hidden x 4 and intermediate x 3 per token, split over the GPUs) plus the sampler's fp32 logits and
    probabilities for every running request."""
    width = shape.hidden * 4.0 + max(shape.intermediate, shape.expert_intermediate) * 3.0 / gpus
    return max_batch_tokens * width * 2.0 + max_running * shape.vocab * 4.0 * 2.0


@dataclass
class TableSet:
    """The target's table and the drafters' (module docstring)."""

    target: StepTable
    drafters: dict[str, DrafterTable] = field(default_factory=dict)

    @classmethod
    def read(cls, path: str | Path) -> TableSet:
        """The target's table at ``path`` and every drafter table its sidecar names (``TableError`` naming the
        file and the entry when one is missing or malformed)."""
        target = StepTable.read(path)
        return cls(target, {name: _drafter(target, name, entry) for name, entry in drafter_entries(target).items()})

    def write(self, path: str | Path) -> list[Path]:
        """Each drafter's table beside the target's (``STEM.drafter-NAME.csv``), then the target's with its sidecar
        naming them; the paths written, the target's last."""
        path = Path(path)
        written = []
        entries = {}
        for name, drafter in self.drafters.items():
            file_name = f"{path.stem}.drafter-{name}.csv"
            written.append(drafter.table.write(path.with_name(file_name)))
            entries[name] = drafter.entry(file_name)
        if entries:
            self.target.meta[DRAFTER_TABLES] = entries
        written.append(self.target.write(path))
        return written

    # --- what the simulator reads ----------------------------------------------------------------------------------
    @property
    def meta(self) -> dict:
        return self.target.meta

    @property
    def chunk_attention(self) -> ChunkAttention | None:
        return self.target.chunk_attention

    @property
    def verify_attention(self) -> VerifyAttention | None:
        return self.target.verify_attention

    @property
    def cuda_graphs(self) -> CudaGraphs | None:
        return self.target.cuda_graphs

    @property
    def engine_costs(self) -> dict:
        """The engine costs the set was estimated with (``hw_profile.estimate.engine_costs``), {} for a measured
        set: it times forwards only."""
        costs = self.meta.get("engine_costs")
        return costs if isinstance(costs, dict) else {}

    def memory(self, gpus: int) -> MemoryFacts | None:
        """One GPU's memory facts on ``gpus`` GPUs per replica (``MemoryFacts.of``)."""
        return MemoryFacts.of(self.meta, gpus)


def drafter_entries(target: StepTable) -> dict[str, dict]:
    """The target sidecar's ``drafter_tables`` (drafter -> entry), {} without them."""
    entries = target.meta.get(DRAFTER_TABLES)
    return entries if isinstance(entries, dict) else {}


def _drafter(target: StepTable, name: str, entry: object) -> DrafterTable:
    where = f"{target.path.with_suffix('.json') if target.path else 'table metadata'}: {DRAFTER_TABLES}.{name}"
    if not isinstance(entry, dict) or not isinstance(entry.get("table"), str):
        raise TableError(f"{where}: expected an object with a table file name, got {entry!r}")
    base = target.path.parent if target.path else Path(".")
    return read_drafter(base / entry["table"], entry, where)


def read_drafter(path: Path, entry: dict | None = None, where: str = "") -> DrafterTable:
    """A drafter's table at ``path`` with what the target's sidecar entry (``entry``) or, failing that, the table's
    own sidecar says of its head and window. DSpark is the one drafter with a sequential (Markov) and a confidence
    head; a table's own sidecar may record their cost (``hw-profile analytic --drafter-layers``)."""
    try:
        table = StepTable.read(path)
    except TableError as exc:
        raise TableError(f"{where}: {exc}" if where else str(exc)) from None
    entry = entry or {}
    head = entry.get("sequential_head") or table.meta.get("sequential_head") or {}
    window = entry.get("attention_window") or table.meta.get("attention_window", 0)
    if not isinstance(head, dict):
        raise HwProfileError(f"{where or path}: sequential_head must be an object, got {head!r}")
    return DrafterTable(table, dict(head), int(window or 0))
