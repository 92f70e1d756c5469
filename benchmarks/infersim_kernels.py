"""The estimate's kernel sources on the two GPUs the kernel database lacks, against kernels measured there: InferSim's
H800 and H20 measurements (``benchmarks/data/infersim``, copied with their provenance).

    python benchmarks/infersim_kernels.py [--markdown]

Three kernels of DeepSeek-style decode, one layer each: a dense fp8 GEMM (DeepGEMM) at M = 16 to 4,096 over
every shape InferSim measured; the routed experts' fp8 up and down projections in DeepEP's decode layout
(DeepGEMM's masked grouped GEMM; V3's experts on H800, Qwen3-30B-A3B's on H20, the only shape it measured there)
at 16 to 512 tokens a GPU; MLA decode (V3's 128 heads, bf16) at 1 to 512 requests over 1k to 128k tokens. Each
priced by:

- the H100's measured kernels (aiconfigurator-core, SGLang's data), which the estimate takes for the H800, its twin
  (``hw_profile.estimate.estimate.kernel_twin``); the H20 has no twin;
- the kernel-level roofline with each launch's fixed latency (``hw_profile.estimate.estimate.roofline_parts``), which prices
  both GPUs otherwise.

Printed: the median of source / measured over the points, and the share of points within 25%. Nothing here
changes the estimate; it says how far each source is from kernels measured on the GPU itself.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_to_real import print_table  # the same tables as docs/sim-to-real.md's

from hw_profile.estimate.engine_costs import engine_defaults
from hw_profile.estimate.estimate import KERNEL_FLOOR_US, Deployment, _bound, kernel_source, roofline_parts
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import get_shape

DATA = Path(__file__).resolve().parent / "data" / "infersim"
TWIN = "H100"
GEMM_M = (16, 64, 256, 1024, 4096)


def read(name: str) -> pd.DataFrame:
    return pd.read_csv(DATA / name)


def deployment(gpu: str, dtype: str, gpus: int = 1, ep: int = 1, parallel: str = "tp") -> Deployment:
    # one query token per request and balanced routing, as the measurements ran
    costs = replace(engine_defaults("sglang"), verify_tokens_per_request=1.0, moe_imbalance=1.0)
    return Deployment(get_gpu(gpu), gpus=gpus, ep=ep, dtype=dtype, parallel=parallel, engine="sglang", costs=costs)


def has_twin_data() -> bool:
    return kernel_source("auto", get_gpu(TWIN), "sglang") is not None


# --- dense GEMMs --------------------------------------------------------------------------------------------------

def gemm_roofline_us(frame: pd.DataFrame, gpu: str) -> np.ndarray:
    """One fp8 GEMM as the kernel-level roofline prices the dense family: the slower of its weight reads and its
    arithmetic, plus one launch's fixed latency."""
    m, n, k = (frame[c].to_numpy(float) for c in ("m", "n", "k"))
    # fp8: a byte a weight
    return _bound(k * n, 2.0 * m * k * n, deployment(gpu, "fp8"), "fp8") * 1e3 + KERNEL_FLOOR_US["gemm"]


def gemm_twin_us(frame: pd.DataFrame) -> np.ndarray:
    """The same GEMMs from the twin's measured fp8 block-scaled GEMM grid."""
    from hw_profile.kernels.database import gemm_grid, system_of

    base, system, version = system_of(TWIN, "sglang")
    grid = gemm_grid(base, system, "sglang", version, "fp8_block").grid
    m, n, k = (frame[c].to_numpy(float) for c in ("m", "n", "k"))
    return grid.lookup(m, n, k)[0] * 1e3


# --- routed experts -----------------------------------------------------------------------------------------------

def experts_roofline_us(frame: pd.DataFrame, gpu: str, model: str) -> np.ndarray:
    """One MoE layer's routed experts on one GPU of an expert-parallel group of ``num_gpus``, at the measured tokens
    a GPU, by the roofline (data-parallel attention: every GPU's tokens go to the group)."""
    shape = get_shape(model)
    out = []
    for ep, b in zip(frame["num_gpus"], frame["batch_size_per_gpu"], strict=True):
        dep = deployment(gpu, "fp8", gpus=int(ep), ep=int(ep), parallel="dp")
        parts = roofline_parts(shape, dep, np.array([float(b)]), np.array([0.0]))
        out.append(float(parts["moe"][0]) / shape.moe_layers * 1e3)
    return np.array(out)


def experts_twin_us(frame: pd.DataFrame, model: str) -> np.ndarray:
    """The same from the twin's measured DeepEP expert kernel for the group (at every GPU's tokens)."""
    from hw_profile.kernels.ops import moe_times

    shape = get_shape(model)
    out = []
    for ep, b in zip(frame["num_gpus"], frame["batch_size_per_gpu"], strict=True):
        t = moe_times(shape, TWIN, "sglang", "fp8", int(ep), np.array([float(b * ep)]), wide_ep=True)
        out.append(float(t.parts["moe"][0]) / shape.moe_layers * 1e3)
    return np.array(out)


