"""The hardware a scenario runs on: the target's step-time table (and the policy's copy), drafter costs and the
KV capacity of one replica."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hw_profile.estimate.estimate import kv_cache_bytes
from hw_profile.hardware.shapes import ModelShape
from hw_profile.kernels.roofline import DTYPE_BYTES
from hw_profile.tables.step_table import ChunkAttention, StepTable, StepTimeGrid, TableError
from simulator.core.drafters import DRAFTER_KINDS, DraftCost
from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario

# What a GPU of a serving replica holds besides weights and the KV cache, outside the activation peak: the CUDA
# context, NCCL buffers, captured CUDA graphs and the allocator's slack. A judgement (vLLM's start-up log reports
# graph capture at a few hundred MiB and a non-torch share near 1 GiB on an H100), not a measurement.
RUNTIME_BYTES_PER_GPU = 1.5e9


@dataclass
class Hardware:
    clock: StepTimeGrid
    policy: StepTimeGrid
    draft: dict[str, DraftCost]
    kv_capacity: int
    gpus_per_replica: int
    replicas: int
    energy: StepTimeGrid | None
    chunk_attention: ChunkAttention | None = None  # the target table's price of prompt chunks' attention, if any
    request_ms: float = 0.0  # per request, outside the forwards (engine.request_ms, else the table's engine cost)
    schedule_ahead: bool = False  # the engine schedules a step ahead (engine.schedule_ahead, else the table's)


def _read(path: Path, field: str) -> StepTable:
    try:
        return StepTable.read(path)
    except TableError as exc:
        raise UserError(f"{field}: {exc}") from None


def default_kv_capacity(table: StepTable, gpus: int, utilization: float = 0.9, max_batch_tokens: int = 8192,
                        max_running: int = 256) -> int | None:
    """KV tokens one replica holds, as vLLM sizes its pool: on each GPU, ``utilization`` x its memory less the
    weights it stores, the activation peak of a forward at the batch-token cap (``activation_peak_bytes``) and the
    runtime (``RUNTIME_BYTES_PER_GPU``), divided by the KV bytes one token holds there. The memory facts come
    from the table's sidecar, which records the cache it priced (``kv_bytes_per_token_per_gpu``, or the
    replica's ``kv_bytes_per_token``; ``ModelShape.kv_cache_facts``); a table written before sidecars carried them
    is read as its writers priced it (an estimate: a bf16 cache unless the model fixes one; other tables: the
    table's dtype). None without GPU memory and model shape."""
    meta = table.meta
    try:
        mem = float(meta["gpu"]["memory_gb"]) * 1e9
        shape = ModelShape(**meta["model_shape"])
    except (KeyError, TypeError, ValueError):
        return None
    weights = weight_bytes_per_gpu(meta, shape, gpus)
    kv_per_gpu = kv_bytes_per_token_per_gpu(meta, shape, gpus)
    free = (mem * utilization - weights - activation_peak_bytes(shape, gpus, max_batch_tokens, max_running)
            - RUNTIME_BYTES_PER_GPU)
    return int(free / kv_per_gpu) if free > 0 and kv_per_gpu > 0 else None


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


def load_target_table(scn: LoadedScenario) -> StepTable:
    return _read(scn.resolve(scn.model.hardware.table), "hardware.table")


def load_hardware(scn: LoadedScenario, drafters: set[str]) -> Hardware:
    hw = scn.model.hardware
    table = load_target_table(scn)
    policy = _read(scn.resolve(hw.policy_table), "hardware.policy_table").grid if hw.policy_table else table.grid
    sidecar = table.meta.get("drafter_tables", {}) if isinstance(table.meta.get("drafter_tables"), dict) else {}
    draft: dict[str, DraftCost] = {}
    for name in sorted(drafters):
        kind = DRAFTER_KINDS[name]
        if name == "none":
            draft[name] = DraftCost(kind, None)
            continue
        path, field, entry = drafter_table_source(scn, sidecar, name)
        dt = _read(path, field)
        # DSpark is the one drafter with a sequential (Markov) and a confidence head: a table's own sidecar may
        # record their cost (`hw-profile analytic --drafter-layers`), which a DFlash or Eagle3 drafter timed with
        # the same backbone table does not pay
        own = dt.meta.get("sequential_head") if name == "dspark" else None
        head = entry.get("sequential_head") or own or {}
        window = entry.get("attention_window") or dt.meta.get("attention_window", 0)
        draft[name] = DraftCost(kind, dt.grid, float(head.get("per_position_ms", 0.0)),
                                float(head.get("per_row_position_ms", 0.0)), int(window))
    eng = scn.model.engine
    kv = eng.kv_capacity_tokens or default_kv_capacity(table, hw.gpus_per_replica, eng.gpu_memory_utilization,
                                                       eng.max_batch_tokens, eng.max_running)
    if kv is None:
        raise UserError(
            f"{scn.path}: engine.kv_capacity_tokens: required, since table {hw.table} does not record its GPU "
            "memory and model shape, or its weights leave no room for a KV cache at "
            f"engine.gpu_memory_utilization {eng.gpu_memory_utilization:g}"
        )
    return Hardware(clock=table.grid, policy=policy, draft=draft, kv_capacity=int(kv),
                    gpus_per_replica=hw.gpus_per_replica, replicas=hw.replicas, energy=table.energy_grid,
                    chunk_attention=table.chunk_attention, request_ms=request_ms(table, eng.request_ms),
                    schedule_ahead=schedule_ahead(table, eng.schedule_ahead))


def drafter_table_source(scn: LoadedScenario, sidecar: dict, name: str) -> tuple[Path, str, dict]:
    """Where drafter ``name``'s cost table is: the scenario's ``hardware.drafter_tables``, else the target table's
    sidecar (``sidecar``: its ``drafter_tables``). (path, the field that names it, the sidecar's entry or {})."""
    hw = scn.model.hardware
    if name in hw.drafter_tables:
        return scn.resolve(hw.drafter_tables[name]), f"hardware.drafter_tables.{name}", {}
    if name in sidecar:
        entry = sidecar[name]
        return (scn.resolve(hw.table).parent / entry["table"], f"hardware.table (sidecar drafter_tables.{name})",
                entry)
    raise UserError(
        f"{scn.path}: hardware.drafter_tables.{name}: no cost table for drafter {name!r} "
        f"(give one, or use a table whose sidecar lists drafter_tables)"
    )


def schedule_ahead(table: StepTable, override: bool | None) -> bool:
    """Whether the engine schedules each step while the previous one runs: the scenario's ``engine.schedule_ahead``,
    else what the table was estimated with (``engine_costs.overlap_schedule``: vLLM's asynchronous scheduling,
    SGLang's and TensorRT-LLM's overlap schedulers), else false (a measured table times forwards only)."""
    if override is not None:
        return override
    costs = table.meta.get("engine_costs")
    return bool(costs.get("overlap_schedule", False)) if isinstance(costs, dict) else False


def request_ms(table: StepTable, override: float | None) -> float:
    """What a request spends outside the forwards: the scenario's ``engine.request_ms``, else the engine cost the
    table was estimated with (``hw-profile estimate`` records ``engine_costs.request_ms``), else 0 (a measured
    table times forwards only)."""
    if override is not None:
        return float(override)
    costs = table.meta.get("engine_costs")
    value = costs.get("request_ms") if isinstance(costs, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 0.0


def grid_warnings(scn: LoadedScenario, hw: Hardware, max_gamma: int) -> list[str]:
    """One line per table whose grid the scenario's batches can leave (B or K beyond its largest), with the largest
    values the engine limits allow: B up to max_batch_tokens with colocated prefill (else a full decode batch,
    max_running x (1 + gamma)), K up to the KV capacity. The same rule as a run's ``beyond_table`` flag: any step
    past the grid is extrapolated, so `check` warns where a run could be flagged, not only far past the grid."""
    eng = scn.model.engine
    decode_b = eng.max_running * (1 + max_gamma)
    reach_b = eng.max_batch_tokens if eng.prefill == "colocated" else min(eng.max_batch_tokens, decode_b)
    reach_k = hw.kv_capacity
    tables = [("hardware.table", hw.clock, reach_b, reach_k)]
    for name, cost in sorted(hw.draft.items()):
        if cost.grid is not None and max_gamma:
            rows = eng.max_running * (max_gamma + cost.kind.extra_block_tokens) if cost.kind.parallel else eng.max_running
            # a sliding-window drafter reads at most its window per request (DraftCost.ms)
            k = min(reach_k, eng.max_running * cost.attention_window) if cost.attention_window else reach_k
            tables.append((f"drafter {name}'s table", cost.grid, rows, k))
    out = []
    for label, grid, b, k in tables:
        b_max, k_max = float(grid.b_axis[-1]), float(grid.k_axis[-1])
        if b > b_max or k > k_max:
            out.append(f"{scn.path}: {label} covers B <= {b_max:,.0f} and K <= {k_max:,.0f}, but this scenario's "
                       f"steps can reach B = {b:,} and K = {k:,} (engine limits): step times out there are "
                       "extrapolated; lower engine.max_batch_tokens / max_running / kv_capacity_tokens or measure a "
                       "wider grid")
    return out


def scenario_grid_warnings(scn: LoadedScenario) -> list[str]:
    """grid_warnings for a scenario's own systems."""
    from simulator.inputs.systems import resolve_systems

    systems = resolve_systems(scn)
    hw = load_hardware(scn, {s.drafter for s in systems})
    return grid_warnings(scn, hw, max((s.gamma for s in systems if s.drafter != "none"), default=0))
