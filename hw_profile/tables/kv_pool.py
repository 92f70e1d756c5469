"""Each serving engine's KV pool, sized as its own code sizes it, from a table set's memory facts.

Both engines size the pool once, at start-up, from the memory the device reports (``GPU.device_memory_bytes``:
the CUDA driver's total, not the datasheet's GB), and both leave the weights out; they differ in what else they
hold back (benchmarks/data/kv-pools/README.md reads both engines' code and gives the sources):

- **vLLM** (V1): ``gpu_memory_utilization`` x the device's total, less the weights, the activation peak of a
  profiled forward at ``max_num_batched_tokens`` (with the sampler's logits for every running request) and the
  memory outside torch (CUDA context, NCCL, captured CUDA graphs: ``RUNTIME_BYTES_PER_GPU``), over the KV bytes a
  token holds, floored to whole blocks of 16 tokens (``MemoryFacts.kv_capacity``).
- **SGLang** (0.5): ``mem_fraction_static`` x the memory free at start-up (the device's total less the CUDA context
  and NCCL buffers, ``SGLANG_STARTUP_BYTES``), less the weights: activations and CUDA graphs live in the rest. Its
  default fraction comes from nvidia-smi's total (``GPU.smi_memory_mib``) and the parallelism, as its server
  arguments set it (``sglang_default_fraction``).

A linear hybrid's recurrent states for ``max_running`` requests come out of the pool in both.
"""

from __future__ import annotations

from dataclasses import dataclass

from hw_profile.tables.sidecar import MemoryFacts

POOL_ENGINES = ("vllm", "sglang")
BLOCK_TOKENS = 16  # vLLM allocates the cache in blocks of 16 tokens
# What the CUDA context and NCCL's buffers take before SGLang measures its free memory (ASSUMED: 0.5 to 1.5 GiB on a
# clean GPU, by the start-up logs read for benchmarks/data/kv-pools; the middle of that range)
SGLANG_STARTUP_BYTES = 2.0**30


@dataclass(frozen=True)
class KvPool:
    """A replica's KV pool as an engine sizes it: tokens (None: no room left) and how they were found."""

    engine: str
    tokens: int | None
    fraction: float  # gpu_memory_utilization (vLLM) or mem_fraction_static (SGLang)
    why: str  # one line: the rule and its figures


def sglang_default_fraction(smi_mib: float, tp: int, speculative: bool) -> float:
    """SGLang's default ``mem_fraction_static`` (its server arguments' rule from 0.5): the share of nvidia-smi's
    total left after a reserve for the chunked prefill's activations, the CUDA graphs and the parallelism, at least
    10 GiB on a part over 60 GiB, 2 GiB more for an EAGLE or MTP drafter. The chunked-prefill size and the largest
    CUDA-graph batch are SGLang's own defaults for the part's memory."""
    gib = smi_mib / 1024.0
    if gib < 20:
        chunk, graphs = 2048, 8
    elif gib < 35:
        chunk, graphs = 2048, 24 if tp < 4 else 80
    elif gib < 60:
        chunk, graphs = 4096, 32 if tp < 4 else 160
    elif gib < 160:
        chunk, graphs = 8192, 256 if tp < 4 else 512
    else:
        chunk, graphs = 16384, 512
    reserved = 512 + max(chunk, 2048) * 1.5 + graphs * 2 + tp / 8 * 1024
    if gib > 60:
        reserved = max(reserved, 10 * 1024)
    if speculative:
        reserved += 2 * 1024
    return round((smi_mib - reserved) / smi_mib, 3)


def kv_pool(memory: MemoryFacts, engine: str, *, utilization: float = 0.9, mem_fraction_static: float | None = None,
            smi_mib: float | None = None, tp: int = 1, speculative: bool = False, max_batch_tokens: int = 8192,
            max_running: int = 256) -> KvPool:
    """The KV pool of one replica (tokens on each of its GPUs) as ``engine`` sizes it (module docstring)."""
    if engine not in POOL_ENGINES:
        raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(POOL_ENGINES)}")
    per_token = memory.kv_bytes_per_token_per_gpu
    total = memory.device_memory_gb * 1e9
    states = memory.states_bytes_per_gpu(max_running)
    if engine == "vllm":
        tokens = memory.kv_capacity(utilization, max_batch_tokens, max_running)
        tokens = tokens // BLOCK_TOKENS * BLOCK_TOKENS if tokens else None
        return KvPool(engine, tokens or None, utilization,
                      f"vLLM: {utilization:g} x {total / 2**30:.1f} GiB less weights, activation peak and runtime")
    default = mem_fraction_static is None
    fraction = (sglang_default_fraction(smi_mib or total / 2**20, tp, speculative) if default
                else mem_fraction_static)
    free = fraction * (total - SGLANG_STARTUP_BYTES) - memory.weight_bytes_per_gpu - states
    tokens = int(free / per_token) if free > 0 and per_token > 0 else None
    source = "SGLang's default for this GPU and parallelism" if default else "engine.mem_fraction_static"
    return KvPool(engine, tokens, fraction,
                  f"SGLang: mem_fraction_static {fraction:g} ({source}) x {(total - SGLANG_STARTUP_BYTES) / 2**30:.1f} "
                  "GiB free at start-up, less weights")
