"""An analytic (roofline) model of one forward step, and tables generated from it.

For B new tokens reading K KV tokens on ``gpus`` GPUs (tensor parallel, weights and KV split evenly):

    bytes   = weights read x dtype bytes + K x KV bytes per token                  (read once per step)
    flops   = 2 x active matmul params x B  +  attention FLOPs per KV token x K     (one query per request)
    t_mem   = bytes / (gpus x bandwidth x mem_eff)
    t_comp  = flops / (gpus x peak(dtype) x comp_eff)
    t_comm  = 2 all-reduces per layer of B x hidden activations over NVLink (tensor parallel only)
    T(B, K) = launch + max(t_mem, t_comp) + t_comm

Dense models read every weight once whatever B is, so at small B the step is memory-bound and SPS is flat in B;
past the ridge point (B ~ peak x comp_eff / (bandwidth x mem_eff) x bytes per weight / 2 tokens, about 155 on an
H200 in bf16) it is compute-bound and SPS falls as 1/B. Long contexts move the ridge right (MagicDec), which is why
K is an axis. The efficiencies are typical achieved fractions of peak for large GEMMs and streaming reads, not
measurements of this code.

Mixture of experts (``shape.is_moe``, see ``hw_profile.hardware.moe``): the weights read are the dense part (attention,
dense MLPs, shared experts, router, head) plus, per MoE layer, only the experts the step's B tokens touch,
E x (1 - (1 - k/E)^B) in expectation; FLOPs use the active parameters (k experts per token). So an MoE step's
bytes grow with B until every expert is touched, and SPS falls in B well before a dense model's would.
Parallelism: attention, dense MLPs, shared experts and the head are tensor-parallel over ``gpus`` (DeepSeek sparse
attention's indexer is replicated, ``ModelShape.replicated_params``, as the engines build it); routed experts
are expert-parallel over ``ep`` groups (default ``gpus``: one group per GPU) and tensor-parallel inside a group.
Every GPU holds all B hidden states after the attention all-reduce, so an MoE layer ends in the same all-reduce as
a dense MLP (no all-to-all: DeepSeek's data-parallel attention with all-to-all dispatch is not modelled), and the
busiest group's extra load (routing imbalance) is not modelled either.

Compressed sparse attention (DeepSeek-V4, see hw_profile.hardware.shapes) reads per context token only the indexer's keys
and the most compressed rows (``kv_read_bytes_per_token``), and per query token its selected rows and window
(``attn_read_bytes_per_query_token``, ``attn_flops_per_query_token``); routed experts stored in fp4 are read at
half a byte (``expert_bytes``).

Attention FLOPs per KV token are the shape's (``ModelShape.attn_flops_per_kv_token``: GQA 4 x layers x heads x
head_dim; MLA in its weight-absorbed decode form). They are counted at one query per request: B/R queries per
request would multiply them by B/R, but the table's axes (B, K) do not carry R, and at decode this term is small
beside the KV bytes it comes with, except for MLA at long context, where it is the point of the design.

Peaks per dtype come from the GPU entry (``GPU.peak_tflops``): bf16/fp16 the dense 16-bit tensor rate, fp8 the FP8
rate where the part has FP8 tensor cores, fp32 the TF32 tensor rate. Weight bytes follow the dtype; KV bytes too.

Tensor-parallel all-reduces run at ``params.nvlink_gb_s`` achieved bus bandwidth on a 900 GB/s NVLink-4 part,
scaled by the part's own NVLink figure (an H800's 400 GB/s gets 4/9 of it).

Energy per step: board power rises from idle to TDP with the busier of compute and memory,
P = idle + (TDP - idle) x max(t_comp, t_mem) / T, so E = P x T (times the GPUs). NaN where the device's power is
unknown (a CPU described by ``hw-profile peaks``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hw_profile.hardware.dtypes import DTYPE_BYTES, kv_cache_bytes
from hw_profile.hardware.gpus import GPU, get_gpu
from hw_profile.hardware.moe import routed_weight_params
from hw_profile.hardware.shapes import ModelShape, get_shape
from hw_profile.tables.sidecar import memory_fields, roofline_caveat
from hw_profile.tables.step_table import StepTable, table_meta

# fp4 and w4a16 (fp4 weights run in 16-bit arithmetic, as Marlin kernels do): expert storage only (expert_dtype)
_REFERENCE_NVLINK_GB_S = 900.0  # the link RooflineParams.nvlink_gb_s was set for (H100/H200 SXM)


@dataclass(frozen=True)
class RooflineParams:
    comp_eff: float = 0.6
    mem_eff: float = 0.8
    launch_ms: float = 0.15  # fixed per-step cost with CUDA graphs: kernel launches, sampling, host sync
    nvlink_gb_s: float = 450.0  # achieved all-reduce bus bandwidth per GPU on a 900 GB/s NVLink-4 part
    allreduce_us: float = 8.0  # latency of one small all-reduce


def expert_bytes(shape: ModelShape, dtype: str) -> float:
    """Bytes per routed-expert weight: the shape's ``expert_dtype`` where it stores experts narrower (V4's fp4)."""
    return min(DTYPE_BYTES[shape.expert_dtype], DTYPE_BYTES[dtype]) if shape.expert_dtype else DTYPE_BYTES[dtype]


def expert_compute_dtype(shape: ModelShape, dtype: str) -> str:
    """The arithmetic the routed experts run in: 16-bit for ``w4a16`` experts (fp4 weights widened in the kernel),
    else the deployment's (fp4 experts with fp8 activations run at the fp8 rate)."""
    return "bf16" if shape.expert_dtype == "w4a16" else dtype


