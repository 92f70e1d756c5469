"""Where the kernel-level roofline's per-kernel latencies (``hw_profile.estimate.KERNEL_FLOOR_US``) come from.

A roofline prices a kernel by its bytes and FLOPs alone, so at one token it is several times faster than a real
step, whose small kernels each take a few microseconds whatever their size. The kernel database measures those
kernels on the GPUs it covers. At one token over a 2,048-token context, each measured family is compared with the
roofline of the same work on the same GPU (``roofline_parts(..., floors=False)``), and the excess is divided by the
family's launches per step:
- GEMMs: the dense GEMMs of ``shapes.dense_gemms`` and the LM head;
- attention: one per layer;
- the fused MoE: one per MoE layer.

The medians over every covered (GPU, engine) of ``GPUS`` and the models of ``MODELS`` are the constants.

    python -m hw_profile.kernel_floors      # needs the kernels extra; about 20 s on a 2-core machine

Checked leave-one-GPU-out: floors taken from the other GPUs bring the roofline within a median 10% of the measured
kernels at 1, 8, 64 and 256 tokens. Without them, it was 71% at one token.
"""

from __future__ import annotations

import sys

import numpy as np

GPUS = ("A100", "H100", "H200", "B200", "B300", "GB200", "GB300")
# (model, tensor-parallel GPUs, dtype): dense and MoE, GQA and MLA, bf16 and fp8
MODELS = (("qwen3-8b", 1, "bf16"), ("qwen3-8b", 1, "fp8"), ("qwen3-14b", 1, "bf16"), ("qwen3-30b-a3b", 1, "bf16"),
          ("qwen3-235b-a22b", 8, "bf16"), ("deepseek-v3", 8, "fp8"))
CONTEXT = 2048


def excess_per_launch() -> list[dict]:
    """One row per covered (GPU, engine, model): the measured kernels' excess over the roofline at one token, us per
    launch, for GEMMs, attention and the fused MoE (NaN for a dense model)."""
    from hw_profile import kernel_db
    from hw_profile.engine_costs import engine_defaults
    from hw_profile.errors import HwProfileError
    from hw_profile.estimate import Deployment, kernel_times, roofline_parts
    from hw_profile.gpus import get_gpu
    from hw_profile.shapes import dense_gemms, get_shape

    b, requests, context = np.array([1.0]), np.array([1.0]), np.array([float(CONTEXT)])
    rows = []
    for gpu, engine, _ in kernel_db.coverage():
        if gpu not in GPUS:
            continue
        for model, gpus, dtype in MODELS:
            shape = get_shape(model)
            dep = Deployment(get_gpu(gpu), gpus=gpus, ep=1, dtype=dtype, parallel="tp", engine=engine,
                             costs=engine_defaults(engine))
            try:
                measured = kernel_times(kernel_db, shape, dep, b, requests, context).parts
            except HwProfileError:  # a layout this (GPU, engine) has no data for
                continue
            roof = roofline_parts(shape, dep, b, b * CONTEXT, floors=False)
            gemms = sum(layers for *_, layers in dense_gemms(shape, gpus)) + 1  # + the LM head
            moe = (measured["moe"][0] - roof["routed"][0]) / shape.moe_layers if shape.is_moe else np.nan
            rows.append({
                "gpu": gpu, "engine": engine, "model": model, "dtype": dtype,
                "gemm": (measured["gemm"][0] + measured["lm_head"][0] - roof["dense"][0] - roof["lm_head"][0])
                / gemms * 1e3,
                "attention": (measured["attention"][0] - roof["attention"][0]) / shape.layers * 1e3,
                "moe": moe * 1e3,
            })
    return rows


def measured_floors() -> dict[str, float]:
    """Median excess per launch (us) of GEMMs, attention and the fused MoE over the covered GPUs."""
    rows = excess_per_launch()
    if not rows:
        from hw_profile.errors import HwProfileError

        raise HwProfileError("kernel floors: the kernel database covers none of " + ", ".join(GPUS))
    return {key: float(np.nanmedian([r[key] for r in rows])) for key in ("gemm", "attention", "moe")}


def main() -> int:
    from hw_profile.estimate import KERNEL_FLOOR_US
    from hw_profile.kernel_db import package_version

    floors = measured_floors()
    print(f"kernel database: aiconfigurator-core {package_version()}")
    for key, us in floors.items():
        print(f"{key}: {us:.1f} us per launch (KERNEL_FLOOR_US: {KERNEL_FLOOR_US[key]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
