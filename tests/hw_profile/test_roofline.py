"""The analytic model against hand-computed cases."""

import math

import numpy as np
import pytest

from hw_profile.hardware.gpus import GPUS, get_gpu, gpu_from_file
from hw_profile.hardware.shapes import get_shape
from hw_profile.kernels.roofline import RooflineParams, analytic_table, step_time_ms, weight_bytes
from hw_profile.tables.step_table import StepTable

H200 = get_gpu("H200")
Q8 = get_shape("qwen3-8b")


def sps(ms):
    return 1000.0 / np.asarray(ms)


def test_memory_bound_step_by_hand():
    # B = 1, K = 0: every bf16 weight read once at 80% of 4.8 TB/s, plus 0.15 ms launch
    ms, joules = step_time_ms(Q8, H200, 1, 0)
    t_mem = Q8.matmul_params * 2 / (4.8e12 * 0.8)
    assert float(ms) == pytest.approx(0.15 + t_mem * 1e3, rel=1e-12)
    assert float(ms) == pytest.approx(4.0918, abs=1e-3)
    # power: idle + (TDP - idle) x busy fraction
    busy = t_mem / (float(ms) * 1e-3)
    assert float(joules) == pytest.approx((90 + 610 * busy) * float(ms) * 1e-3)
    # K adds KV bytes: one million context tokens of Qwen3-8B (144 KiB each) at the same bandwidth
    ms_k, _ = step_time_ms(Q8, H200, 1, 1_000_000)
    assert float(ms_k - ms) == pytest.approx(1e6 * 147456 / (4.8e12 * 0.8) * 1e3, rel=1e-9)


def test_sps_flat_when_memory_bound_and_falling_when_compute_bound():
    b = np.array([1, 2, 4, 8, 16, 32, 64, 128])
    ms, _ = step_time_ms(Q8, H200, b, 0)
    s = sps(ms)
    assert s.max() / s.min() < 1.01  # memory-bound: the weights are read once whatever B is
    # the ridge B* = peak x comp_eff x 2 bytes / (2 x bandwidth x mem_eff) = 989.4 x 0.6 / (4.8 x 0.8) = 154.6:
    # flat up to B = 154, rising from 155 on
    at_ridge, _ = step_time_ms(Q8, H200, np.array([1, 154, 155]), 0)
    assert at_ridge[0] == at_ridge[1] < at_ridge[2]
    big = np.array([4096, 8192])
    ms_big, _ = step_time_ms(Q8, H200, big, 0)
    # compute-bound: t = launch + 2 x params x B / (peak x eff), SPS falls nearly as 1/B
    t_comp = 2 * Q8.matmul_params * big / (989.4e12 * 0.6) * 1e3
    assert ms_big == pytest.approx(0.15 + t_comp, rel=1e-12)
    assert sps(ms_big)[0] / sps(ms_big)[1] == pytest.approx(2.0, rel=0.02)
    # and time never falls as B grows
    grid, _ = step_time_ms(Q8, H200, np.arange(1, 5000), 0)
    assert np.all(np.diff(grid) >= 0)


def test_long_context_moves_the_ridge_right():
    b = np.array([64, 256, 1024])
    short, _ = step_time_ms(Q8, H200, b, 0)
    long, _ = step_time_ms(Q8, H200, b, 4_000_000)  # KV reads dominate: flat again in B
    assert sps(short)[0] / sps(short)[2] > 2.0
    assert sps(long)[0] / sps(long)[2] < 1.1


def test_moe_bytes_grow_with_distinct_experts():
    ds = get_shape("deepseek-v3")
    b = np.array([1.0, 8.0, 64.0, 1024.0])
    wb = weight_bytes(ds, b, dtype="fp8", gpus=8)
    expected = (ds.dense_params / 8 + 58 * 256 / 8 * (1 - (1 - 8 / 256) ** b) * ds.expert_params) * 1.0
    assert wb == pytest.approx(expected, rel=1e-12)
    ms, _ = step_time_ms(ds, H200, b, 0, dtype="fp8", gpus=8)
    # memory-bound at every B here, but SPS falls with B because more experts are read (a dense model stays flat)
    s = sps(ms)
    assert np.all(np.diff(s) < 0)
    assert s[0] / s[2] > 3.0
    # by hand at B = 1: dense part + 8 experts per MoE layer, split over 8 GPUs, fp8, plus 2 all-reduces per layer
    t_mem = (ds.dense_params + 58 * 8 * ds.expert_params) / 8 / (4.8e12 * 0.8)
    t_comm = 2 * 61 * (8e-6 + 7168 * 1 * 2 * 7 / 8 / 450e9)
    assert float(ms[0]) == pytest.approx((0.15e-3 + t_mem + t_comm) * 1e3, rel=1e-9)
    with pytest.raises(ValueError, match="divide"):
        step_time_ms(ds, H200, 1, 0, gpus=8, ep=3)


