"""The hardware a scenario runs on: the target's step-time table (and the policy's copy), drafter costs and the
KV capacity of one replica, all from the scenario's table set (``hw_profile.tables.table_set.TableSet``: the one
contract with hw_profile) with the scenario's overrides applied."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hw_profile.hardware.shapes import ModelShape
from hw_profile.tables.step_table import ChunkAttention, StepTable, StepTimeGrid, TableError
from hw_profile.tables.table_set import DrafterTable, TableSet, drafter_entries, read_drafter
from simulator.core.drafters import DRAFTER_KINDS, DraftCost
from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario


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


def load_target_table(scn: LoadedScenario) -> StepTable:
    return _read(scn.resolve(scn.model.hardware.table), "hardware.table")


def load_table_set(scn: LoadedScenario) -> TableSet:
    """The scenario's table set: ``hardware.table`` and the drafter tables its sidecar names (read when used)."""
    return TableSet(load_target_table(scn))


def load_hardware(scn: LoadedScenario, drafters: set[str]) -> Hardware:
    hw = scn.model.hardware
    tables = load_table_set(scn)
    target = tables.target
    policy = _read(scn.resolve(hw.policy_table), "hardware.policy_table").grid if hw.policy_table else target.grid
    draft: dict[str, DraftCost] = {}
    for name in sorted(drafters):
        kind = DRAFTER_KINDS[name]
        if name == "none":
            draft[name] = DraftCost(kind, None)
            continue
        dt = drafter_table(scn, tables, name)
        head = dt.sequential_head if name == "dspark" else {}  # the one drafter with a sequential head
        draft[name] = DraftCost(kind, dt.table.grid, float(head.get("per_position_ms", 0.0)),
                                float(head.get("per_row_position_ms", 0.0)), dt.attention_window,
                                first_pass_share(dt.table.meta), takes_in(tables), fusion_share(dt.table.meta))
    eng = scn.model.engine
    memory = tables.memory(hw.gpus_per_replica)  # None without GPU memory and model shape in the sidecar
    kv = eng.kv_capacity_tokens or (memory.kv_capacity(hw.gpus_per_replica, eng.gpu_memory_utilization,
                                                       eng.max_batch_tokens, eng.max_running) if memory else None)
    if kv is None:
        if memory is None:
            why = f"table {hw.table} does not record its GPU memory and model shape"
        else:
            states = memory.states_bytes_per_gpu(hw.gpus_per_replica, eng.max_running)
            held = f"its weights ({memory.weight_bytes_per_gpu / 1e9:.0f} GB a GPU)"
            if states:  # a linear hybrid's running requests hold their recurrent states whatever their context
                held += f" and engine.max_running {eng.max_running} requests' states ({states / 1e9:.0f} GB a GPU)"
            why = (f"{held} leave no room for a KV cache in {memory.memory_gb:g} GB at engine.gpu_memory_utilization "
                   f"{eng.gpu_memory_utilization:g} on hardware.gpus_per_replica {hw.gpus_per_replica} "
                   f"(table {hw.table})")
        raise UserError(f"{scn.path}: engine.kv_capacity_tokens: required, since {why}")
    return Hardware(clock=target.grid, policy=policy, draft=draft, kv_capacity=int(kv),
                    gpus_per_replica=hw.gpus_per_replica, replicas=hw.replicas, energy=target.energy_grid,
                    chunk_attention=tables.chunk_attention, request_ms=request_ms(tables, eng.request_ms),
                    schedule_ahead=schedule_ahead(tables, eng.schedule_ahead))


def takes_in(tables: TableSet) -> str:
    """What an autoregressive drafter's first pass takes in on the engine the table set was estimated for
    (``engine_costs.engine``; ``DraftCost.takes_in``): SGLang's draft extend the accepted tokens, vLLM's proposer
    (and a set that names no engine) every token the target processed."""
    return "accepted" if tables.engine_costs.get("engine") == "sglang" else "processed"


def _recorded_shape(meta: dict) -> tuple[bool, ModelShape | None]:
    """(whether the drafter was calibrated as a share of its target, the model shape its sidecar records or None).
    A calibrated drafter's fit took it on one token a request (``hw_profile.calibrate``), as it keeps being charged:
    nothing is added to it by shape."""
    calibration = meta.get("calibration")
    if isinstance(calibration, dict) and calibration.get("draft_share"):
        return True, None
    try:
        return False, ModelShape(**meta["model_shape"])
    except (KeyError, TypeError, ValueError):
        return False, None


def first_pass_share(meta: dict) -> float:
    """``DraftCost.first_pass_share`` of a drafter table: of the matrix work its pass does per token, the share
    outside the LM head, from the model shape its sidecar records; 1.0 (all of it) where it records none; 0 for a
    drafter calibrated as a share of its target."""
    calibrated, shape = _recorded_shape(meta)
    if calibrated:
        return 0.0
    if shape is None or shape.matmul_params <= 0:
        return 1.0
    return (shape.matmul_params - shape.head_params) / shape.matmul_params


def fusion_share(meta: dict) -> float:
    """``DraftCost.fusion_share`` of a drafter table: the weights it runs over the target tokens it takes in
    (EAGLE-3's and DFlash's fusion projections, DFlash's context K and V; ``ModelShape.fusion_params``) over the
    matrix work of one of its passes, from the model shape its sidecar records; 0 without one, or for a drafter
    calibrated as a share of its target."""
    _, shape = _recorded_shape(meta)
    if shape is None or shape.matmul_params <= 0:
        return 0.0
    return shape.fusion_params / shape.matmul_params


def drafter_table(scn: LoadedScenario, tables: TableSet, name: str) -> DrafterTable:
    """Drafter ``name``'s table: the scenario's ``hardware.drafter_tables`` (its own sidecar's head and window),
    else the one the set's sidecar names (``drafter_table_source``)."""
    path, field, entry = drafter_table_source(scn, drafter_entries(tables.target), name)
    try:
        return read_drafter(path, entry)
    except TableError as exc:
        raise UserError(f"{field}: {exc}") from None


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


def schedule_ahead(tables: TableSet, override: bool | None) -> bool:
    """Whether the engine schedules each step while the previous one runs: the scenario's ``engine.schedule_ahead``,
    else what the table was estimated with (``engine_costs.overlap_schedule``: vLLM's asynchronous scheduling,
    SGLang's and TensorRT-LLM's overlap schedulers), else false (a measured table times forwards only)."""
    if override is not None:
        return override
    return bool(tables.engine_costs.get("overlap_schedule", False))


def request_ms(tables: TableSet, override: float | None) -> float:
    """What a request spends outside the forwards: the scenario's ``engine.request_ms``, else the engine cost the
    table was estimated with (``hw-profile estimate`` records ``engine_costs.request_ms``), else 0 (a measured
    table times forwards only)."""
    if override is not None:
        return float(override)
    value = tables.engine_costs.get("request_ms")
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
