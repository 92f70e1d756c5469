"""The hardware a scenario runs on: the target's step-time table (and the policy's copy), drafter costs and the
KV capacity of one replica."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hw_profile.roofline import DTYPE_BYTES
from hw_profile.shapes import ModelShape
from hw_profile.table import PrefillCost, StepTable, StepTimeGrid, TableError
from simulator.core.drafters import DRAFTER_KINDS, DraftCost
from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario

GPU_MEMORY_UTILISATION = 0.90  # share of GPU memory the serving engine may take (vLLM's default)


@dataclass
class Hardware:
    clock: StepTimeGrid
    policy: StepTimeGrid
    draft: dict[str, DraftCost]
    kv_capacity: int
    gpus_per_replica: int
    replicas: int
    energy: StepTimeGrid | None
    prefill_cost: PrefillCost | None = None  # the target table's prefill price (its sidecar), if any


def _read(path: Path, field: str) -> StepTable:
    try:
        return StepTable.read(path)
    except TableError as exc:
        raise UserError(f"{field}: {exc}") from None


def default_kv_capacity(table: StepTable, gpus: int) -> int | None:
    """KV tokens that fit beside the weights, from the table's metadata (GPU memory and model shape)."""
    meta = table.meta
    try:
        mem = float(meta["gpu"]["memory_gb"]) * 1e9 * gpus
        shape = ModelShape(**meta["model_shape"])
    except (KeyError, TypeError, ValueError):
        return None
    dtype_bytes = DTYPE_BYTES.get(str(meta.get("dtype", "bf16")), 2.0)
    if "weight_bytes_per_gpu" in meta:  # tables that know what one GPU stores (expert-parallel ranks)
        weight_bytes = float(meta["weight_bytes_per_gpu"]) * gpus
    else:
        weight_bytes = shape.total_params * dtype_bytes
    free = mem * GPU_MEMORY_UTILISATION - weight_bytes
    kv_per_token = shape.kv_bytes_per_token * dtype_bytes / 2.0  # the cache in the table's dtype
    return int(free / kv_per_token) if free > 0 else None


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
        entry: dict = {}
        if name in hw.drafter_tables:
            path, field = scn.resolve(hw.drafter_tables[name]), f"hardware.drafter_tables.{name}"
        elif name in sidecar:
            entry = sidecar[name]
            path = scn.resolve(hw.table).parent / entry["table"]
            field = f"hardware.table (sidecar drafter_tables.{name})"
        else:
            raise UserError(
                f"{scn.path}: hardware.drafter_tables.{name}: no cost table for drafter {name!r} "
                f"(give one, or use a table whose sidecar lists drafter_tables)"
            )
        dt = _read(path, field)
        # DSpark is the one drafter with a sequential (Markov) and a confidence head: a table's own sidecar may
        # record their cost (`hw-profile analytic --drafter-layers`), which a DFlash or Eagle3 drafter timed with
        # the same backbone table does not pay
        own = dt.meta.get("sequential_head") if name == "dspark" else None
        head = entry.get("sequential_head") or own or {}
        window = entry.get("attention_window") or dt.meta.get("attention_window", 0)
        draft[name] = DraftCost(kind, dt.grid, float(head.get("per_position_ms", 0.0)),
                                float(head.get("per_row_position_ms", 0.0)), int(window))
    kv = scn.model.engine.kv_capacity_tokens or default_kv_capacity(table, hw.gpus_per_replica)
    if kv is None:
        raise UserError(
            f"{scn.path}: engine.kv_capacity_tokens: required, since table {hw.table} does not record its GPU "
            "memory and model shape"
        )
    return Hardware(clock=table.grid, policy=policy, draft=draft, kv_capacity=int(kv),
                    gpus_per_replica=hw.gpus_per_replica, replicas=hw.replicas, energy=table.energy_grid,
                    prefill_cost=table.prefill_cost)


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