def stored_weight_bytes(shape: ModelShape, dtype: str) -> float:
    """Bytes of every stored weight, routed experts at their own storage type."""
    routed = shape.moe_layers * shape.experts * shape.expert_params
    return (shape.total_params - routed) * DTYPE_BYTES[dtype] + routed * expert_bytes(shape, dtype)


def stored_weight_bytes_per_gpu(shape: ModelShape, dtype: str, gpus: int) -> float:
    """Bytes one of ``gpus`` tensor-parallel GPUs stores: a share of every weight, the replicated ones whole."""
    replicated = shape.replicated_params * DTYPE_BYTES[dtype]
    return (stored_weight_bytes(shape, dtype) - replicated) / gpus + replicated


def weight_bytes(shape: ModelShape, batch_tokens: np.ndarray | float, dtype: str = "bf16", gpus: int = 1,
                 ep: int | None = None) -> np.ndarray:
    """Weight bytes one GPU reads in a step of B tokens (elementwise over B)."""
    b = np.asarray(batch_tokens, dtype=float)
    wbytes = DTYPE_BYTES[dtype]
    if not shape.is_moe:
        return np.full_like(b, shape.dense_params_per_gpu(gpus) * wbytes)
    return (shape.dense_params_per_gpu(gpus) * wbytes
            + routed_weight_params(shape, b, gpus=gpus, ep=ep) * expert_bytes(shape, dtype))


