"""The hardware a scenario runs on: the target's step-time table (and the policy's copy), drafter costs and the
KV capacity of one replica, all from the scenario's table set (``hw_profile.tables.table_set.TableSet``: the one
contract with hw_profile) with the scenario's overrides applied."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from hw_profile.tables.kv_pool import POOL_ENGINES, KvPool, kv_pool
from hw_profile.tables.sidecar import SpeculativeMode
from hw_profile.tables.step_table import ChunkAttention, StepTable, StepTimeGrid, TableError
from hw_profile.tables.table_set import DrafterTable, TableSet, read_drafter
from simulator.core.drafters import DRAFTER_KINDS, DraftCost
from simulator.errors import UserError
from simulator.inputs.config import Engine, LoadedScenario, longest_prompt, shortest_prompt


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
    # what the engine changes when it speculates (the table's record)
    speculative: SpeculativeMode = dataclasses.field(default_factory=SpeculativeMode)

    def speculating(self, engine: Engine, gamma: int, parallel: bool = False
                    ) -> tuple[StepTimeGrid, StepTimeGrid, int, bool, float]:
        """(clock grid, policy grid, running-request cap, schedules ahead, host ms a step) of a system drafting
        ``gamma`` tokens a step (a ``parallel`` drafter or not): as the table prices plain steps for gamma 0, else
        in the engine's speculative mode
        (``SpeculativeMode``): its CUDA-graph sizes, its running-request cap unless the scenario sets
        ``engine.speculative_max_running``, no step ahead and the host work that exposes where it drops its
        overlap scheduler (a scenario's ``engine.schedule_ahead`` still decides the step ahead)."""
        if gamma <= 0:
            return self.clock, self.policy, engine.max_running, self.schedule_ahead, 0.0
        mode = self.speculative
        clock, policy = self.clock, self.policy
        if mode.cuda_graphs is not None:
            clock = replace(clock, graphs=mode.cuda_graphs)
            policy = clock if self.policy is self.clock else policy
        cap = engine.speculative_max_running or mode.max_running or engine.max_running
        ahead = self.schedule_ahead if engine.schedule_ahead is not None else (self.schedule_ahead
                                                                              and mode.overlap_schedule)
        return clock, policy, min(engine.max_running, cap), ahead, mode.step_host_ms(parallel, gamma)


def read_table_set(path: Path, field: str) -> TableSet:
    """The table set at ``path`` (``TableSet.read``: the target and the drafter tables its sidecar names), read
    once per file version however many times a command asks (``simulate check`` and a plan ask often)."""
    try:
        stat = path.stat()
    except OSError:
        stat = None
    try:
        return _read_set(path, stat.st_mtime_ns if stat else 0, stat.st_size if stat else 0)
    except TableError as exc:
        raise UserError(f"{field}: {exc}") from None


@lru_cache(maxsize=16)
def _read_set(path: Path, mtime_ns: int, size: int) -> TableSet:
    return TableSet.read(path)


def load_table_set(scn: LoadedScenario) -> TableSet:
    """The scenario's table set: ``hardware.table`` and the drafter tables its sidecar names."""
    return read_table_set(scn.resolve(scn.model.hardware.table), "hardware.table")


def load_target_table(scn: LoadedScenario) -> StepTable:
    return load_table_set(scn).target


def load_hardware(scn: LoadedScenario, drafters: set[str]) -> Hardware:
    hw = scn.model.hardware
    tables = load_table_set(scn)
    target = tables.target
    policy = (read_table_set(scn.resolve(hw.policy_table), "hardware.policy_table").target.grid
              if hw.policy_table else target.grid)
    draft: dict[str, DraftCost] = {}
    for name in sorted(drafters):
        kind = DRAFTER_KINDS[name]
        if name == "none":
            draft[name] = DraftCost(kind, None)
            continue
        dt = drafter_table(scn, tables, name)
        facts = dt.facts
        head = facts.sequential_head if name == "dspark" else {}  # the one drafter with a sequential head
        draft[name] = DraftCost(kind, dt.table.grid, float(head.get("per_position_ms", 0.0)),
                                float(head.get("per_row_position_ms", 0.0)), facts.attention_window,
                                facts.first_pass_share, tables.engine.drafter_takes_in, facts.fusion_share)
    eng = scn.model.engine
    memory = tables.memory  # None without GPU memory and model shape in the sidecar
    kv = eng.kv_capacity_tokens or (kv_pool_of(scn, tables, drafters).tokens if memory else None)
    if kv is None:
        if memory is None:
            why = f"table {hw.table} does not record its GPU memory and model shape"
        else:
            states = memory.states_bytes_per_gpu(eng.max_running)
            held = f"its weights ({memory.weight_bytes_per_gpu / 1e9:.0f} GB a GPU)"
            if states:  # a linear hybrid's running requests hold their recurrent states whatever their context
                held += f" and engine.max_running {eng.max_running} requests' states ({states / 1e9:.0f} GB a GPU)"
            pool = kv_pool_of(scn, tables, drafters)
            field = "gpu_memory_utilization" if pool.engine == "vllm" else "mem_fraction_static"
            why = (f"{held} leave no room for a KV cache in {memory.device_memory_gb:g} GB at "
                   f"engine.{field} {pool.fraction:g} ({pool.engine}'s rule) on hardware.gpus_per_replica "
                   f"{hw.gpus_per_replica} (table {hw.table})")
        raise UserError(f"{scn.path}: engine.kv_capacity_tokens: required, since {why}")
    return Hardware(clock=target.grid, policy=policy, draft=draft, kv_capacity=int(kv),
                    gpus_per_replica=hw.gpus_per_replica, replicas=hw.replicas, energy=target.energy_grid,
                    chunk_attention=tables.chunk_attention, request_ms=request_ms(tables, eng.request_ms),
                    schedule_ahead=schedule_ahead(tables, eng.schedule_ahead),
                    speculative=tables.engine.speculative)


def kv_pool_of(scn: LoadedScenario, tables: TableSet, drafters: set[str]) -> KvPool:
    """The KV pool the scenario's engine sizes from the table set's memory facts (``hw_profile.tables.kv_pool``):
    ``engine.pool``'s rule, else the engine the table was estimated for, else vLLM's; SGLang's default fraction
    reserves 2 GiB more when the run drafts (``drafters`` other than none)."""
    eng = scn.model.engine
    engine = eng.pool or (tables.engine.engine if tables.engine.engine in POOL_ENGINES else "vllm")
    sheet = tables.deployment.datasheet
    return kv_pool(tables.memory, engine, utilization=eng.gpu_memory_utilization,
                   mem_fraction_static=eng.mem_fraction_static, smi_mib=sheet.smi_mib if sheet else None,
                   tp=scn.model.hardware.gpus_per_replica, speculative=bool(set(drafters) - {"none"}),
                   max_batch_tokens=eng.max_batch_tokens, max_running=eng.max_running)


def pool_prompt_lines(scn: LoadedScenario, hw: Hardware) -> list[str]:
    """A warning where the KV pool cannot hold the longest prompt the workload can draw (those requests are refused
    as an engine refuses them); a ``UserError`` where it cannot hold the shortest, since every request would be."""
    w = scn.model.workload
    low, high = shortest_prompt(w.prompt), longest_prompt(w.prompt)
    where = ("engine.kv_capacity_tokens" if scn.model.engine.kv_capacity_tokens
             else "the KV pool its engine sizes from hardware.table's memory facts")
    if low is not None and low >= hw.kv_capacity:
        raise UserError(f"{scn.path}: workload.prompt: every prompt ({low:,} tokens or more) exceeds {where} "
                        f"({hw.kv_capacity:,} tokens per replica): expected prompts shorter than the pool, or a "
                        "larger pool (more GPUs per replica, engine.gpu_memory_utilization / mem_fraction_static)")
    if high is not None and high >= hw.kv_capacity:
        return [f"{scn.path}: workload.prompt: prompts of up to {high:,} tokens do not fit in {where} "
                f"({hw.kv_capacity:,} tokens per replica): those requests are refused"]
    return []


def drafter_table(scn: LoadedScenario, tables: TableSet, name: str) -> DrafterTable:
    """Drafter ``name``'s table: the scenario's ``hardware.drafter_tables`` (its own sidecar's head and window),
    else the one the set's sidecar names."""
    hw = scn.model.hardware
    if name in hw.drafter_tables:
        path, field = drafter_table_source(scn, tables, name)
        try:
            return read_drafter(path)
        except TableError as exc:
            raise UserError(f"{field}: {exc}") from None
    if name in tables.drafters:
        return tables.drafters[name]
    raise UserError(
        f"{scn.path}: hardware.drafter_tables.{name}: no cost table for drafter {name!r} "
        f"(give one, or use a table whose sidecar lists drafter_tables)"
    )


def drafter_table_source(scn: LoadedScenario, tables: TableSet, name: str) -> tuple[Path, str]:
    """Where drafter ``name``'s cost table is: the scenario's ``hardware.drafter_tables``, else the table set's
    (path, the field that names it); a drafter neither names is refused in one line."""
    hw = scn.model.hardware
    if name in hw.drafter_tables:
        return scn.resolve(hw.drafter_tables[name]), f"hardware.drafter_tables.{name}"
    if name in tables.drafters and tables.drafters[name].table.path is not None:
        return tables.drafters[name].table.path, f"hardware.table (sidecar drafter_tables.{name})"
    raise UserError(
        f"{scn.path}: hardware.drafter_tables.{name}: no cost table for drafter {name!r} "
        f"(give one, or use a table whose sidecar lists drafter_tables)"
    )


def schedule_ahead(tables: TableSet, override: bool | None) -> bool:
    """Whether the engine schedules each step while the previous one runs: the scenario's ``engine.schedule_ahead``,
    else what the table was estimated with (``EngineFacts.overlap_schedule``: vLLM's asynchronous scheduling,
    SGLang's and TensorRT-LLM's overlap schedulers), else false (a measured table times forwards only)."""
    return override if override is not None else tables.engine.overlap_schedule


def request_ms(tables: TableSet, override: float | None) -> float:
    """What a request spends outside the forwards: the scenario's ``engine.request_ms``, else the engine cost the
    table was estimated with (``EngineFacts.request_ms``), else 0 (a measured table times forwards only)."""
    return float(override) if override is not None else tables.engine.request_ms


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


def scenario_table_warnings(scn: LoadedScenario, drafters: set[str]) -> list[str]:
    """The table invariants (``hw_profile.tables.checks``, T-1 ... T-4) for every table a scenario reads: its
    target table, the policy's and the prefill pool's copies, and the cost tables of ``drafters`` (each file
    once; a drafter's steps bounded by its target's memory)."""
    from hw_profile.tables.checks import kv_room, table_warnings

    hw = scn.model.hardware
    tables = load_table_set(scn)
    named: dict[Path, tuple[str, StepTable]] = {scn.resolve(hw.table): ("hardware.table", tables.target)}
    for field, value in (("hardware.policy_table", hw.policy_table), ("hardware.prefill_table", hw.prefill_table)):
        if value and scn.resolve(value) not in named:
            named[scn.resolve(value)] = (field, read_table_set(scn.resolve(value), field).target)
    for name in sorted(d for d in drafters if d != "none"):
        path, field = drafter_table_source(scn, tables, name)
        if path not in named:
            named[path] = (f"drafter {name}'s table", drafter_table(scn, tables, name).table)
    room = kv_room(tables.facts)
    return [line for path, (field, table) in named.items() for line in table_warnings(table, f"{path} ({field})", room)]
