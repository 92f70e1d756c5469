"""CUDA-graph capture as a deployment fact: which step sizes replay a captured graph, and what the rest cost.

Serving engines capture their forward as CUDA graphs at a list of sizes and replay the smallest captured graph a
step fits in: the step is padded to that size, so its cost is a staircase in the batch, not a line. vLLM's V1
engine counts tokens (``cudagraph_capture_sizes``); SGLang and TensorRT-LLM count requests (``cuda_graph_bs``,
``cuda_graph_config.batch_sizes``), each request bringing its own tokens. A step larger than the largest captured
size runs eagerly: the host launches every kernel of every layer itself, and the step takes at least as long as
those launches take.

A table carries this as its sidecar block ``cuda_graphs`` (``CudaGraphs``); its points are what a step of B
tokens costs replayed as a graph of exactly that size, and the grid's one T(B, K) rule
(``hw_profile.tables.step_table``: ``graph_batch``, compiled with the rest of the rule) prices a step at its
padded size, or at its own size with the eager floor.
A measured table has no block: its points are real steps, padding included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hw_profile.errors import HwProfileError

CUDA_GRAPHS = "cuda_graphs"  # the sidecar's block
COUNTS = ("tokens", "requests")


@dataclass(frozen=True)
class CudaGraphs:
    """The captured sizes (ascending), what they count (``tokens`` of the step, or ``requests``), and the least
    time in ms a step past the largest size takes when it runs eagerly (its kernel launches and the engine's host
    cost)."""

    sizes: tuple[int, ...]
    counts: str = "tokens"
    eager_floor_ms: float = 0.0
    source: str = ""

    def __post_init__(self):
        sizes = tuple(int(s) for s in self.sizes)
        if not sizes or any(s < 1 for s in sizes) or list(sizes) != sorted(set(sizes)):
            raise HwProfileError(f"cuda_graphs: sizes must be ascending distinct integers >= 1, got {list(self.sizes)}")
        if self.counts not in COUNTS:
            raise HwProfileError(f"cuda_graphs: counts must be one of {', '.join(COUNTS)}, got {self.counts!r}")
        if not (math.isfinite(self.eager_floor_ms) and self.eager_floor_ms >= 0):
            raise HwProfileError(f"cuda_graphs: eager_floor_ms must be a number >= 0, got {self.eager_floor_ms!r}")
        object.__setattr__(self, "sizes", sizes)
        # what the compiled rule takes, built once: a walk asks for it every step
        object.__setattr__(self, "_terms", (np.asarray(sizes, dtype=np.float64), self.counts == "requests",
                                            float(self.eager_floor_ms)))

    @property
    def largest(self) -> int:
        return self.sizes[-1]

    @classmethod
    def from_meta(cls, meta: dict, where: str) -> CudaGraphs | None:
        """The block of a sidecar's metadata, or None without one; ``where`` names the sidecar in errors (raised as
        ``HwProfileError``; ``StepTable.read`` reports them as its ``TableError``)."""
        block = meta.get(CUDA_GRAPHS) if isinstance(meta, dict) else None
        if block is None:
            return None
        if not isinstance(block, dict):
            raise HwProfileError(f"{where}: {CUDA_GRAPHS} must be an object, got {block!r}")
        sizes = block.get("sizes")
        floor = block.get("eager_floor_ms", 0.0)
        if (not isinstance(sizes, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in sizes)
                or isinstance(floor, bool) or not isinstance(floor, int | float)):
            raise HwProfileError(f"{where}: {CUDA_GRAPHS} needs sizes (a list of integers) and eager_floor_ms (a "
                             f"number); got {block!r}")
        try:
            return cls(tuple(sizes), str(block.get("counts", "tokens")), float(floor), str(block.get("source", "")))
        except HwProfileError as exc:
            raise HwProfileError(f"{where}: {exc}") from None

    def to_meta(self) -> dict:
        return {"sizes": list(self.sizes), "counts": self.counts, "eager_floor_ms": self.eager_floor_ms,
                "source": self.source}

    @property
    def terms(self) -> tuple[np.ndarray, bool, float]:
        """(sizes as float64, counts requests, eager floor): what the compiled rule takes
        (``hw_profile.tables.step_table.graph_batch``)."""
        return self._terms


NO_SIZES = np.zeros(0)
#: the compiled rule's arguments for a table without captured graphs (every step priced at its own size)
NO_GRAPHS = (NO_SIZES, False, 0.0)