def test_dtype_peaks_and_nvlink_scaling():
    h100 = get_gpu("H100")
    big = 8192
    bf16, _ = step_time_ms(Q8, h100, big, 0, dtype="bf16")
    fp8, _ = step_time_ms(Q8, h100, big, 0, dtype="fp8")
    assert (float(fp8) - 0.15) == pytest.approx((float(bf16) - 0.15) / 2, rel=1e-3)
    a100 = get_gpu("A100")
    assert a100.peak_tflops("fp8") == a100.bf16_tflops  # no FP8 tensor cores
    assert get_gpu("H20").peak_tflops("bf16") == 148.0
    # H800: same chip as H100, NVLink 400 GB/s instead of 900: tensor-parallel all-reduces are 9/4 slower
    h800 = get_gpu("h800")
    t100, _ = step_time_ms(Q8, h100, 512, 0, gpus=8)
    t800, _ = step_time_ms(Q8, h800, 512, 0, gpus=8)
    ar = 2 * 36 * 512 * 4096 * 2 * 2 * 7 / 8
    assert float(t800 - t100) == pytest.approx(ar / 1e9 * (1 / 200 - 1 / 450) * 1e3, rel=1e-6)


def test_named_gpus_cover_the_datasheets():
    assert {"A100", "H100", "H200", "H800", "H20", "B200"} <= set(GPUS)
    b200 = get_gpu("B200")
    assert (b200.bf16_tflops, b200.hbm_tb_s, b200.tdp_w) == (2250.0, 8.0, 1000)
    with pytest.raises(KeyError, match="H200"):
        get_gpu("V100")


def test_custom_device_without_power_has_no_energy(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text('{"name": "cpu", "bf16_tflops": 0.2, "hbm_tb_s": 0.01, "memory_gb": 16}')
    dev = gpu_from_file(path)
    ms, joules = step_time_ms(Q8, dev, 1, 0, params=RooflineParams(launch_ms=0.0))
    assert float(ms) == pytest.approx(Q8.matmul_params * 2 / (0.01e12 * 0.8) * 1e3)
    assert math.isnan(float(joules))
    (tmp_path / "bad.json").write_text('{"name": "x", "bf16_tflops": -1, "hbm_tb_s": 1, "memory_gb": 1}')
    with pytest.raises(ValueError, match="bf16_tflops"):
        gpu_from_file(tmp_path / "bad.json")


def test_analytic_table_round_trip(tmp_path):
    t = analytic_table("deepseek-v3", "H200", dtype="fp8", gpus=8, b_axis=[1, 8, 64], k_axis=[0, 4096])
    path = t.write(tmp_path / "ds.csv")
    back = StepTable.read(path)
    assert back.meta["kind"] == "analytic" and back.meta["expert_parallel"] == 8
    assert back.meta["model_shape"]["experts"] == 256
    assert back.grid.step_ms(8, 0) == pytest.approx(t.grid.step_ms(8, 0), rel=1e-5)
    assert back.energy_grid is not None


def test_markov_head_costs_by_hand():
    from hw_profile.hardware.gpus import get_gpu
    from hw_profile.kernels.roofline import markov_head_costs

    h200 = get_gpu("H200")
    c = markov_head_costs(h200, rank=256, vocab=151936, dtype="bf16")
    assert c["per_position_ms"] == pytest.approx(256 * 151936 * 2 / (4.8e12 * 0.8) * 1e3)
    assert c["per_row_position_ms"] == pytest.approx(2 * 256 * 151936 / (989.4e12 * 0.6) * 1e3)
    assert c["rank"] == 256
