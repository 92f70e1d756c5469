"""Each engine's KV pool as its code sizes it (hw_profile/tables/kv_pool.py), from the memory the device reports."""

from __future__ import annotations

import pytest

from hw_profile.hardware.gpus import GPUS, get_gpu
from hw_profile.hardware.shapes import get_shape
from hw_profile.kernels.roofline import stored_weight_bytes_per_gpu
from hw_profile.tables.kv_pool import BLOCK_TOKENS, SGLANG_STARTUP_BYTES, kv_pool, sglang_default_fraction
from hw_profile.tables.sidecar import RUNTIME_BYTES_PER_GPU, MemoryFacts, memory_fields


def facts(model: str, gpu: str, tp: int = 1, dtype: str = "bf16") -> MemoryFacts:
    shape, part = get_shape(model), get_gpu(gpu)
    f = memory_fields(shape, dtype, head_split=tp, gpus=tp, device_memory_gb=part.device_memory_bytes / 1e9,
                      weight_bytes_per_gpu=stored_weight_bytes_per_gpu(shape, dtype, tp))
    return MemoryFacts(f["device_memory_gb"], f["weight_bytes_per_gpu"], f["kv_bytes_per_token_per_gpu"],
                       f["activation_bytes_per_batch_token"], f["logits_bytes_per_request"],
                       f["state_bytes_per_request"])


def test_the_device_reports_its_drivers_total_not_the_datasheets_gb():
    assert get_gpu("H100").device_memory_bytes == 79.11 * 2**30  # 84.9e9 bytes, not 80e9
    assert get_gpu("H200").device_memory_bytes == 139.8 * 2**30
    # a part without a recorded total: its datasheet GB read as GiB, less what the driver keeps
    assert get_gpu("H800").device_memory_bytes == pytest.approx(80 * 2**30 * 0.99)
    for name in ("H100", "A100", "H200", "B200"):  # the recorded totals agree with that rule within 0.2%
        gpu = GPUS[name]
        assert gpu.cuda_memory_gib / gpu.memory_gb == pytest.approx(0.99, abs=0.002), name


@pytest.mark.parametrize("gpu, tp, speculative, fraction", [
    ("H100", 1, False, 0.835), ("H100", 8, False, 0.818), ("H200", 1, False, 0.907), ("H200", 1, True, 0.892),
    ("B200", 8, False, 0.852)])
def test_sglangs_default_fraction_by_hand(gpu, tp, speculative, fraction):
    """reserved MiB = 512 + 1.5 x chunked prefill + 2 x the largest CUDA-graph batch + TP / 8 x 1024 (at least 10
    GiB over 60 GiB, 2 GiB more for an EAGLE or MTP drafter), of nvidia-smi's total: H100 tp1 512 + 12,288 + 512 +
    128 = 13,440 of 81,559 MiB."""
    assert sglang_default_fraction(get_gpu(gpu).smi_mib, tp, speculative) == fraction


def test_vllm_sizes_utilization_of_the_total_less_weights_activations_and_runtime_in_whole_blocks():
    m = facts("qwen3-8b", "H100")
    pool = kv_pool(m, "vllm", utilization=0.9, max_batch_tokens=8192, max_running=256)
    free = (79.11 * 2**30 * 0.9 - m.weight_bytes_per_gpu - m.activation_peak_bytes(8192, 256)
            - RUNTIME_BYTES_PER_GPU)
    assert pool.tokens == int(free / m.kv_bytes_per_token_per_gpu) // BLOCK_TOKENS * BLOCK_TOKENS
    assert pool.tokens % BLOCK_TOKENS == 0 and pool.engine == "vllm"


def test_sglang_sizes_its_fraction_of_the_startup_free_memory_less_weights():
    m = facts("llama-3.1-70b", "H200", tp=8)
    pool = kv_pool(m, "sglang", smi_mib=get_gpu("H200").smi_mib, tp=8)
    assert pool.fraction == sglang_default_fraction(143771, 8, False)
    free = pool.fraction * (139.8 * 2**30 - SGLANG_STARTUP_BYTES) - m.weight_bytes_per_gpu
    assert pool.tokens == int(free / m.kv_bytes_per_token_per_gpu)
    given = kv_pool(m, "sglang", mem_fraction_static=0.5, tp=8)
    assert given.fraction == 0.5 and given.tokens < pool.tokens
    assert kv_pool(m, "sglang", mem_fraction_static=0.05, tp=8).tokens is None  # the weights alone exceed it
    with pytest.raises(ValueError, match="unknown engine 'trtllm'"):
        kv_pool(m, "trtllm")


@pytest.mark.slow
def test_check_names_the_pools_rule_and_refuses_prompts_no_pool_holds():
    from tests.conftest import ROOT
    from tests.simulator.test_config import run_cli

    peak = ROOT / "scenarios" / "peak.yaml"
    res = run_cli("check", str(peak), "--set", "engine.pool=sglang")
    assert res.returncode == 0 and "KV pool sized by SGLang: mem_fraction_static 0.892" in res.stdout  # it drafts
    res = run_cli("check", str(peak), "--set", "workload.prompt=2000000")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "workload.prompt: every prompt" in res.stderr
    for field, value in (("mem_fraction_static", "0"), ("gpu_memory_utilization", "1.2")):
        res = run_cli("check", str(peak), "--set", f"engine.{field}={value}")
        assert res.returncode == 2 and f"engine.{field}" in res.stderr and res.stderr.strip().count("\n") == 0
