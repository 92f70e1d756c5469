"""A small analytic (roofline) model of one forward step, and tables generated from it.

For B new tokens reading K KV tokens on ``gpus`` GPUs (tensor parallel, weights and KV split evenly):

    bytes   = matmul weights x dtype bytes + K x KV bytes per token          (read once per step)
    flops   = 2 x matmul params x B  +  4 x layers x heads x head_dim x K     (attention at one query per request)
    t_mem   = bytes / (gpus x bandwidth x mem_eff)
    t_comp  = flops / (gpus x peak x comp_eff)
    t_comm  = 2 all-reduces per layer of B x hidden activations over NVLink (tensor parallel only)
    T(B, K) = launch + max(t_mem, t_comp) + t_comm

Decode reads every weight once whatever B is, so at small B the step is memory-bound and SPS is flat in B; past
the ridge point (B ~ peak x comp_eff / (bandwidth x mem_eff) tokens) it is compute-bound and SPS falls as 1/B.
Long contexts move the ridge right (MagicDec), which is why K is an axis. The efficiencies are typical achieved
fractions of peak for large GEMMs and streaming reads, not measurements of this code.

Energy per step: board power rises from idle to TDP with the busier of compute and memory,
P = idle + (TDP - idle) x max(t_comp, t_mem) / T, so E = P x T.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hw_profile.gpus import GPU, get_gpu
from hw_profile.shapes import ModelShape, get_shape
from hw_profile.table import StepTable, table_meta

DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0}


@dataclass(frozen=True)
class RooflineParams:
    comp_eff: float = 0.6
    mem_eff: float = 0.8
    launch_ms: float = 0.15  # fixed per-step cost with CUDA graphs: kernel launches, sampling, host sync
    nvlink_gb_s: float = 450.0  # achieved all-reduce bus bandwidth per GPU
    allreduce_us: float = 8.0  # latency of one small all-reduce


def step_time_ms(
    shape: ModelShape,
    gpu: GPU,
    batch_tokens: np.ndarray | float,
    kv_tokens: np.ndarray | float,
    dtype: str = "bf16",
    gpus: int = 1,
    params: RooflineParams = RooflineParams(),
) -> tuple[np.ndarray, np.ndarray]:
    """Step time (ms) and energy (J) of one forward, elementwise over arrays of B and K."""
    b = np.asarray(batch_tokens, dtype=float)
    k = np.asarray(kv_tokens, dtype=float)
    wbytes = DTYPE_BYTES[dtype]
    bytes_read = shape.matmul_params * wbytes + k * shape.kv_bytes_per_token * (wbytes / 2.0)
    flops = 2.0 * shape.matmul_params * b + 4.0 * shape.layers * shape.heads * shape.head_dim * k
    t_mem = bytes_read / (gpus * gpu.hbm_tb_s * 1e12 * params.mem_eff)
    t_comp = flops / (gpus * gpu.bf16_tflops * 1e12 * params.comp_eff)
    if gpus > 1:
        ar_bytes = b * shape.hidden * wbytes * 2.0 * (gpus - 1) / gpus
        t_comm = 2 * shape.layers * (params.allreduce_us * 1e-6 + ar_bytes / (params.nvlink_gb_s * 1e9))
    else:
        t_comm = np.zeros_like(b)
    busy = np.maximum(t_mem, t_comp)
    total = params.launch_ms * 1e-3 + busy + t_comm
    power = gpu.idle_w + (gpu.tdp_w - gpu.idle_w) * busy / total
    return total * 1e3, power * total * gpus


def markov_head_ms(gpu: GPU, rank: int, vocab: int, rows: int, positions: int, dtype: str = "bf16",
                   params: RooflineParams = RooflineParams()) -> float:
    """DSpark's sequential Markov head: per draft position, rows x rank @ rank x vocab, positions one after another."""
    wbytes = DTYPE_BYTES[dtype]
    t_mem = rank * vocab * wbytes / (gpu.hbm_tb_s * 1e12 * params.mem_eff)
    t_comp = 2.0 * rows * rank * vocab / (gpu.bf16_tflops * 1e12 * params.comp_eff)
    return positions * max(t_mem, t_comp) * 1e3


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
) -> StepTable:
    shape = get_shape(model) if isinstance(model, str) else model
    dev = get_gpu(gpu) if isinstance(gpu, str) else gpu
    b_axis = default_b_axis() if b_axis is None else np.asarray(b_axis)
    k_axis = default_k_axis() if k_axis is None else np.asarray(k_axis)
    bb, kk = np.meshgrid(b_axis, k_axis)
    ms, joules = step_time_ms(shape, dev, bb.ravel(), kk.ravel(), dtype=dtype, gpus=gpus, params=params)
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
    meta = table_meta(
        name=name,
        kind="analytic",
        device=dev.name,
        gpu=dev.to_dict(),
        gpus=gpus,
        dtype=dtype,
        model_shape=shape.to_dict(),
        roofline=params.__dict__,
    )
    return StepTable.from_points(rows, meta)
