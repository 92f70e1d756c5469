"""Published KV pool sizes against the pool each engine's rule gives (hw_profile/tables/kv_pool.py), uncalibrated.

Engines print their pool at every start ("GPU KV cache size: N tokens", vLLM; "KV Cache is allocated. #tokens: N",
SGLang) and people paste those lines into public issues: benchmarks/data/kv-pools/published.csv holds the ones
found, with their sources. This script predicts the rows whose model, GPU and settings the project can build, from
the same memory facts a table's sidecar records (``memory_fields``: the weights in the checkpoint's number type, the
KV cache as the engine keeps it) and the device's memory as its driver reports it, and prints the error of each.

    ./run python benchmarks/kv_pools.py
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_profile.hardware.gpus import get_gpu  # noqa: E402
from hw_profile.hardware.shapes import get_shape  # noqa: E402
from hw_profile.kernels.roofline import stored_weight_bytes_per_gpu  # noqa: E402
from hw_profile.tables.kv_pool import kv_pool  # noqa: E402
from hw_profile.tables.sidecar import MemoryFacts, memory_fields  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "kv-pools" / "published.csv"


@dataclass(frozen=True)
class Buildable:
    """A published row the project can predict: its source, and the deployment as the row states it."""

    source: str
    engine: str
    model: str  # a built-in shape
    gpu: str
    tp: int
    dtype: str  # the checkpoint's weights
    utilization: float = 0.9  # vLLM's gpu_memory_utilization
    mem_fraction_static: float | None = None  # SGLang's; None: its default
    note: str = ""


ROWS = [
    Buildable("vllm-project/vllm#21348", "vllm", "qwen3-235b-a22b", "H100", 4, "fp8"),
    Buildable("vllm-project/vllm#21348", "sglang", "qwen3-235b-a22b", "H100", 4, "fp8", mem_fraction_static=0.93),
    Buildable("sgl-project/sglang#11716", "sglang", "llama-3.1-70b", "H200", 8, "bf16",
              note="Llama-3.3-70B (Llama-3.1-70B's shape); the GPU is not named in the log: an H200 ASSUMED"),
]


def published() -> dict[tuple[str, str], int]:
    """(source, engine) -> the pool the row's log printed, tokens."""
    out = {}
    with DATA.open() as f:
        for row in csv.DictReader(f):
            if row["reported_pool_tokens"]:
                out[(row["source"], row["engine"])] = int(row["reported_pool_tokens"])
    return out


def predict(b: Buildable) -> int | None:
    shape, gpu = get_shape(b.model), get_gpu(b.gpu)
    f = memory_fields(shape, b.dtype, head_split=b.tp, gpus=b.tp, device_memory_gb=gpu.device_memory_bytes / 1e9,
                      weight_bytes_per_gpu=stored_weight_bytes_per_gpu(shape, b.dtype, b.tp))
    memory = MemoryFacts(f["device_memory_gb"], f["weight_bytes_per_gpu"], f["kv_bytes_per_token_per_gpu"],
                         f["activation_bytes_per_batch_token"], f["logits_bytes_per_request"],
                         f["state_bytes_per_request"])
    return kv_pool(memory, b.engine, utilization=b.utilization, mem_fraction_static=b.mem_fraction_static,
                   smi_mib=gpu.smi_mib, tp=b.tp).tokens


def main() -> int:
    seen = published()
    print("| source | engine | deployment | published tokens | predicted | error |")
    print("|---|---|---|---|---|---|")
    errors = []
    for b in ROWS:
        want, got = seen[(b.source, b.engine)], predict(b)
        err = (got - want) / want if got else float("nan")
        errors.append(abs(err))
        setting = f"util {b.utilization:g}" if b.engine == "vllm" else (
            f"mem_fraction_static {b.mem_fraction_static:g}" if b.mem_fraction_static else "default fraction")
        print(f"| {b.source} | {b.engine} | {b.model} {b.dtype}, {b.tp} x {b.gpu}, {setting} | {want:,} | "
              f"{got:,} | {err:+.1%} |" if got else f"| {b.source} | {b.engine} | {b.model} | {want:,} | none | - |")
    within = sum(e <= 0.03 for e in errors)
    print(f"\nwithin 3%: {within} of {len(errors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
