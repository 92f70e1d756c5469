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
from hw_profile.tables.cuda_graphs import CudaGraphs
from hw_profile.tables.sidecar import (
    DeploymentFacts,
    DrafterFacts,
    EngineFacts,
    MemoryFacts,
    Provenance,
    Sidecar,
)
from hw_profile.tables.step_table import ChunkAttention, StepTable, TableError, VerifyAttention

DRAFTER_TABLES = "drafter_tables"  # the target sidecar's entry naming the drafters' tables


@dataclass(frozen=True)
class DrafterTable:
    """One drafter's step-time table and what its forward adds (``DrafterFacts``): a sequential head's cost per
    drafted position (DSpark's Markov and confidence heads: ``per_position_ms``, ``per_row_position_ms``), the KV
    window its layers read (0: the whole context), and the shares of its pass the draft cost needs. The target
    sidecar's entry wins over the drafter table's own sidecar for the head and the window."""

    table: StepTable
    sequential_head: dict = field(default_factory=dict)
    attention_window: int = 0

    @property
    def facts(self) -> DrafterFacts:
        own = self.table.facts.drafter
        return DrafterFacts(self.sequential_head or own.sequential_head, self.attention_window or own.attention_window,
                            own.calibrated_share, own.first_pass_share, own.fusion_share)

    def entry(self, file_name: str) -> dict:
        """The target sidecar's entry for this drafter, its table saved as ``file_name``."""
        out: dict = {"table": file_name}
        if self.sequential_head:
            out["sequential_head"] = self.sequential_head
        if self.attention_window:
            out["attention_window"] = self.attention_window
        return out


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

    # --- what the simulator reads: typed facts only ------------------------------------------------------------
    @property
    def facts(self) -> Sidecar:
        """The target sidecar's facts (``hw_profile.tables.sidecar``)."""
        return self.target.facts

    @property
    def provenance(self) -> Provenance:
        return self.facts.provenance

    @property
    def deployment(self) -> DeploymentFacts:
        return self.facts.deployment

    @property
    def engine(self) -> EngineFacts:
        """What the engine the set was estimated for does outside the forwards (nothing for a measured set)."""
        return self.facts.engine

    @property
    def memory(self) -> MemoryFacts | None:
        """One GPU's memory facts, None where the sidecar records no model shape or device memory."""
        return self.facts.memory

    @property
    def chunk_attention(self) -> ChunkAttention | None:
        return self.target.chunk_attention

    @property
    def verify_attention(self) -> VerifyAttention | None:
        return self.target.verify_attention

    @property
    def cuda_graphs(self) -> CudaGraphs | None:
        return self.target.cuda_graphs



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
    head = entry.get("sequential_head") or {}
    if not isinstance(head, dict):
        raise HwProfileError(f"{where or path}: sequential_head must be an object, got {head!r}")
    try:
        own = table.facts.drafter  # the table's own sidecar: its head and window where the entry names none
    except HwProfileError as exc:
        raise TableError(f"{where}: {exc}" if where else str(exc)) from None
    return DrafterTable(table, dict(head or own.sequential_head),
                        int(entry.get("attention_window") or own.attention_window or 0))
