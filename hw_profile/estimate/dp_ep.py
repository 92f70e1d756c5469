"""DeepSeek-style decode: data-parallel attention with wide expert parallelism, seen from one GPU.

DeepSeek serves V3/V4 decode on large expert-parallel groups (EP) in which every GPU is also a data-parallel (DP)
rank for attention: it holds the replicated dense part (attention, dense and shared MLPs, head) and E/ep routed
experts, runs attention for its own batch, and exchanges hidden states with the other ranks for each MoE layer
(all-to-all dispatch and combine). All ranks step together, so one GPU's step time for its own B tokens and K KV
tokens is the deployment's step time, and per-GPU metrics are the deployment's. This is the view a table made
here describes (one GPU per replica in a scenario). The plain roofline (kernels/roofline.py) models tensor parallelism
inside one group instead and says so.

For B tokens and K KV tokens on one rank of an ``ep``-GPU group:

    weights  = dense part + (E/ep) x expert params x MoE layers x (1 - (1 - k/E)^(B x ep))   (experts touched
               by the whole group's tokens, assuming every rank runs a batch like this one)
    bytes    = weights x dtype bytes + K x KV bytes per token
    flops    = 2 x active params x B + attention flops per KV token x K   (routing balanced across ranks)
    comm     = B x MoE layers x hidden x (dispatch + combine bytes) x copies per token / network bandwidth
               (DeepEP's low-latency decode kernels send each token's hidden state to each of its k experts)
    T(B, K)  = launch + max(t_mem, t_comp, t_comm)   with overlap (two micro-batches hide communication, as
               DeepSeek's decode does), else launch + max(t_mem, t_comp) + t_comm

Not modelled: routing imbalance (the busiest rank sets the pace), attention imbalance across DP ranks, and
per-layer synchronisation latency beyond ``a2a_latency_us``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from hw_profile.hardware.gpus import GPU
from hw_profile.hardware.shapes import ModelShape
from hw_profile.kernels.roofline import (
    DTYPE_BYTES,
    RooflineParams,
    attention_bytes_flops,
    default_b_axis,
    default_k_axis,
    expert_bytes,
)
from hw_profile.tables.sidecar import memory_fields, roofline_caveat
from hw_profile.tables.step_table import StepTable, table_meta


@dataclass(frozen=True)
class DpEpParams:
    """Defaults follow DeepSeek's published decode setup: EP over H800 nodes with 400 Gb/s RDMA NICs, DeepEP's
    low-latency kernels (fp8 dispatch, bf16 combine), whose README reports about 43-46 GB/s achieved RDMA bandwidth
    per GPU at EP64 for 128 tokens (dispatch ~170 us, combine ~320 us per layer)."""

    ep: int = 64  # GPUs in the expert-parallel group, each a DP rank for attention
    network_gb_s: float = 43.0  # achieved all-to-all bandwidth per GPU
    copies_per_token: int | None = None  # hidden-state copies a token sends per MoE layer (default: experts per token)
    dispatch_bytes: float = 1.0  # per hidden value sent to the experts (fp8)
    combine_bytes: float = 2.0  # per hidden value sent back (bf16)
    a2a_latency_us: float = 15.0  # fixed part per MoE layer, dispatch plus combine
    overlap: bool = True


def weights_per_gpu(shape: ModelShape, batch_tokens: np.ndarray | float, ep: int) -> np.ndarray:
    """Matmul parameters one rank reads in a step where every rank runs ``batch_tokens`` tokens."""
    dense, routed = weight_parts_per_gpu(shape, batch_tokens, ep)
    return dense + routed


def weight_parts_per_gpu(shape: ModelShape, batch_tokens: np.ndarray | float,
                         ep: int) -> tuple[np.ndarray, np.ndarray]:
    """(dense, routed) matmul parameters one rank reads, routed experts apart since they may be stored narrower."""
    b = np.asarray(batch_tokens, dtype=float)
    if not shape.is_moe:
        return np.full_like(b, float(shape.matmul_params)), np.zeros_like(b)
    frac = 1.0 - (1.0 - shape.experts_per_token / shape.experts) ** np.maximum(b * ep, 0.0)
    routed = shape.moe_layers * (shape.experts / ep) * shape.expert_params * frac
    return np.full_like(b, float(shape.dense_params)), routed


def stored_bytes_per_gpu(shape: ModelShape, ep: int, dtype: str) -> float:
    """Weights one rank stores (embedding included), for sizing its KV cache."""
    embedding = 0 if shape.tie_embeddings else shape.vocab * shape.hidden
    routed = shape.moe_layers * (shape.experts / ep) * shape.expert_params if shape.is_moe else 0.0
    return (shape.dense_params + embedding) * DTYPE_BYTES[dtype] + routed * expert_bytes(shape, dtype)


def step_time_ms(shape: ModelShape, gpu: GPU, batch_tokens: np.ndarray | float, kv_tokens: np.ndarray | float,
                 dtype: str = "fp8", params: DpEpParams = DpEpParams(),
                 roofline: RooflineParams = RooflineParams()) -> tuple[np.ndarray, np.ndarray]:
    """Step time (ms) and energy (J, this GPU) of one rank's forward, elementwise over arrays of B and K."""
    b = np.asarray(batch_tokens, dtype=float)
    k = np.asarray(kv_tokens, dtype=float)
    dense, routed = weight_parts_per_gpu(shape, b, params.ep)
    kv_read, attn_flops = attention_bytes_flops(shape, b, k, dtype)
    bytes_read = dense * DTYPE_BYTES[dtype] + routed * expert_bytes(shape, dtype) + kv_read
    flops = 2.0 * shape.matmul_params * b + attn_flops
    t_mem = bytes_read / (gpu.hbm_tb_s * 1e12 * roofline.mem_eff)
    t_comp = flops / (gpu.peak_tflops(dtype) * 1e12 * roofline.comp_eff)
    if shape.is_moe and params.ep > 1:
        copies = params.copies_per_token or shape.experts_per_token
        volume = b * shape.moe_layers * shape.expert_width * (params.dispatch_bytes + params.combine_bytes) * copies
        t_comm = volume / (params.network_gb_s * 1e9) + shape.moe_layers * params.a2a_latency_us * 1e-6
    else:
        t_comm = np.zeros_like(b)
    compute_side = np.maximum(t_mem, t_comp)
    busy = np.maximum(compute_side, t_comm) if params.overlap else compute_side + t_comm
    total = roofline.launch_ms * 1e-3 + busy
    power = gpu.idle_w + (gpu.tdp_w - gpu.idle_w) * compute_side / total
    return total * 1e3, power * total


