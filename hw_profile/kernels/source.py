"""Where the estimate's measured kernel times come from: the ``KernelSource`` protocol, and ``MeasuredKernels``, the
kernel database behind it.

``hw_profile.estimate.estimate`` prices a step's kernels from a source it is handed (``kernel_source`` picks one
per GPU and engine, ``None`` meaning the roofline) and asks it for four things, each a ``KernelTimes``; anything
with these four methods serves, which is how a test hands it a database written in a temporary directory
(``MeasuredKernels(data_dir=...)``) and how another source of measured kernels would plug in. A source may also
price prompt chunks' attention (``chunk_pair_ns``, per pair; ``chunk_token_ns``, per chunk token); one without them
leaves them to the roofline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hw_profile.hardware.shapes import ModelShape
from hw_profile.kernels import ops
from hw_profile.kernels.database import KernelTimes


class KernelSource(Protocol):
    def step_times(self, shape: ModelShape, gpu: str, engine: str, dtype: str, gpus: int, ep: int | None,
                   tokens, requests, context) -> KernelTimes:
        """Kernel time of one forward step per point (B tokens over R requests at a context each)."""

    def moe_times(self, shape: ModelShape, gpu: str, engine: str, dtype: str, ep: int, tokens,
                  wide_ep: bool = False, gpus: int | None = None) -> KernelTimes:
        """The routed experts alone of an expert-parallel group."""

    def exchange_times(self, shape: ModelShape, gpu: str, engine: str, ep: int, tokens) -> KernelTimes | None:
        """The expert-parallel dispatch and combine as measured, or None where the source has none."""

    def gemm_times(self, shape: ModelShape, gpu: str, engine: str, dtype: str, gpus: int, tokens,
                   names) -> KernelTimes:
        """Named dense GEMMs alone (the shared experts, say)."""


@dataclass(frozen=True)
class MeasuredKernels:
    """The measured kernel database (``hw_profile.kernels.database``), priced by ``hw_profile.kernels.ops``.
    ``data_dir``: a directory in aiconfigurator-core's layout; None for the installed package's data."""

    data_dir: str | Path | None = None

    def step_times(self, shape, gpu, engine, dtype, gpus, ep, tokens, requests, context) -> KernelTimes:
        return ops.step_times(shape, gpu, engine, dtype, gpus, ep, tokens, requests, context, data_dir=self.data_dir)

    def moe_times(self, shape, gpu, engine, dtype, ep, tokens, wide_ep=False, gpus=None) -> KernelTimes:
        return ops.moe_times(shape, gpu, engine, dtype, ep, tokens, wide_ep=wide_ep, gpus=gpus,
                             data_dir=self.data_dir)

    def exchange_times(self, shape, gpu, engine, ep, tokens) -> KernelTimes | None:
        return ops.exchange_times(shape, gpu, engine, ep, tokens, data_dir=self.data_dir)

    def gemm_times(self, shape, gpu, engine, dtype, gpus, tokens, names) -> KernelTimes:
        return ops.gemm_times(shape, gpu, engine, dtype, gpus, tokens, names, data_dir=self.data_dir)

    def chunk_pair_ns(self, shape, gpu, engine, dtype, gpus) -> tuple[float, str] | None:
        """A prompt chunk's attention per (chunk token, cached token), ns, and its source; None where not measured."""
        return ops.chunk_pair_ns(shape, gpu, engine, dtype, gpus, data_dir=self.data_dir)

    def chunk_token_ns(self, shape, gpu, engine, dtype, gpus, tokens) -> tuple[float, str] | None:
        """A prompt chunk's own attention per chunk token at a chunk of ``tokens``, ns, and its source; None where
        not measured."""
        return ops.chunk_token_ns(shape, gpu, engine, dtype, gpus, tokens, data_dir=self.data_dir)