# --- MLA decode ---------------------------------------------------------------------------------------------------

def mla_roofline_us(frame: pd.DataFrame, gpu: str) -> np.ndarray:
    shape = get_shape("deepseek-v3")  # its cache at the engines' default type, bf16, as measured
    r = frame["batch_size"].to_numpy(float)
    parts = roofline_parts(shape, deployment(gpu, "bf16"), r, r * frame["kv_len"].to_numpy(float))
    return parts["attention"] / shape.layers * 1e3


def mla_twin_us(frame: pd.DataFrame) -> np.ndarray:
    from hw_profile.kernels.ops import step_times

    shape = get_shape("deepseek-v3")
    r = frame["batch_size"].to_numpy(float)
    # fp8 weights (the checkpoint's), the cache at bf16 (the shape's default), as measured
    t = step_times(shape, TWIN, "sglang", "fp8", 1, 1, r, r, frame["kv_len"].to_numpy(float))
    return t.parts["attention"] / shape.layers * 1e3


# --- the comparison -----------------------------------------------------------------------------------------------

def cases() -> list[tuple[str, str, pd.DataFrame, str, str]]:
    """(kernel, GPU, rows, measured column, model of the expert rows or "") for every file."""
    out = []
    for gpu in ("H800", "H20"):
        g = read(f"gemm-{gpu.lower()}.csv")
        out.append(("dense fp8 GEMM", gpu, g[g["m"].isin(GEMM_M)].reset_index(drop=True), "latency_us", ""))
        e = read(f"grouped_gemm-decode-{gpu.lower()}.csv")
        model = "deepseek-v3" if gpu == "H800" else "qwen3-30b-a3b"
        shape = get_shape(model)
        e = e[(e["hidden_size"] == shape.hidden) & (e["intermediate_size"] == shape.expert_intermediate)
              & (e["num_experts"] == shape.experts) & (e["topk"] == shape.experts_per_token)].copy()
        e["measured_us"] = e["up_proj_us"] + e["down_proj_us"]
        out.append((f"routed experts ({model})", gpu, e.reset_index(drop=True), "measured_us", model))
        out.append(("MLA decode (V3, bf16)", gpu, read(f"mla-decode-{gpu.lower()}-128-512-64.csv"), "latency_us",
                    ""))
    return out


def priced(kernel: str, gpu: str, frame: pd.DataFrame, model: str, twin: bool) -> dict[str, np.ndarray | None]:
    """Each source's price of the rows (us), or None where a source does not apply (``twin``: the twin's data is
    installed and ``gpu`` is the H800)."""
    if kernel.startswith("dense"):
        return {"twin": gemm_twin_us(frame) if twin else None, "roofline": gemm_roofline_us(frame, gpu)}
    if model:
        return {"twin": experts_twin_us(frame, model) if twin else None,
                "roofline": experts_roofline_us(frame, gpu, model)}
    return {"twin": mla_twin_us(frame) if twin else None, "roofline": mla_roofline_us(frame, gpu)}


def summary(ratio: np.ndarray | None) -> str:
    if ratio is None:
        return "-"
    return f"{np.median(ratio):.2f}x ({np.mean(np.abs(ratio - 1.0) <= 0.25) * 100:.0f}%)"


def rows() -> tuple[list[list[str]], list[list[str]]]:
    """The summary per (kernel, GPU), and the dense GEMMs by M."""
    table, by_m = [], []
    installed = has_twin_data()
    for kernel, gpu, frame, measured, model in cases():
        prices = priced(kernel, gpu, frame, model, installed and gpu == "H800")
        ratios = {src: None if p is None else p / frame[measured].to_numpy() for src, p in prices.items()}
        table.append([kernel, gpu, str(len(frame)), summary(ratios["twin"]), summary(ratios["roofline"])])
        if kernel.startswith("dense"):
            for m in GEMM_M:
                at = (frame["m"] == m).to_numpy()
                by_m.append([gpu, str(m), summary(None if ratios["twin"] is None else ratios["twin"][at]),
                             summary(ratios["roofline"][at])])
    return table, by_m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the markdown tables of docs/sim-to-real.md")
    args = ap.parse_args()
    if not has_twin_data():
        print("note: the kernel database (pip install 'dspark-sim[kernels]') is not installed: no twin column")
    table, by_m = rows()
    print(f"Source / measured, median over the points (share within 25%); twin: the {TWIN}'s measured kernels")
    print()
    print_table(["kernel", "GPU", "points", f"{TWIN}'s measured kernels", "roofline"], table, args.markdown)
    print()
    print("The dense GEMMs by M:")
    print()
    print_table(["GPU", "M", f"{TWIN}'s measured kernels", "roofline"], by_m, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