def dp_ep_table(shape: ModelShape, gpu: GPU, dtype: str = "fp8", params: DpEpParams = DpEpParams(),
                roofline: RooflineParams = RooflineParams(), name: str | None = None,
                b_axis: np.ndarray | None = None, k_axis: np.ndarray | None = None) -> StepTable:
    b_axis = default_b_axis() if b_axis is None else np.asarray(b_axis)
    k_axis = default_k_axis() if k_axis is None else np.asarray(k_axis)
    bb, kk = np.meshgrid(b_axis, k_axis)
    ms, joules = step_time_ms(shape, gpu, bb.ravel(), kk.ravel(), dtype=dtype, params=params, roofline=roofline)
    rows = {"batch_tokens": bb.ravel(), "kv_tokens": kk.ravel(), "status": "ok", "step_ms": ms, "step_ms_p10": ms,
            "step_ms_p90": ms, "repeats": 0, "throttled": False, "power_w": joules / (ms * 1e-3), "energy_j": joules}
    meta = table_meta(name=name, kind="analytic-dp-ep", caveat=roofline_caveat(), device=gpu.name, gpu=gpu.to_dict(),
                      gpus=1, dtype=dtype, model_shape=shape.to_dict(), dp_ep=asdict(params), roofline=asdict(roofline),
                      **memory_fields(shape, dtype, head_split=1, gpus=1,
                                      weight_bytes_per_gpu=stored_bytes_per_gpu(shape, params.ep, dtype),
                                      device_memory_gb=gpu.device_memory_bytes / 1e9))
    return StepTable.from_points(rows, meta)
