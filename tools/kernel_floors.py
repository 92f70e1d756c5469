"""Where the kernel-level roofline's per-kernel latencies (``hw_profile.estimate.estimate.KERNEL_FLOOR_US``) come from.

A roofline prices a kernel by its bytes and FLOPs alone, so at one token it is several times faster than a real
step, whose small kernels each take a few microseconds whatever their size. The kernel database measures those
kernels on the GPUs it covers. At one token over a 2,048-token context, each measured family is compared with the
roofline of the same work on the same GPU (``roofline_parts(..., floors=False)``), and the excess is divided by the
family's launches per step:
- GEMMs: the dense GEMMs of ``shapes.dense_gemms`` and the LM head;
- attention: one per layer;
- the fused MoE: one per MoE layer.

The medians over every covered (GPU, engine) of ``GPUS`` and the models of ``MODELS`` are the constants.
DeepSeek-V4's attention is a module (projections, compressor, indexer, sparse attention), measured where the
database has it (Blackwell parts): its excess over the roofline of its attention and projections, per layer, is
``v4_attention``, and its hyper-connection mixing, which the roofline does not price at all, is ``mhc`` per layer.
DeepSeek sparse attention's decode module (projections, indexer, sparse MLA; DeepSeek-V3.2 and GLM-5.2, Hopper
and Blackwell) gives ``dsa_attention`` the same way.

    python -m tools.kernel_floors   # needs the kernels extra; about 30 s on a 2-core machine

It also checks them leave-one-GPU-out: floors taken from the other GPUs, added to the roofline of each GPU's
steps, against that GPU's measured kernels at 1, 8, 64 and 256 tokens.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hw_profile.hardware.shapes import ModelShape

GPUS = ("A100", "H100", "H200", "B200", "B300", "GB200", "GB300")
# (model, tensor-parallel GPUs, dtype): dense and MoE, GQA and MLA, bf16 and fp8
MODELS = (("qwen3-8b", 1, "bf16"), ("qwen3-8b", 1, "fp8"), ("qwen3-14b", 1, "bf16"), ("qwen3-30b-a3b", 1, "bf16"),
          ("qwen3-235b-a22b", 8, "bf16"), ("deepseek-v3", 8, "fp8"))
V4_MODELS = ("deepseek-v4-flash", "deepseek-v4-pro")  # on 8 tensor-parallel GPUs, fp8 with fp4 experts
CONTEXT = 2048
TOKENS = (1.0, 8.0, 64.0, 256.0)  # one request per token: plain decoding
FAMILIES = ("gemm", "attention", "moe")
V4_FAMILIES = ("v4_attention", "mhc")
DSA_MODELS = ("deepseek-v3.2", "glm-5.2")  # on 8 tensor-parallel GPUs, fp8
DSA_FAMILIES = ("dsa_attention",)


def _measured_and_roofline(tokens: np.ndarray, models, among: tuple[str, ...] | None = None) -> list[tuple]:
    """(gpu, engine, model, dtype, shape, tp GPUs, measured parts, roofline parts without floors) for every
    covered (GPU, engine), of the GPUs ``among`` if given, and every (model, tp GPUs, dtype) of ``models`` it has
    data for, at ``tokens`` (one request per token) over a ``CONTEXT``-token context."""
    from hw_profile.errors import HwProfileError
    from hw_profile.estimate.engine_costs import engine_defaults
    from hw_profile.estimate.estimate import Deployment, kernel_times, roofline_parts
    from hw_profile.hardware.gpus import get_gpu
    from hw_profile.hardware.shapes import get_shape
    from hw_profile.kernels import database as kernel_db
    from hw_profile.kernels.source import MeasuredKernels

    out = []
    for gpu, engine, _ in kernel_db.coverage():
        if among is not None and gpu not in among:
            continue
        for model, gpus, dtype in models:
            shape = get_shape(model)
            dep = Deployment(get_gpu(gpu), gpus=gpus, ep=1, dtype=dtype, parallel="tp", engine=engine,
                             costs=engine_defaults(engine))
            try:
                measured = kernel_times(MeasuredKernels(), shape, dep, tokens, tokens,
                                        np.full(tokens.shape, float(CONTEXT))).parts
            except HwProfileError:  # a layout (or V4 module) this (GPU, engine) has no data for
                continue
            out.append((gpu, engine, model, dtype, shape, gpus, measured,
                        roofline_parts(shape, dep, tokens, tokens * CONTEXT, floors=False)))
    return out


def cases() -> list[dict]:
    """One row per covered (GPU, engine, model) of ``GPUS`` and ``MODELS``: the measured kernels' excess over the
    roofline at one token, us per launch, per family (NaN for a dense model's MoE); the launches per step; and the
    step's kernel time, measured and roofline without floors, at ``TOKENS``."""
    from hw_profile.errors import HwProfileError
    from hw_profile.hardware.shapes import dense_gemms

    rows = []
    for gpu, engine, model, dtype, shape, gpus, measured, roof in _measured_and_roofline(np.array(TOKENS), MODELS,
                                                                                           GPUS):
        launches = {"gemm": sum(layers for *_, layers in dense_gemms(shape, gpus)) + 1,  # + the LM head
                    "attention": shape.layers, "moe": shape.moe_layers}
        excess = {
            "gemm": measured["gemm"][0] + measured["lm_head"][0] - roof["gemm"][0] - roof["lm_head"][0],
            "attention": measured["attention"][0] - roof["attention"][0],
            "moe": measured["moe"][0] - roof["moe"][0] if shape.is_moe else np.nan,
        }
        rows.append({"gpu": gpu, "engine": engine, "model": model, "dtype": dtype, "launches": launches,
                     **{f: excess[f] / launches[f] * 1e3 if launches[f] else np.nan for f in FAMILIES},
                     "measured_ms": sum(measured.values()), "roofline_ms": sum(roof.values())})
    if not rows:
        raise HwProfileError("kernel floors: the kernel database covers none of " + ", ".join(GPUS))
    return rows


def _module_cases(models: tuple[str, ...], family: str) -> list[tuple[dict, ModelShape, dict]]:
    """For every covered (GPU, engine) and model of ``models`` (8 tensor-parallel GPUs, fp8) whose attention the
    database measures as a module, projections inside: a row with the module's excess over the roofline of its
    attention and projections, us per layer at one token, under ``family``; with the shape and measured parts."""
    out = []
    for gpu, engine, model, _, shape, tp, measured, roof in _measured_and_roofline(
            np.array([1.0]), [(m, 8, "fp8") for m in models]):
        # the roofline's dense part holds the attention projections, which the measured module contains; a GPU
        # holds a share of them and DSA's replicated indexer whole
        projections = (shape.params_per_gpu(shape.layers * shape.attn_params_per_layer, tp)
                       / (shape.dense_params_per_gpu(tp) - shape.head_params / tp))
        module = measured["attention"][0] - roof["attention"][0] - projections * roof["gemm"][0]
        out.append(({"gpu": gpu, "engine": engine, "model": model, family: module / shape.layers * 1e3}, shape,
                    measured))
    return out


def v4_cases() -> list[dict]:
    """One row per covered (GPU, engine, V4 model) with V4 module data: the measured module's excess over the
    roofline of its attention and projections, and the measured mixing, us per layer, at one token."""
    return [{**row, "mhc": measured["mhc"][0] / shape.layers * 1e3}
            for row, shape, measured in _module_cases(V4_MODELS, "v4_attention")]


def dsa_cases() -> list[dict]:
    """The same for DeepSeek sparse attention's decode module (DeepSeek-V3.2, GLM-5.2): ``dsa_attention``."""
    return [row for row, _, _ in _module_cases(DSA_MODELS, "dsa_attention")]


def medians(rows: list[dict], families: tuple[str, ...] = FAMILIES) -> dict[str, float]:
    """Median excess per launch (us) of each family over ``rows``."""
    return {f: float(np.nanmedian([r[f] for r in rows])) for f in families}


def floor_ms(row: dict, floors: dict[str, float]) -> float:
    return sum(row["launches"][f] * floors[f] for f in FAMILIES) * 1e-3


def leave_one_gpu_out(rows: list[dict]) -> dict[str, np.ndarray]:
    """Median |log(roofline / measured)| of a step at each of ``TOKENS``, without floors and with floors taken from
    the other GPUs' rows."""
    plain, floored = [], []
    for gpu in sorted({r["gpu"] for r in rows}):
        floors = medians([r for r in rows if r["gpu"] != gpu])
        for r in (r for r in rows if r["gpu"] == gpu):
            plain.append(np.log(r["roofline_ms"] / r["measured_ms"]))
            floored.append(np.log((r["roofline_ms"] + floor_ms(r, floors)) / r["measured_ms"]))
    return {"without": np.median(np.abs(plain), axis=0), "with": np.median(np.abs(floored), axis=0)}


def main() -> int:
    from hw_profile.estimate.estimate import KERNEL_FLOOR_US
    from hw_profile.kernels.database import package_version

    rows = cases()
    print(f"kernel database: aiconfigurator-core {package_version()}; {len(rows)} (GPU, engine, model) cases")
    for family, us in medians(rows).items():
        print(f"{family}: {us:.1f} us per launch (KERNEL_FLOOR_US: {KERNEL_FLOOR_US[family]})")
    for label, modules, families in (("DeepSeek-V4 modules", v4_cases(), V4_FAMILIES),
                                     ("DeepSeek sparse attention modules", dsa_cases(), DSA_FAMILIES)):
        print(f"{label}: {len(modules)} (GPU, engine, model) cases")
        for family, us in medians(modules, families).items():
            print(f"{family}: {us:.1f} us per layer (KERNEL_FLOOR_US: {KERNEL_FLOOR_US[family]})")
    check = leave_one_gpu_out(rows)
    print("leave one GPU out, the roofline's step over the measured kernels' (median |log ratio|):")
    for label, errs in check.items():
        cells = ", ".join(f"{int(t)} tokens {e:.2f} ({np.exp(e):.2f}x)" for t, e in zip(TOKENS, errs, strict=True))
        print(f"  {label} floors: {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
