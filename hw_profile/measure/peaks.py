"""Achieved matmul throughput and weight-streaming bandwidth of the machine at hand (``hw-profile peaks``).

The roofline needs a device's peak FLOP rate and memory bandwidth. For a named GPU they come from its datasheet
(``hw_profile.hardware.gpus``); for the CPU a table was measured on there is no datasheet worth the name, so this measures
the two achieved rates the way a decode step uses them:

- matmul: a square GEMM (n = 2048 on the CPU, 8192 on a GPU) in the table's dtype, best of several runs;
- bandwidth: a matrix-vector product over a weight matrix much larger than the caches (256 MiB on the CPU, 2 GiB
  on a GPU), i.e. exactly the "read every weight once" of a memory-bound decode step, best of several runs.

The result is a device file (``GPU``'s fields) usable as ``hw-profile analytic --gpu FILE.json``. Since the figures
are achieved rates rather than datasheet peaks, compare with ``--comp-eff 1 --mem-eff 1``. Board power is not
known for a CPU, so the file has none and analytic tables made from it carry no energy.
"""

from __future__ import annotations

import time


def measure_peaks(device: str = "cpu", dtype: str = "fp32", repeats: int = 5) -> dict:
    import torch

    from hw_profile.measure.model_builder import torch_dtype

    dt = torch_dtype(dtype)
    dev = torch.device(device)
    n = 2048 if device == "cpu" else 8192
    a = torch.randn(n, n, device=dev, dtype=dt)
    b = torch.randn(n, n, device=dev, dtype=dt)
    rows = (256 if device == "cpu" else 2048) * 1024**2 // (a.element_size() * 4096)
    w = torch.randn(rows, 4096, device=dev, dtype=dt)
    x = torch.randn(4096, 1, device=dev, dtype=dt)

    def best(fn) -> float:
        fn()  # warm-up
        times = []
        for _ in range(repeats):
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return min(times)

    with torch.inference_mode():
        t_mm = best(lambda: a @ b)
        t_mv = best(lambda: w @ x)
    tflops = 2.0 * n**3 / t_mm / 1e12
    tb_s = w.numel() * w.element_size() / t_mv / 1e12
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        name, memory_gb = props.name, props.total_memory / 1e9
    else:
        name, memory_gb = f"cpu ({torch.get_num_threads()} threads)", _mem_total_gb()
    peaks = {
        "name": name,
        "bf16_tflops": round(tflops, 5),
        "hbm_tb_s": round(tb_s, 5),
        "memory_gb": round(memory_gb, 1),
        "measured_dtype": dtype,
        "method": f"best of {repeats}: {n}x{n} GEMM; GEMV over a {w.numel() * w.element_size() / 1024**2:.0f} MiB matrix",
    }
    if dtype == "fp32":
        peaks["tf32_tflops"] = peaks["bf16_tflops"]  # GPU.peak_tflops("fp32") reads this field
    return peaks


def _mem_total_gb() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return 0.0
