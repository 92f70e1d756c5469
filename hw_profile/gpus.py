"""Datasheet figures of named accelerators (dense 16-bit tensor throughput, memory bandwidth and size, board power).

Sources: NVIDIA's product datasheets (H100 SXM5, H200 SXM). Dense figures, not the 2:4-sparse ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GPU:
    name: str
    bf16_tflops: float  # dense
    hbm_tb_s: float
    memory_gb: float
    tdp_w: float
    idle_w: float

    def to_dict(self) -> dict:
        return asdict(self)


GPUS: dict[str, GPU] = {
    "H100": GPU("H100", bf16_tflops=989.4, hbm_tb_s=3.35, memory_gb=80, tdp_w=700, idle_w=90),
    "H200": GPU("H200", bf16_tflops=989.4, hbm_tb_s=4.8, memory_gb=141, tdp_w=700, idle_w=90),
}


def get_gpu(name: str) -> GPU:
    key = name.upper()
    if key not in GPUS:
        raise KeyError(f"unknown GPU {name!r}; known: {', '.join(sorted(GPUS))}")
    return GPUS[key]