def attention_bytes_flops(shape: ModelShape, b: np.ndarray, k: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """KV bytes read and attention FLOPs of a step (all GPUs together): per KV token of context, per query token
    (compressed sparse attention's selected rows and window, a Gated DeltaNet token's state) and per request (a
    Gated DeltaNet request's states), at one request a token: these tables' K axis carries no request count, so a
    request's verified tokens are priced as if each were its own (``hw-profile estimate`` prices R = B / q)."""
    kv_scale = kv_cache_bytes(shape, dtype) / 2.0  # the one cache type rule every producer prices
    read = (k * shape.kv_read_bytes_per_token
            + b * (shape.attn_read_bytes_per_query_token + shape.attn_read_bytes_per_request)) * kv_scale
    flops = shape.attn_flops_per_kv_token * k + shape.attn_flops_per_query_token * b
    return read, flops


def step_time_ms(
    shape: ModelShape,
    gpu: GPU,
    batch_tokens: np.ndarray | float,
    kv_tokens: np.ndarray | float,
    dtype: str = "bf16",
    gpus: int = 1,
    params: RooflineParams = RooflineParams(),
    ep: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Step time (ms) and energy (J, all GPUs together) of one forward, elementwise over arrays of B and K.

    ep: expert-parallel groups for an MoE shape (default: one per GPU); ignored for dense shapes."""
    b = np.asarray(batch_tokens, dtype=float)
    k = np.asarray(kv_tokens, dtype=float)
    wbytes = DTYPE_BYTES[dtype]
    if shape.is_moe:
        ep = gpus if ep is None else ep
        if ep < 1 or gpus % ep:
            raise ValueError(f"expert-parallel groups ({ep}) must divide the GPUs ({gpus})")
        # per GPU already; scale back up so the common division by gpus below applies to the KV part only
        per_gpu_weights = weight_bytes(shape, b, dtype=dtype, gpus=gpus, ep=ep)
        bytes_read = per_gpu_weights * gpus
    else:
        bytes_read = shape.dense_params_per_gpu(gpus) * gpus * wbytes
    kv_read, attn_flops = attention_bytes_flops(shape, b, k, dtype)
    bytes_read = bytes_read + kv_read
    # every GPU multiplies the replicated weights (DSA's indexer) by all the step's tokens
    flops = 2.0 * shape.params_per_gpu(shape.matmul_params, gpus) * gpus * b + attn_flops
    t_mem = bytes_read / (gpus * gpu.hbm_tb_s * 1e12 * params.mem_eff)
    t_comp = flops / (gpus * gpu.peak_tflops(dtype) * 1e12 * params.comp_eff)
    t_comm = allreduce_s(shape, gpu, b, dtype, gpus, params)
    busy = np.maximum(t_mem, t_comp)
    total = params.launch_ms * 1e-3 + busy + t_comm
    power = gpu.idle_w + (gpu.tdp_w - gpu.idle_w) * busy / total
    return total * 1e3, power * total * gpus


def link_gb_s(gpu: GPU, params: RooflineParams = RooflineParams()) -> float:
    """Achieved all-reduce bus bandwidth per GPU: ``params.nvlink_gb_s`` scaled by the part's NVLink figure."""
    return params.nvlink_gb_s * (gpu.nvlink_gb_s / _REFERENCE_NVLINK_GB_S if gpu.nvlink_gb_s else 1.0)


def allreduce_s(shape: ModelShape, gpu: GPU, batch_tokens: np.ndarray, dtype: str, gpus: int,
                params: RooflineParams = RooflineParams()) -> np.ndarray:
    """Seconds of a step's tensor-parallel all-reduces: two per layer of B x hidden activations (0 on one GPU)."""
    b = np.asarray(batch_tokens, dtype=float)
    if gpus <= 1:
        return np.zeros_like(b)
    ar_bytes = b * shape.hidden * DTYPE_BYTES[dtype] * 2.0 * (gpus - 1) / gpus
    return 2 * shape.layers * (params.allreduce_us * 1e-6 + ar_bytes / (link_gb_s(gpu, params) * 1e9))


def markov_head_costs(gpu: GPU, rank: int, vocab: int, dtype: str = "bf16",
                      params: RooflineParams = RooflineParams(), hidden: int = 0) -> dict:
    """DSpark's sequential Markov head, per draft position: rows x rank @ rank x vocab. Its weights are read once
    per position (``per_position_ms``) and its FLOPs grow with the rows (``per_row_position_ms``); a drafter
    sidecar records both and the simulator charges gamma x max(per_position, per_row_position x rows).

    ``hidden`` > 0 adds the confidence head, which runs at the same positions: one logit per row from the
    backbone's hidden state and the Markov embedding of the previous token, a (hidden + rank)-vector read once per
    position and 2 x (hidden + rank) FLOPs per row (``confidence_head``: its width). Beside the rank x vocab
    transition it is small (about 0.01% of the bytes for Qwen3-8B), but it is part of what a DSpark step drafts."""
    wbytes = DTYPE_BYTES[dtype]
    conf = hidden + rank if hidden else 0
    out = {
        "per_position_ms": (rank * vocab + conf) * wbytes / (gpu.hbm_tb_s * 1e12 * params.mem_eff) * 1e3,
        "per_row_position_ms": 2.0 * (rank * vocab + conf) / (gpu.peak_tflops(dtype) * 1e12 * params.comp_eff) * 1e3,
        "rank": rank,
    }
    if conf:
        out["confidence_head"] = conf
    return out


def drafter_params(params: RooflineParams, drafter_layers: int, target_layers: int) -> RooflineParams:
    """The roofline parameters of a drafter's table: ``launch_ms`` is the target's fixed per-step overhead, most
    of which is per-layer kernel launches, so a drafter of ``drafter_layers`` pays that share of it (a 3-layer
    drafter of a 43-layer target 3/43), never more than the whole."""
    share = min(drafter_layers / target_layers, 1.0) if target_layers > 0 else 1.0
    return replace(params, launch_ms=params.launch_ms * share)


def default_b_axis(max_tokens: int = 16384) -> np.ndarray:
    small = np.arange(1, 33)
    big = np.unique(np.round(32 * 1.25 ** np.arange(1, 60)).astype(int))
    return np.concatenate([small, big[big <= max_tokens]]).astype(int)


def default_k_axis(max_kv: int = 4_194_304) -> np.ndarray:
    geo = np.unique(np.round(512 * 1.5 ** np.arange(0, 40)).astype(int))
    return np.concatenate([[0], geo[geo <= max_kv]]).astype(int)


def analytic_table(
    model: str | ModelShape,
    gpu: str | GPU,
    dtype: str = "bf16",
    gpus: int = 1,
    b_axis: np.ndarray | None = None,
    k_axis: np.ndarray | None = None,
    params: RooflineParams = RooflineParams(),
    name: str | None = None,
    ep: int | None = None,
) -> StepTable:
    shape = get_shape(model) if isinstance(model, str) else model
    dev = get_gpu(gpu) if isinstance(gpu, str) else gpu
    b_axis = default_b_axis() if b_axis is None else np.asarray(b_axis)
    k_axis = default_k_axis() if k_axis is None else np.asarray(k_axis)
    bb, kk = np.meshgrid(b_axis, k_axis)
    ms, joules = step_time_ms(shape, dev, bb.ravel(), kk.ravel(), dtype=dtype, gpus=gpus, params=params, ep=ep)
    rows = {
        "batch_tokens": bb.ravel(),
        "kv_tokens": kk.ravel(),
        "status": "ok",
        "step_ms": ms,
        "step_ms_p10": ms,
        "step_ms_p90": ms,
        "repeats": 0,
        "throttled": False,
        "power_w": joules / (ms * 1e-3),
        "energy_j": joules,
    }
    moe = {"expert_parallel": ep if ep is not None else gpus} if shape.is_moe else {}
    meta = table_meta(
        name=name,
        kind="analytic",
        device=dev.name,
        gpu=dev.to_dict(),
        gpus=gpus,
        dtype=dtype,
        model_shape=shape.to_dict(),
        roofline=params.__dict__,
        caveat=roofline_caveat(),
        **memory_fields(shape, dtype, head_split=gpus, gpus=gpus,
                        weight_bytes_per_gpu=stored_weight_bytes_per_gpu(shape, dtype, gpus),
                        device_memory_gb=dev.device_memory_bytes / 1e9),
        **moe,
    )
    return StepTable.from_points(rows, meta)
