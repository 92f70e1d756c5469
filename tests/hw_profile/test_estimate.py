"""hw-profile estimate: each engine cost term in closed form, the kernel-level roofline's structure, the written
table set a scenario loads from ``hardware.table`` alone, and calibration on 1-3 points recovering known terms."""

import itertools
import json
import math
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hw_profile.calibrate.prior_fit import PriorFit, _basis, apply_fit, fit_on_prior
from hw_profile.cli import _prior_host_ms
from hw_profile.errors import HwProfileError
from hw_profile.estimate.engine_costs import (
    SCHEDULER_MS,
    SCHEDULER_MS_TP,
    SPEC_FORWARD_HOST_MS,
    EngineCosts,
    a2a_floor_us,
    a2a_latency_us,
    capture_sizes,
    engine_defaults,
    imbalance_factor,
    launches_ms,
    sampling_ms,
    scheduler_ms_for,
    sglang_spec_capture_sizes,
    speculative_mode,
    two_batch_min_tokens,
    with_overrides,
)
from hw_profile.estimate.estimate import (
    KERNEL_FLOOR_US,
    Deployment,
    attention_work,
    chunk_attention,
    drafter_costs,
    estimate_points,
    estimate_table,
    exchange_ms,
    fused_moe_ms,
    kernel_twin,
    padded_envelope,
    roofline_parts,
    shared_experts_ms,
    single_batch_ms,
    two_batch_ms,
    with_exchange,
    write_estimate_set,
)
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import drafter_shape, get_shape
from hw_profile.tables.sidecar import SPECULATIVE_MODE, SpeculativeMode
from hw_profile.tables.step_table import StepTable
from tests.hw_profile.test_cli import run

ROOT = Path(__file__).resolve().parents[2]


# --- engine cost terms ---------------------------------------------------------------------------------------------

def test_launches_count_every_kernel_of_every_layer():
    costs = EngineCosts(launch_us=5.0, kernels_per_layer=None)
    assert launches_ms(10, 4, costs) == pytest.approx((14 * 6 + 24 * 4) * 5.0e-3)
    assert launches_ms(10, 0, replace(costs, kernels_per_layer=3.0)) == pytest.approx(3 * 10 * 5e-3)


def test_capture_lists_are_the_engines_defaults_cut_at_graph_max_batch():
    vllm = capture_sizes(engine_defaults("vllm"))
    assert vllm[:5] == (1, 2, 4, 8, 16) and vllm[-3:] == (480, 496, 512) and len(vllm) == 3 + 31 + 17
    assert set(np.diff(vllm[3:35])) == {8} and set(np.diff(vllm[34:])) == {16}  # every 8 to 256, then 16
    assert capture_sizes(replace(engine_defaults("vllm"), graph_max_batch=100))[-2:] == (96, 100)
    assert capture_sizes(engine_defaults("sglang"), memory_gb=141)[-1] == 256
    assert capture_sizes(engine_defaults("sglang"), memory_gb=80)[-1] == 160  # the engine captures less on 80 GB
    assert capture_sizes(replace(engine_defaults("trtllm"), capture_sizes=(1, 3))) == (1, 3)
    with pytest.raises(HwProfileError, match="capture-sizes"):
        EngineCosts(capture_sizes=(4, 2))


def test_vllm_speculating_captures_multiples_of_its_tokens_per_request():
    """vLLM started with k draft tokens rounds each default size up to a multiple of k + 1 and drops those past its
    largest: DSpark-16 captures 17, 34, ..., 510; k = 5 skips 30 (24 and 32 round to 24 and 36); other engines and
    k = 0 keep their lists."""
    vllm = engine_defaults("vllm")
    assert capture_sizes(replace(vllm, spec_tokens=16)) == tuple(range(17, 511, 17))
    k5 = capture_sizes(with_overrides(vllm, ["spec_tokens=5"]))
    assert k5[:6] == (6, 12, 18, 24, 36, 42) and k5[-1] == 498 and all(s % 6 == 0 for s in k5)
    assert capture_sizes(replace(vllm, spec_tokens=0)) == capture_sizes(vllm)
    sglang = engine_defaults("sglang")
    assert capture_sizes(replace(sglang, spec_tokens=5), memory_gb=141) == capture_sizes(sglang, memory_gb=141)
    assert capture_sizes(replace(vllm, graph_max_batch=20, spec_tokens=16)) == (17,)
    with pytest.raises(HwProfileError, match="spec_tokens"):
        capture_sizes(replace(vllm, graph_max_batch=16, spec_tokens=16))


def test_sampling_reads_the_logits_once_per_pass_per_verified_token():
    costs = EngineCosts(sample_passes=6.0)
    ms = sampling_ms(np.array([1.0, 8.0]), vocab=150_000, bandwidth_bytes_s=4e12, costs=costs)
    assert ms[0] == pytest.approx(150_000 * 4 * 6 / 4e12 * 1e3)
    assert ms[1] == pytest.approx(8 * ms[0])


def test_moe_imbalance_matches_balls_into_bins():
    rng = np.random.default_rng(0)
    costs = EngineCosts()
    assert imbalance_factor(np.array([100.0]), 1, costs)[0] == 1.0
    assert imbalance_factor(np.array([100.0]), 8, replace(costs, moe_imbalance=1.1))[0] == 1.1
    for ep, n in ((8, 1024), (8, 8192), (64, 16384)):
        loads = rng.multinomial(n, np.full(ep, 1.0 / ep), size=4000)
        brute = loads.max(axis=1).mean() / (n / ep)
        # the Gaussian tail bound sits a little above the simulated mean maximum, never below, within 10%
        assert brute <= imbalance_factor(np.array([float(n)]), ep, costs)[0] <= brute * 1.10


DEEPEP_US = {64: 487.0, 128: 561.0, 256: 554.0}  # DeepEP's published dispatch + combine at 128 tokens per rank


def v3_dp(ep: int, gpu: str = "H800", **costs) -> tuple:
    shape = get_shape("deepseek-v3")  # DeepEP's benchmark shape: hidden 7168, top-8
    return shape, Deployment(gpu=get_gpu(gpu), gpus=ep, ep=ep, dtype="fp8", parallel="dp",
                             costs=replace(engine_defaults("sglang"), **costs))


@pytest.mark.parametrize("ep", sorted(DEEPEP_US))
def test_the_exchange_reproduces_deepep_at_its_setting_and_scales_with_the_tokens(ep):
    shape, d = v3_dp(ep)
    per_layer_us = lambda tokens: exchange_ms(shape, d, np.array([tokens]))[0] / shape.moe_layers * 1e3  # noqa: E731
    assert per_layer_us(128.0) == pytest.approx(DEEPEP_US[ep], rel=1e-9)
    wire_us = 128 * 7168 * 8 * 3.0 * (ep - 1) / ep / 50e9 * 1e6  # the payload at a 400 Gb/s NIC's line rate
    latency = a2a_latency_us(ep, d.costs)
    assert latency == pytest.approx(DEEPEP_US[ep] - wire_us, rel=1e-9) and latency > 0
    # half the tokens: the latency and half the wire, not the 128-token figure again
    assert per_layer_us(64.0) == pytest.approx(latency + wire_us / 2, rel=1e-9)


def test_the_exchange_moves_its_volume_at_the_nics_rate():
    """``nic_gb_s``: across nodes the volume goes at the NIC's line rate and the fixed latency stays DeepEP's; half
    the rate (four NICs for eight GPUs) doubles the wire time and nothing else. Inside one NVLink board the NIC is
    not used."""
    shape, d = v3_dp(64)
    b = np.array([8.0, 128.0])
    latency_ms = shape.moe_layers * a2a_latency_us(64, d.costs) * 1e-3
    wire = exchange_ms(shape, d, b) - latency_ms
    half = exchange_ms(shape, replace(d, costs=replace(d.costs, nic_gb_s=25.0)), b) - latency_ms
    np.testing.assert_allclose(half, 2 * wire, rtol=1e-12)
    volume = b * shape.hidden * 3.0 * shape.experts_per_token * 63 / 64  # fp8 out, bf16 back
    np.testing.assert_allclose(wire, shape.moe_layers * volume / 50e9 * 1e3, rtol=1e-12)
    shape, board = v3_dp(8)
    assert np.array_equal(exchange_ms(shape, board, b),
                          exchange_ms(shape, replace(board, costs=replace(board.costs, nic_gb_s=1.0)), b))


def test_exchange_latency_defaults_and_override():
    costs = EngineCosts()
    assert a2a_latency_us(1, costs) == 0.0
    # at EP32 and below DeepEP's figures are no slower than their payload at line rate: no latency left
    assert a2a_latency_us(16, costs) == 0.0 and a2a_latency_us(32, costs) < 2.0
    assert a2a_latency_us(64, costs) < a2a_latency_us(96, costs) < a2a_latency_us(128, costs)
    assert a2a_latency_us(64, replace(costs, a2a_us_per_layer=40.0)) == 40.0


def test_an_exchange_across_nodes_costs_at_least_deepeps_measured_floor():
    """At two tokens per rank DeepEP's low-latency kernels take 48.5, 55.6 and 59.5 us a layer over 2, 4 and 8
    nodes: the estimate's own exchange never charges less, at EP16 and EP32 too, where DeepEP's 128-token figures
    leave no latency. At 128 tokens the line is above the floor and stays DeepEP's."""
    wire_us = lambda tokens, ep: tokens * 7168 * 8 * 3.0 * (ep - 1) / ep / 50e9 * 1e6  # noqa: E731
    for ep, floor in ((16, 48.5), (32, 55.6), (64, 59.5)):
        shape, d = v3_dp(ep)
        per_layer = exchange_ms(shape, d, np.array([2.0, 128.0])) / shape.moe_layers * 1e3
        line = a2a_latency_us(ep, d.costs) + wire_us(np.array([2.0, 128.0]), ep)
        # EP16 and EP32: the floor, not the line's 6.5-8 us; EP64: its line (60.3 us) is already above it
        assert per_layer[0] == pytest.approx(max(floor, line[0]), rel=1e-12) and per_layer[0] >= floor
        assert (line[0] < floor) == (ep < 64)
        assert per_layer[1] == pytest.approx(line[1], rel=1e-12) and line[1] > floor
    costs = EngineCosts()
    assert a2a_floor_us(8, costs) == 0.0  # one board: NVLink, its own floor
    assert 48.5 < a2a_floor_us(24, costs) < 55.6 and a2a_floor_us(144, costs) == 59.5  # between; held past 8 nodes
    # a planner's own latency stands alone
    shape, d = v3_dp(16, a2a_us_per_layer=10.0)
    assert a2a_floor_us(16, d.costs) == 0.0
    assert exchange_ms(shape, d, np.array([2.0]))[0] / shape.moe_layers * 1e3 == pytest.approx(10.0 + wire_us(2, 16))


def test_the_exchanges_floor_is_what_the_kernel_database_measured():
    import pandas as pd

    from hw_profile.kernels.database import default_data_dir

    for gpu in ("h100_sxm", "h200_sxm"):
        ll = pd.read_parquet(default_data_dir() / f"{gpu}/comm/sglang/0.5.6.post2/wideep_deepep_ll_perf.parquet")
        ll = ll[(ll.num_experts == 256) & (ll.hidden_size == 7168) & (ll.num_topk == 8)]
        for nodes in (2, 4, 8):
            rows = ll[ll.node_num == nodes]
            first = rows[rows.num_token == rows.num_token.min()]
            assert int(first.num_token.iloc[0]) == 2
            us = float(first.dispatch_avg_t_us.iloc[0] + first.combine_avg_t_us.iloc[0])
            assert a2a_floor_us(8 * nodes, EngineCosts()) == pytest.approx(us, abs=0.05)


def _layers(parts: dict) -> np.ndarray:
    return sum(v for key, v in parts.items() if key not in ("lm_head", "comm", "a2a", "fixed", "eager", "sampling"))


def test_without_overlap_the_whole_exchange_is_paid():
    shape, d = v3_dp(128, overlap=False)
    b, k = np.array([1.0, 128.0]), np.array([4096.0, 128 * 4096.0])
    est = estimate_points(shape, d, b, k, "roofline")
    assert np.allclose(est.parts["a2a"], exchange_ms(shape, d, b), rtol=1e-12)


def test_two_micro_batches_when_the_exchange_dominates():
    """A latency far above every kernel: each micro-batch pays its own exchange, and its routed experts, which sit
    between its dispatch and combine, are exposed; the rest of the compute hides."""
    shape, d = v3_dp(128, overlap=True, a2a_us_per_layer=20_000.0)
    b, k = np.array([128.0]), np.array([128 * 4096.0])
    est = estimate_points(shape, d, b, k, "roofline")
    half = roofline_parts(shape, d, b / 2, k / 2)
    expected = 2 * exchange_ms(shape, d, b / 2) + 2 * half["moe"]
    assert _layers(est.parts) + est.parts["a2a"] == pytest.approx(expected, rel=1e-12)


def test_two_micro_batches_when_compute_dominates():
    """Inside one NVLink board at long context the exchange hides under the dense GEMMs and attention: the step's
    layers cost two micro-batches' kernels, each reading the weights again (more than one batch's, less than
    twice)."""
    shape, d = v3_dp(8, gpu="H200", overlap=True)
    b, k = np.array([64.0]), np.array([64 * 65536.0])
    est = estimate_points(shape, d, b, k, "roofline")
    half = roofline_parts(shape, d, b / 2, k / 2)
    x = exchange_ms(shape, d, b / 2)
    assert x / 3 < half["gemm"] and 2 * x / 3 < half["attention"]  # the case this test is about
    layers = _layers(est.parts) + est.parts["a2a"]
    assert layers == pytest.approx(2 * _layers(half), rel=1e-12)
    assert _layers(est.parts) < layers < 2 * _layers(est.parts)


def test_each_engine_splits_from_its_own_threshold():
    """``two_batch_min_tokens``: vLLM splits a decode step of 32 tokens or more (``--dbo-decode-token-threshold``);
    SGLang any step of two requests (2 x the tokens per request); below, the step pays the whole exchange."""
    for engine, smallest in (("vllm", 32.0), ("sglang", 4.0)):
        shape, d = v3_dp(16)
        d = replace(d, costs=replace(engine_defaults(engine), overlap="two-batch"))
        assert two_batch_min_tokens(d.costs) == smallest
        b = np.array([smallest - 1, smallest, 64.0])
        k = b * 4096.0
        est = estimate_points(shape, d, b, k, "roofline").parts["a2a"]
        whole = exchange_ms(shape, d, b)
        assert est[0] == pytest.approx(whole[0], rel=1e-12)
        assert est[1] != pytest.approx(whole[1], rel=1e-3) and est[2] != pytest.approx(whole[2], rel=1e-3)
    assert two_batch_min_tokens(replace(engine_defaults("vllm"), two_batch_min_tokens=0.0)) == 2.0  # one token: whole
    assert with_overrides(engine_defaults("vllm"), ["two_batch_min_tokens=64"]).two_batch_min_tokens == 64.0


def test_a_single_batch_hides_dispatch_under_shared_experts_and_combine_under_the_down_projection():
    """SGLang's single-batch overlap: closed forms (an exchange smaller than what hides it is free; a larger one pays
    only its excess), and the estimate's exchange part is exactly that over the step's shared experts and routed
    experts, never more than the whole exchange and never less than it minus the two kernels it hides under."""
    routed, shared = np.array([3.0, 3.0, 3.0]), np.array([0.5, 0.5, 0.5])
    exchange = np.array([1.0, 6.0, 30.0])
    np.testing.assert_allclose(single_batch_ms(exchange, routed, shared),
                               [0.0, (2.0 - 0.5) + (4.0 - 1.0), (10.0 - 0.5) + (20.0 - 1.0)], rtol=1e-12)
    shape, d = v3_dp(16, gpu="H20", overlap="single-batch")
    b, k = np.array([2.0, 16.0, 64.0, 256.0]), np.array([2.0, 16.0, 64.0, 256.0]) * 4864.0
    est = estimate_points(shape, d, b, k, "roofline")
    whole = exchange_ms(shape, d, b)
    shared_ms = shared_experts_ms(shape, d, b)
    expected = single_batch_ms(whole, est.parts["moe"], shared_ms)
    np.testing.assert_allclose(est.parts["a2a"], expected, rtol=1e-12)
    assert np.all(est.parts["a2a"] <= whole)
    assert np.all(est.parts["a2a"] >= whole - shared_ms - est.parts["moe"] / 3.0 - 1e-12)
    # the shared experts by hand: one expert's weights per MoE layer, fp8, read at 0.8 x 4.0 TB/s on one H20
    assert shared_ms[0] == pytest.approx(shape.moe_layers * shape.expert_params / (0.8 * 4.0e12) * 1e3, rel=1e-9)


def test_a_single_token_cannot_be_split():
    shape, d = v3_dp(128, overlap=True)
    b, k = np.array([1.0]), np.array([4096.0])
    assert estimate_points(shape, d, b, k, "roofline").parts["a2a"] == pytest.approx(exchange_ms(shape, d, b))


def test_a_fused_layer_is_a_three_stage_pipeline_over_its_waves():
    """Closed forms of the fused MoE layer: one wave is the unfused layer (dispatch + experts + combine); many tend
    to the slowest stage; a balanced layer (exchange = experts) gains 2n/(n+1) from n waves."""
    routed, exchange = np.array([3.0, 1.0, 2.0]), np.array([3.0, 6.0, 2.0])
    assert np.allclose(fused_moe_ms(routed, exchange, 1.0), routed + exchange, rtol=1e-12)
    slowest = np.maximum(routed, 2.0 * exchange / 3.0)
    assert np.allclose(fused_moe_ms(routed, exchange, 1e9), slowest, rtol=1e-6)
    for waves in (3.0, 6.0):
        gain = (routed[2] + exchange[2]) / fused_moe_ms(routed[2:], exchange[2:], waves)[0]
        assert gain == pytest.approx(2.0 * waves / (waves + 1.0), rel=1e-12)
    more = [fused_moe_ms(routed, exchange, w) for w in (1.0, 2.0, 4.0, 8.0)]
    assert all(np.all(a >= b) for a, b in itertools.pairwise(more))  # more waves never cost more


def test_fused_overlap_prices_the_exchange_inside_the_moe_layer():
    shape, d = v3_dp(8, gpu="H200", overlap="fused", fused_waves=4.0)
    b, k = np.array([1.0, 64.0, 512.0]), np.array([4096.0, 64 * 4096.0, 512 * 4096.0])
    est = estimate_points(shape, d, b, k, "roofline")
    routed, whole = est.parts["moe"], exchange_ms(shape, d, b)
    assert np.allclose(est.parts["a2a"] + routed, fused_moe_ms(routed, whole, 4.0), rtol=1e-12)
    unfused = estimate_points(shape, replace(d, costs=replace(d.costs, overlap="none")), b, k, "roofline")
    assert np.all(est.ms < unfused.ms) and np.all(est.parts["a2a"] > 0)
    assert np.all(est.parts["a2a"] < whole)  # some of the exchange hides, never all of it at finite waves


def test_a_measured_exchange_replaces_the_estimates_own():
    """Whole (overlap none) it is the measured time at the rank's tokens; split in two micro-batches each half pays
    the measured time at half the tokens."""
    def measured(tokens):
        return 0.5 + 0.01 * np.asarray(tokens)

    b = np.array([2.0, 64.0])
    k = b * 4096

    def parts_at(shape, d):
        return lambda bb, kk: roofline_parts(shape, d, bb, kk)

    shape, d = v3_dp(16, gpu="H200", overlap="none")
    whole = with_exchange(shape, d, b, k, roofline_parts(shape, d, b, k), parts_at(shape, d), measured)
    np.testing.assert_allclose(whole["a2a"], measured(b))
    shape, d = v3_dp(16, gpu="H200", overlap="two-batch", two_batch_min_tokens=2.0)
    parts = roofline_parts(shape, d, b, k)
    split = with_exchange(shape, d, b, k, parts, parts_at(shape, d), measured)
    layers = sum(v for key, v in parts.items() if key not in ("lm_head", "comm"))
    expected = np.maximum(two_batch_ms(roofline_parts(shape, d, b / 2, k / 2), measured(b / 2)) - layers, 0.0)
    np.testing.assert_allclose(split["a2a"], expected)


def test_a_single_batch_layer_hides_its_dispatch_under_the_shared_experts_as_measured():
    """Given the shared experts' measured time, single-batch overlap hides the dispatch under it, not under their
    roofline."""
    def shared(tokens):
        return 0.3 + 0.02 * np.asarray(tokens)

    b = np.array([2.0, 64.0])
    k = b * 4096
    shape, d = v3_dp(16, gpu="H200", overlap="single-batch")
    parts = roofline_parts(shape, d, b, k)
    out = with_exchange(shape, d, b, k, parts, lambda bb, kk: roofline_parts(shape, d, bb, kk), None, shared)
    np.testing.assert_allclose(out["a2a"], single_batch_ms(exchange_ms(shape, d, b), parts["moe"], shared(b)))
    assert not np.allclose(out["a2a"], single_batch_ms(exchange_ms(shape, d, b), parts["moe"],
                                                       shared_experts_ms(shape, d, b)))


@pytest.mark.skipif(__import__("importlib").util.find_spec("aiconfigurator_core") is None,
                    reason="the kernel database (dspark-sim[kernels]) is not installed")
def test_sglang_dp_over_two_nodes_prices_the_exchange_from_measured_deepep():
    """DeepSeek-V3 on two H200 nodes (dp, EP16) under SGLang: kernels priced from the database (the group needs no
    16-GPU all-reduce), and the exchange is DeepEP's measured dispatch + combine over 2 nodes at the rank's tokens,
    read here straight from the package's table."""
    import pandas as pd

    from hw_profile.kernels.database import default_data_dir

    shape, d = v3_dp(16, gpu="H200", overlap="none")
    b = np.array([2.0])
    est = estimate_points(shape, replace(d, engine="sglang"), b, b * 4096)
    assert est.source[0] == "kernels"
    ll = pd.read_parquet(default_data_dir() / "h200_sxm/comm/sglang/0.5.6.post2/wideep_deepep_ll_perf.parquet")
    row = ll[(ll.node_num == 2) & (ll.num_token == 2) & (ll.num_experts == 256) & (ll.hidden_size == 7168)]
    us = float(row.dispatch_avg_t_us.iloc[0] + row.combine_avg_t_us.iloc[0])
    assert est.parts["a2a"][0] == pytest.approx(shape.moe_layers * us * 1e-3, rel=1e-9)
    assert 30 < us < 80  # tens of microseconds a layer at two tokens: a latency, not the wire time (~6 us at 50 GB/s)
    assert any("DeepEP's low-latency kernels as measured" in n for n in est.notes)
    mine = replace(d, engine="sglang", costs=replace(d.costs, a2a_us_per_layer=100.0))
    own = estimate_points(shape, mine, b, b * 4096)  # a planner's own latency keeps the estimate's exchange
    np.testing.assert_allclose(own.parts["a2a"], exchange_ms(shape, mine, b))
    assert own.parts["a2a"][0] > shape.moe_layers * 0.1  # at least the 100 us a layer
    # single-batch: the measured exchange hidden under the shared experts' measured GEMMs
    from hw_profile.kernels.ops import SHARED_EXPERT_GEMMS, gemm_times

    sb = estimate_points(shape, replace(d, engine="sglang", costs=replace(d.costs, overlap="single-batch")), b,
                         b * 4096)
    shared = gemm_times(shape, "H200", "sglang", "fp8", 1, b, SHARED_EXPERT_GEMMS).ms
    assert 0 < shared[0] < est.parts["gemm"][0]
    np.testing.assert_allclose(sb.parts["a2a"], single_batch_ms(est.parts["a2a"], sb.parts["moe"], shared))


def test_fused_overlap_needs_one_nvlink_domain():
    shape, d = v3_dp(64, overlap="fused")
    with pytest.raises(HwProfileError, match=r"one NVLink domain \(8 H800 GPUs\).*--ep 64"):
        estimate_points(shape, d, np.array([64.0]), np.array([64 * 4096.0]), "roofline")
    gb = v3_dp(64, gpu="GB200", overlap="fused")  # a rack of 72 shares NVLink
    assert estimate_points(*gb, np.array([64.0]), np.array([64 * 4096.0]), "roofline").parts["a2a"][0] > 0


def test_where_an_exchange_runs_is_the_parts_nvlink_domain_not_its_name(tmp_path):
    """The NVLink domain is a datum of the GPU entry: a group of GPUs whose device file says they share no fabric
    (domain 1) exchanges as across nodes (DeepEP's latency plus the volume at the NIC's line rate), the same group
    of H800s on their board of 8 over NVLink (400 GB/s: 200 GB/s achieved, above the 60 us floor at 1,024 tokens a
    rank); the fused kernel is refused on the first, and a device file with an H800's datasheet runs it at EP 64
    once it says its fabric spans 72 GPUs."""
    h800 = get_gpu("H800").to_dict()
    (tmp_path / "alone.json").write_text(json.dumps({**h800, "name": "H800-ALONE", "nvlink_domain": 1}))
    shape, board = v3_dp(4, gpu="H800")
    alone = replace(board, gpu=get_gpu(str(tmp_path / "alone.json")))
    b = np.array([1024.0])
    volume = 1024 * 7168 * 3.0 * 8 * 3 / 4  # fp8 out, bf16 back, to 8 experts, 3 of 4 ranks remote
    assert exchange_ms(shape, alone, b)[0] == pytest.approx(
        shape.moe_layers * (a2a_latency_us(4, alone.costs) * 1e-3 + volume / 50e9 * 1e3), rel=1e-12)
    assert volume / 200e9 > 60e-6
    assert exchange_ms(shape, board, b)[0] == pytest.approx(shape.moe_layers * volume / 200e9 * 1e3, rel=1e-12)
    fused_alone = replace(v3_dp(2, overlap="fused")[1], gpu=alone.gpu)
    with pytest.raises(HwProfileError, match=r"one NVLink domain \(1 H800-ALONE GPUs\)"):
        estimate_points(shape, fused_alone, b, b * 4096, "roofline")
    fields = {**h800, "name": "H800-RACK"}
    for domain, runs in ((None, False), (72, True)):
        path = tmp_path / f"rack-{domain}.json"
        path.write_text(json.dumps(fields if domain is None else {**fields, "nvlink_domain": domain}))
        shape, d = v3_dp(64, overlap="fused")
        d = replace(d, gpu=get_gpu(str(path)))
        if runs:
            assert estimate_points(shape, d, b, b * 4096, "roofline").parts["a2a"][0] > 0
        else:
            with pytest.raises(HwProfileError, match=r"one NVLink domain \(8 H800-RACK GPUs\)"):
                estimate_points(shape, d, b, b * 4096, "roofline")


def test_overrides_and_their_errors():
    costs = with_overrides(engine_defaults("sglang"), ["step_fixed_ms=3", "moe_imbalance=1.2", "overlap=true"])
    assert (costs.step_fixed_ms, costs.moe_imbalance, costs.overlap, costs.graph_max_batch) == (3.0, 1.2, "two-batch",
                                                                                                 256)
    assert with_overrides(costs, ["overlap=fused", "fused_waves=6"]).overlap == "fused"
    assert with_overrides(costs, ["overlap=false"]).overlap == "none"
    assert replace(costs, overlap=True).overlap == "two-batch"  # a sidecar written before the modes stored a bool
    for bad, words in ((["nope=1"], "NAME=VALUE"), (["step_fixed_ms=x"], "expected a number"),
                       (["moe_imbalance=0.5"], "factor >= 1"), (["launch_us=-1"], ">= 0"),
                       (["overlap=maybe"], "none, two-batch, single-batch, fused"), (["fused_waves=0.5"], ">= 1"),
                       (["nic_gb_s=0"], "line rate > 0")):
        with pytest.raises(HwProfileError, match=words):
            with_overrides(costs, bad)
    with pytest.raises(HwProfileError, match="known: vllm, sglang, trtllm"):
        engine_defaults("tgi")


def test_a_step_without_the_overlap_scheduler_pays_its_host_work():
    """SGLang's MTP post: 51.0 tok/s per rank without the overlap scheduler, 60.4 with it, 2 requests per rank."""
    on = scheduler_ms_for(engine_defaults("sglang"), data_parallel=True)
    assert on.overlap_schedule and on.host_ms == on.step_fixed_ms == 0.8
    assert on.scheduler_ms == pytest.approx(2 / 51.0 * 1e3 - 2 / 60.4 * 1e3, abs=0.05)
    # one tensor-parallel replica: sgl-project/sglang PR #38131's one-GPU figure (1/364.3 - 1/498.5 s)
    tp = scheduler_ms_for(engine_defaults("sglang"), data_parallel=False)
    assert tp.scheduler_ms == pytest.approx(1e3 / 364.3 - 1e3 / 498.5, abs=0.01)
    assert scheduler_ms_for(with_overrides(on, ["scheduler_ms=2"]), data_parallel=False).scheduler_ms == 2
    # vLLM: its own step costs without asynchronous scheduling (1.5 ms) and with it (0.3 ms)
    assert scheduler_ms_for(engine_defaults("vllm"), data_parallel=False).scheduler_ms == pytest.approx(1.5 - 0.3)
    off = with_overrides(on, ["overlap_schedule=false"])
    assert off.host_ms == pytest.approx(0.8 + on.scheduler_ms)
    assert with_overrides(off, ["overlap_schedule=on", "scheduler_ms=2"]).host_ms == 0.8
    assert with_overrides(on, ["overlap_schedule=0", "scheduler_ms=2"]).host_ms == pytest.approx(2.8)
    with pytest.raises(HwProfileError, match="overlap_schedule: expected true or false, got 'maybe'"):
        with_overrides(on, ["overlap_schedule=maybe"])
    # a sidecar's record reads back; one written before the term takes the default (on)
    assert EngineCosts.from_dict(off.to_dict()) == off
    old = {k: v for k, v in off.to_dict().items() if k not in ("overlap_schedule", "scheduler_ms")}
    assert EngineCosts.from_dict(old).host_ms == 0.8
    # calibrate reports the per-step cost the prior priced from its sidecar; none recorded or unreadable: 0
    assert _prior_host_ms({"engine_costs": off.to_dict()}) == off.host_ms
    assert _prior_host_ms({}) == _prior_host_ms({"engine_costs": {"overlap": "sideways"}}) == 0.0
    # the target's step pays it once, at every load; a drafter's forward inside that step does not
    shape, d = dep("deepseek-v3", gpus=8, ep=8, parallel="dp", dtype="fp8", engine="sglang")
    b, k = np.array([1.0, 64.0, 1024.0]), np.array([4096.0, 64 * 4096.0, 1024 * 4096.0])
    with_it, without = (estimate_points(shape, replace(d, costs=c), b, k, "roofline") for c in (on, off))
    np.testing.assert_allclose(without.ms - with_it.ms, on.scheduler_ms)
    np.testing.assert_allclose(without.parts["fixed"], off.host_ms)
    assert drafter_costs(off).host_ms == 0.0


# --- the estimate --------------------------------------------------------------------------------------------------

def dep(model="qwen3-8b", gpu="H200", **kw):
    shape = get_shape(model)
    return shape, Deployment(gpu=get_gpu(gpu), **kw)


def test_parts_add_up_and_the_fixed_cost_is_paid_once():
    shape, d = dep(costs=engine_defaults("vllm"))
    b, k = np.array([1.0, 64.0, 1024.0]), np.array([0.0, 64 * 4096.0, 1024 * 2048.0])
    est = estimate_points(shape, d, b, k, kernels="roofline")
    assert np.allclose(est.ms, sum(est.parts.values()))
    assert np.allclose(est.parts["fixed"], 0.3)  # vLLM with its asynchronous scheduler
    assert (est.source == "roofline").all() and not est.inside.any()
    # a single stream of a dense 8B model on one H200 reads its weights once: 16.4 GB at 0.8 x 4.8 TB/s, plus the
    # fixed latency of its 36 x 4 GEMMs and the LM head
    weights_ms = shape.dense_params * 2 / (0.8 * 4.8e12) * 1e3
    assert est.parts["gemm"][0] + est.parts["lm_head"][0] == pytest.approx(weights_ms + 145 * 4.3e-3)
    assert np.all(np.diff(est.ms) > 0)


def test_each_verified_token_attends_to_the_context():
    """MLA at long context is compute-bound in attention: the table's q per request scales that part."""
    shape, d = dep("deepseek-v3", gpus=8, ep=8, parallel="dp", dtype="fp8")
    b, k = np.array([256.0]), np.array([256 * 32768.0])
    one = roofline_parts(shape, replace(d, costs=EngineCosts(verify_tokens_per_request=1.0)), b, k, floors=False)
    four = roofline_parts(shape, replace(d, costs=EngineCosts(verify_tokens_per_request=4.0)), b, k, floors=False)
    assert four["attention"][0] == pytest.approx(4 * one["attention"][0], rel=1e-9)
    assert four["gemm"][0] == one["gemm"][0]


def test_latent_cache_is_read_whole_by_every_tensor_parallel_rank():
    shape, d = dep("deepseek-v3", gpus=8, ep=8, dtype="fp8", costs=EngineCosts(verify_tokens_per_request=1.0))
    b, k = np.array([1.0]), np.array([2_000_000.0])
    tp = roofline_parts(shape, replace(d, parallel="tp"), b, k, floors=False)["attention"][0]
    kv_bytes = 2e6 * shape.kv_read_bytes_per_token  # a bf16 cache, though the weights are fp8
    assert tp == pytest.approx(kv_bytes / (0.8 * 4.8e12) * 1e3)
    qwen, dq = dep("qwen3-8b", gpus=2)
    one = roofline_parts(qwen, dq, b, k, floors=False)["attention"][0]
    assert one == pytest.approx(2e6 * qwen.kv_read_bytes_per_token / 2 / (0.8 * 4.8e12) * 1e3)


def test_the_kv_cache_is_bf16_whatever_the_weights_unless_the_model_stores_fp8():
    """As the kernel path and the engines' default cache type: fp8 weights do not halve the KV reads; V4 stores its
    compressed cache in fp8 whatever the weights."""
    b, k = np.array([1.0]), np.array([4_000_000.0])  # one request, long context: the KV read dominates attention
    qwen = get_shape("qwen3-8b")
    attn = {dt: roofline_parts(qwen, dep("qwen3-8b", dtype=dt)[1], b, k, floors=False)["attention"][0]
            for dt in ("bf16", "fp8")}
    assert attn["fp8"] == pytest.approx(attn["bf16"], rel=1e-12)
    assert attn["bf16"] == pytest.approx(4e6 * qwen.kv_read_bytes_per_token / (0.8 * 4.8e12) * 1e3, rel=1e-3)
    v4 = get_shape("deepseek-v4-flash")
    v4_attn = {dt: roofline_parts(v4, dep("deepseek-v4-flash", dtype=dt)[1], b, k, floors=False)["attention"][0]
               for dt in ("bf16", "fp8")}
    assert v4_attn["fp8"] == pytest.approx(v4_attn["bf16"], rel=1e-12)
    v4_bytes = (4e6 * v4.kv_read_bytes_per_token + v4.attn_read_bytes_per_query_token) * 0.5  # fp8
    assert v4_attn["bf16"] == pytest.approx(v4_bytes / (0.8 * 4.8e12) * 1e3, rel=1e-3)
    # its drafter (window-only layers, no compressed rows) keeps the fp8 cache
    drafter = drafter_shape(v4, 1)
    assert drafter.attention_kind == "gqa" and drafter.kv_dtype == "fp8"
    d_attn = roofline_parts(drafter, dep("deepseek-v4-flash")[1], b, k, floors=False)["attention"][0]
    d_bytes = (4e6 * drafter.kv_read_bytes_per_token + drafter.attn_read_bytes_per_query_token) * 0.5
    assert d_attn == pytest.approx(d_bytes / (0.8 * 4.8e12) * 1e3, rel=1e-3)


def test_a_deployment_that_chooses_an_fp8_cache_reads_half_the_bytes():
    """``--kv-dtype fp8`` (the shape's ``kv_dtype``): each cached token is read in half the bytes, and attention
    computes in the weights' type (fp8 for an fp8 checkpoint, as FlashMLA-FP8 does; a bf16 model's kernels
    dequantise to bf16), each point bound by the slower of the two (by hand from ``attention_work``)."""
    b = np.array([1.0, 512.0])
    k = np.array([4_000_000.0, 512 * 32768.0])
    for model, kw in (("qwen3-8b", {}), ("deepseek-v3", dict(gpus=8, ep=8, parallel="dp", dtype="fp8"))):
        shape, d = dep(model, **kw)
        fp8_shape = replace(shape, kv_dtype="fp8")
        for sh, rate in ((shape, d.peak("bf16")), (fp8_shape, d.peak(d.dtype))):
            work = attention_work(sh, d)
            per_kv, per_query_kv, per_query = work.per_kv, work.per_query_kv, work.per_query
            assert d.peak(work.dtype) == rate
            q = np.minimum(b, d.costs.verify_tokens_per_request)
            by_hand = np.maximum((k * per_kv + b * per_query) / d.bandwidth, per_query_kv * k * q / rate) * 1e3
            np.testing.assert_allclose(roofline_parts(sh, d, b, k, floors=False)["attention"], by_hand, rtol=1e-12)
        assert attention_work(fp8_shape, d).per_kv == attention_work(shape, d).per_kv / 2
        assert np.all(roofline_parts(fp8_shape, d, b, k, floors=False)["attention"]
                      < roofline_parts(shape, d, b, k, floors=False)["attention"])


def test_the_experts_type_a_deployment_runs_sets_their_bytes_and_their_arithmetic():
    """V4's fp4 experts on an H20 (no FP4 cores): fp4 reads half a byte a weight at the fp8 rate; w4a16 the same
    bytes at the 16-bit rate (half the fp8 rate on an H20); an fp8 checkpoint a byte at the fp8 rate."""
    shape, d = dep("deepseek-v4-flash", "H20", gpus=8, ep=8, parallel="dp", dtype="fp8")
    b, k = np.array([1.0, 4096.0]), np.array([0.0, 0.0])  # one token (reads), 4,096 a rank (arithmetic)
    routed = {x: roofline_parts(replace(shape, expert_dtype=x), d, b, k, floors=False)["moe"]
              for x in ("fp4", "w4a16", "fp8")}
    assert routed["w4a16"][0] == pytest.approx(routed["fp4"][0], rel=1e-12)
    assert routed["fp8"][0] == pytest.approx(2 * routed["fp4"][0], rel=1e-12)
    assert d.peak("fp8") == pytest.approx(2 * d.peak("bf16"))
    assert routed["w4a16"][1] == pytest.approx(2 * routed["fp4"][1], rel=1e-12)
    assert routed["fp8"][1] == pytest.approx(routed["fp4"][1], rel=1e-12)


def test_estimate_cli_expert_dtype_and_the_note_for_parts_without_fp4(tmp_path, capsys):
    argv = ["estimate", "--model", "deepseek-v4-flash", "--gpu", "H20", "--gpus", "8", "--kernels", "roofline",
            "--drafters", "mtp", "--max-batch-tokens", "64", "--max-kv-tokens", "100000"]
    code, _, err = run([*argv, "--out", str(tmp_path / "auto.csv")], capsys)
    assert code == 0, err
    assert "no FP4 tensor cores" in err and "--expert-dtype w4a16" in err
    code, _, err = run([*argv, "--expert-dtype", "w4a16", "--out", str(tmp_path / "w4a16.csv")], capsys)
    assert code == 0, err
    assert "no FP4 tensor cores" not in err
    for suffix in ("", ".drafter-mtp"):
        table = StepTable.read(tmp_path / f"w4a16{suffix}.csv")
        assert table.meta["model_shape"]["expert_dtype"] == "w4a16"
    code, _, err = run(["estimate", "--model", "qwen3-8b", "--gpu", "H20", "--expert-dtype", "fp8",
                        "--out", str(tmp_path / "q.csv")], capsys)
    assert code == 2 and "--expert-dtype" in err and err.count("\n") == 1


def test_estimate_cli_kv_dtype_reaches_the_target_and_its_drafters(tmp_path, capsys):
    for kv in ("auto", "fp8"):
        code, _, err = run(["estimate", "--model", "qwen3-8b", "--gpu", "H20", "--kernels", "roofline",
                            "--kv-dtype", kv, "--max-batch-tokens", "64", "--max-kv-tokens", "100000",
                            "--out", str(tmp_path / f"{kv}.csv")], capsys)
        assert code == 0, err
    for suffix in ("", ".drafter-mtp", ".drafter-dspark"):
        plain, fp8 = (StepTable.read(tmp_path / f"{kv}{suffix}.csv") for kv in ("auto", "fp8"))
        assert "kv_dtype" not in plain.meta["model_shape"] and fp8.meta["model_shape"]["kv_dtype"] == "fp8"
        assert fp8.grid.step_ms(1, 100_000) < plain.grid.step_ms(1, 100_000)
        assert fp8.grid.step_ms(1, 0) == pytest.approx(plain.grid.step_ms(1, 0))


def test_estimate_records_what_the_engine_changes_when_it_speculates(tmp_path, capsys):
    """SGLang's EAGLE/MTP worker (server_args.py) turns the overlap scheduler off, caps running requests at 48 where
    none are set and captures its speculative batch sizes; vLLM keeps asynchronous scheduling for EAGLE-family
    drafters. The target's sidecar says so (the drafters' do not: they run inside its steps), and the terminal too."""
    base = ["estimate", "--model", "qwen3-8b", "--gpu", "H20", "--kernels", "roofline", "--max-batch-tokens", "64",
            "--max-kv-tokens", "100000", "--drafters", "eagle3"]
    said, modes = {}, {}
    for key, extra in (("sglang", ["--engine", "sglang"]), ("off", ["--engine", "sglang", "--cost",
                                                                     "overlap_schedule=false"]),
                       ("v2", ["--engine", "sglang", "--cost", "spec_overlap_schedule=true", "--cost",
                               "spec_max_running=64"]),
                       ("vllm", ["--engine", "vllm"])):
        code, _, err = run([*base, *extra, "--out", str(tmp_path / f"{key}.csv")], capsys)
        assert code == 0, err
        said[key] = next(line for line in err.splitlines() if "speculative mode" in line)
        table = StepTable.read(tmp_path / f"{key}.csv")
        modes[key] = SpeculativeMode.from_meta(table.meta, key)
        assert SPECULATIVE_MODE not in StepTable.read(tmp_path / f"{key}.drafter-eagle3.csv").meta
    sg = modes["sglang"]
    # one tensor-parallel replica: the scheduler's host work as one GPU's (SCHEDULER_MS_TP), hidden in plain steps
    assert (sg.overlap_schedule, sg.host_ms, sg.max_running) == (False, SCHEDULER_MS_TP, 48)
    # each extra forward: what sgl-project/sglang PR #18906's spec v1 step hides beyond that, over its two
    assert sg.forward_host_ms == SPEC_FORWARD_HOST_MS == pytest.approx(
        ((3.368 / 298.19 - 3.368 / 323.72) * 1e3 - SCHEDULER_MS_TP) / 2, abs=1e-3)
    assert sg.step_host_ms(parallel=False, gamma=3) == pytest.approx(SCHEDULER_MS_TP + 2 * SPEC_FORWARD_HOST_MS)
    assert sg.cuda_graphs.counts == "requests" and sg.cuda_graphs.sizes[:10] == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12)
    assert "no overlap scheduler (+0.74 ms a step, +0.075 ms a drafter forward)" in said["sglang"]
    assert "at most 48" in said["sglang"]
    # plain steps already without the overlap scheduler: speculation adds none of its host work
    # (the drafter's forwards are still launched apart, unhidden)
    assert (modes["off"].overlap_schedule, modes["off"].host_ms, modes["off"].forward_host_ms) == \
        (False, 0.0, SPEC_FORWARD_HOST_MS)
    v2 = modes["v2"]
    assert (v2.overlap_schedule, v2.host_ms, v2.forward_host_ms, v2.max_running) == (True, 0.0, 0.0, 64)
    assert not modes["vllm"].changes and "as plain decoding" in said["vllm"]
    on, off = (StepTable.read(tmp_path / f"{key}.csv") for key in ("sglang", "off"))
    assert off.grid.step_ms(1, 0) - on.grid.step_ms(1, 0) == pytest.approx(SCHEDULER_MS_TP)
    assert off.meta["engine_costs"]["overlap_schedule"] is False


def test_sglang_caps_each_data_parallel_rank_at_its_share():
    """With data-parallel attention SGLang's model runner takes max_running_requests // dp_size a rank (a table row is
    one rank), and the scheduler's host work is the data-parallel figure (DeepSeek-V3 over 16 ranks)."""
    graphs = {"sizes": [1, 2, 4, 8, 16, 256], "counts": "requests", "eager_floor_ms": 3.0}
    dp = scheduler_ms_for(engine_defaults("sglang"), data_parallel=True)
    block = speculative_mode(dp, graphs, ranks=16)
    assert (block["max_running"], block["host_ms"]) == (3, SCHEDULER_MS)
    assert speculative_mode(with_overrides(dp, ["spec_max_running=0"]), graphs, ranks=16)["max_running"] is None
    assert block["cuda_graphs"]["sizes"][-3:] == [240, 248, 256] and block["cuda_graphs"]["eager_floor_ms"] == 3.0
    assert sglang_spec_capture_sizes(48) == (*range(1, 9), *range(10, 33, 2), 40, 44, 48)
    assert sglang_spec_capture_sizes(50)[-2:] == (48, 50)  # the engine's largest batch joins its list
    trt = speculative_mode(engine_defaults("trtllm"), graphs)
    assert "not recorded" in trt["source"] and not SpeculativeMode.from_meta({SPECULATIVE_MODE: trt}, "t").changes


def test_a_speculative_mode_block_reads_back_and_refuses_bad_fields():
    graphs = {"sizes": [1, 2, 4], "counts": "requests", "eager_floor_ms": 1.0}
    block = speculative_mode(scheduler_ms_for(engine_defaults("sglang"), False), graphs)
    mode = SpeculativeMode.from_meta({SPECULATIVE_MODE: block}, "t.json")
    assert SpeculativeMode.from_meta({SPECULATIVE_MODE: mode.to_meta()}, "t.json") == mode
    assert SpeculativeMode.from_meta({}, "t.json") == SpeculativeMode() and not SpeculativeMode().changes
    for field, bad, words in (("host_ms", -1, "host_ms: expected a number of ms >= 0"),
                              ("forward_host_ms", "x", "forward_host_ms: expected a number of ms >= 0"),
                              ("max_running", 0, "max_running: expected a whole number >= 1 or null"),
                              ("overlap_schedule", "no", "overlap_schedule: expected true or false")):
        with pytest.raises(HwProfileError, match=words):
            SpeculativeMode.from_meta({SPECULATIVE_MODE: {**block, field: bad}}, "t.json")


def test_each_kernel_family_pays_its_launches_fixed_latency():
    """The kernel-level roofline adds per launch what measured kernels cost above their roofline at one token:
    Qwen3-8B launches 36 x 4 dense GEMMs and an LM head, 36 attentions; DeepSeek-V3 also 58 fused MoE layers;
    DeepSeek-V4 and GLM-5.2 one attention module a layer, their projections inside."""
    us = KERNEL_FLOOR_US
    for model, added_us in (
        ("qwen3-8b", {"gemm": 144 * us["gemm"], "lm_head": us["gemm"], "attention": 36 * us["attention"]}),
        ("deepseek-v3", {"gemm": (61 * 3 + 3 * 2 + 58 * 2) * us["gemm"], "lm_head": us["gemm"],
                         "attention": 61 * us["attention"], "moe": 58 * us["moe"]}),
        # V4's attention projections are inside its module; its shared experts are GEMMs; each layer mixes (mHC)
        ("deepseek-v4-flash", {"gemm": 43 * 2 * us["gemm"] + 43 * us["mhc"], "lm_head": us["gemm"],
                               "attention": 43 * us["v4_attention"], "moe": 43 * us["moe"]}),
        # a DSA layer's projections and indexer are inside its module: only the dense MLPs and shared experts remain
        ("glm-5.2", {"gemm": (3 * 2 + 75 * 2) * us["gemm"], "lm_head": us["gemm"],
                     "attention": 78 * us["dsa_attention"], "moe": 75 * us["moe"]}),
    ):
        shape, d = dep(model, dtype="fp8")
        b, k = np.array([1.0, 512.0]), np.array([4096.0, 512 * 4096.0])
        with_floors = roofline_parts(shape, d, b, k)
        without = roofline_parts(shape, d, b, k, floors=False)
        for family in without:
            added = added_us.get(family, 0.0) * 1e-3
            assert np.allclose(with_floors[family] - without[family], added, rtol=1e-12, atol=1e-12), family


def test_a_roofline_estimate_says_its_kernels_pay_measured_floors():
    b, k = np.array([1.0]), np.array([1024.0])
    for gpu, borrowed in (("H20", False), ("MI300X", True)):
        shape, d = dep(gpu=gpu)
        notes = " ".join(estimate_points(shape, d, b, k, "roofline").notes)
        assert "gemm 4.3, attention 11.1" in notes
        assert ("borrowed for this AMD part" in notes) == borrowed


@pytest.mark.heavy
@pytest.mark.slow
@pytest.mark.skipif(__import__("importlib").util.find_spec("aiconfigurator_core") is None,
                    reason="the kernel database (dspark-sim[kernels]) is not installed")
def test_the_kernel_floors_are_what_the_kernel_database_measures():
    from tools.kernel_floors import (
        DSA_FAMILIES,
        V4_FAMILIES,
        cases,
        dsa_cases,
        leave_one_gpu_out,
        medians,
        v4_cases,
    )

    rows = cases()
    floors = {**medians(rows), **medians(v4_cases(), V4_FAMILIES), **medians(dsa_cases(), DSA_FAMILIES)}
    for key, us in KERNEL_FLOOR_US.items():
        assert floors[key] == pytest.approx(us, abs=0.05), key
    # floors from the other GPUs bring each GPU's roofline within about 10% of its measured kernels at every load
    check = leave_one_gpu_out(rows)
    assert (check["with"] < 0.11).all() and check["without"][0] > 0.5


@pytest.mark.skipif(__import__("importlib").util.find_spec("aiconfigurator_core") is None,
                    reason="the kernel database (dspark-sim[kernels]) is not installed")
def test_a_gpu_with_a_covered_gpus_datasheet_takes_its_measured_kernels_on_its_own_links():
    """The H800 (the H100's die, NVLink 400 GB/s against 900): on one GPU its estimate is the H100's (to rounding);
    over eight its all-reduces are slower than the H100's and the rest is the same. A GPU with no twin keeps the
    roofline; --kernels db insisted on where the twin has no data says so in one line."""
    h800, h100 = get_gpu("H800"), get_gpu("H100")
    assert kernel_twin(h800, "sglang") == h100 and kernel_twin(h100, "sglang") is None
    assert kernel_twin(get_gpu("H20"), "sglang") is None
    b, k = np.array([1.0, 64.0, 512.0]), np.array([4096.0, 64 * 4096.0, 512 * 4096.0])
    for gpus in (1, 8):
        shape, ours = dep("qwen3-8b", "H800", gpus=gpus, engine="sglang", costs=engine_defaults("sglang"))
        mine, theirs = estimate_points(shape, ours, b, k), estimate_points(shape, replace(ours, gpu=h100), b, k)
        assert set(mine.source) == {"kernels:H100"} and set(theirs.source) == {"kernels"}
        for family in ("gemm", "attention", "lm_head", "fixed", "sampling"):
            np.testing.assert_allclose(mine.parts[family], theirs.parts[family], rtol=1e-12, err_msg=family)
        if gpus == 1:
            np.testing.assert_allclose(mine.ms, theirs.ms, rtol=1e-12)
        else:
            assert (mine.parts["comm"] > theirs.parts["comm"]).all()
    shape, ours = dep("deepseek-v4-flash", "H800", gpus=8, ep=8, dtype="fp8", parallel="dp", engine="sglang",
                      costs=engine_defaults("sglang"))
    assert set(estimate_points(shape, ours, b, k).source) == {"roofline"}  # no fp4 experts measured on Hopper
    with pytest.raises(HwProfileError, match=r"H100's measured kernels \(its twin\) not used.*fp4") as err:
        estimate_points(shape, ours, b, k, kernels="db")
    assert "\n" not in str(err.value)


@pytest.mark.skipif(__import__("importlib").util.find_spec("aiconfigurator_core") is None,
                    reason="the kernel database (dspark-sim[kernels]) is not installed")
def test_a_fractional_batch_is_priced_by_the_measured_kernels():
    """278.75 tokens a rank (a published throughput times a latency) is 278.75 requests of one token, not 279: the
    measured kernels price it, between their prices at 278 and 279 tokens, instead of a silent fall to the
    roofline."""
    shape, d = dep("qwen3-8b", "H200", engine="sglang",
                   costs=replace(engine_defaults("sglang"), verify_tokens_per_request=1.0))
    b = np.array([278.0, 278.75, 279.0])
    est = estimate_points(shape, d, b, b * 2048.0)
    assert set(est.source) == {"kernels"}
    assert est.ms[0] <= est.ms[1] <= est.ms[2]


def test_a_chunks_attention_is_priced_per_token_pair_and_its_gemms_by_the_table():
    shape, d = dep()
    cost = chunk_attention(shape, d)
    peak = 989.4e12 * 0.6
    assert "us_per_token" not in cost  # a chunk's GEMMs are T's at the step's total tokens (one forward)
    assert cost["ns_per_token_kv"] == pytest.approx(shape.attn_flops_per_kv_token / peak * 1e9)


def test_an_eager_steps_launches_hide_under_its_kernels():
    """Past the captured sizes the host issues every kernel while the GPU runs the ones before: a compute-bound
    prompt chunk hides its launches, a step of small kernels takes its launches (and the host's cost). The written
    table leaves that floor to the lookup, which prices the same step the same."""
    shape, d = dep()
    b = np.array([512.0, 513.0, 4096.0])
    est = estimate_points(shape, d, b, np.zeros(3), kernels="roofline")
    floor = 36 * 14 * 5e-3 + d.costs.host_ms  # layers x kernels per layer x 5 us, and the host's cost
    graph = est.ms - est.parts["eager"]
    assert est.parts["eager"][0] == 0.0  # captured
    assert est.ms[1:] == pytest.approx(np.maximum(graph[1:], floor))
    assert est.parts["eager"][2] == 0.0 and graph[2] > floor
    table = estimate_table(shape, d, "t", kernels="roofline", b_axis=b, k_axis=np.array([0.0]))
    assert table.cuda_graphs.largest == 512 and table.cuda_graphs.eager_floor_ms == pytest.approx(floor)
    assert [table.grid.step_ms(x, 0.0) for x in b] == pytest.approx(est.ms)


def test_kv_facts_are_the_cache_the_table_priced():
    """The sidecar's KV bytes per token are the cache the estimate priced: bf16 for an fp8-weight model whose
    cache type is the engine's default, so the simulator no longer sizes its pool at fp8 (twice the room)."""

    shape, d = dep("qwen3-8b", "H200", dtype="fp8")
    table = estimate_table(shape, d, "t", kernels="roofline", b_axis=np.array([1, 64]), k_axis=np.array([0, 4096]))
    per_token = 36 * 2 * 8 * 128 * 2  # layers x (K, V) x kv heads x head dim x 2 bytes
    assert table.meta["kv_bytes_per_token"] == table.meta["kv_bytes_per_token_per_gpu"] == per_token
    kv = table.facts.memory.kv_capacity(0.9, 2048, 128)
    device = 139.8 * 2**30  # the H200 as the CUDA driver reports it (hw_profile/hardware/gpus.py), not 141e9
    assert table.meta["device_memory_gb"] * 1e9 == pytest.approx(device)
    room = device * 0.9 - table.meta["weight_bytes_per_gpu"]
    assert 0.97 * room / per_token < kv < room / per_token
    assert kv * per_token + table.meta["weight_bytes_per_gpu"] <= device * 0.9  # it fits the memory it was given


def test_table_set_loads_from_hardware_table_alone(tmp_path):
    """The sidecars name each other: a scenario that only changes hardware.table gets both drafters, DSpark's head
    cost included."""
    from simulator.inputs.config import load_scenario
    from simulator.inputs.hardware import load_hardware

    shape, d = dep("qwen3-8b", "B200", engine="sglang", costs=engine_defaults("sglang"))
    b_axis, k_axis = np.array([1, 8, 64, 512, 4096]), np.array([0, 4096, 262144, 2_000_000])
    paths = write_estimate_set(shape, d, tmp_path / "b200.csv", ["mtp", "dspark"], kernels="roofline",
                               b_axis=b_axis, k_axis=k_axis)
    assert [p.name for p in paths] == ["b200.drafter-mtp.csv", "b200.drafter-dspark.csv", "b200.csv"]
    main_table = StepTable.read(paths[-1])
    assert main_table.meta["kind"] == "estimate" and main_table.meta["caveat"]["kind"] == "an estimate"
    assert set(main_table.points["source"]) == {"roofline"}
    scn_text = (ROOT / "scenarios" / "peak.yaml").read_text().replace(
        "hardware/h200-qwen3-8b-bf16-vllm.csv", str(paths[-1]))
    (tmp_path / "s.yaml").write_text(scn_text)
    scn = load_scenario(tmp_path / "s.yaml")
    hw = load_hardware(scn, {"mtp", "dspark", "none"})
    assert hw.draft["dspark"].seq_per_position_ms > 0  # the Markov head is charged
    assert hw.draft["mtp"].grid.step_ms(1, 0) < hw.draft["dspark"].grid.step_ms(1, 0) < hw.clock.step_ms(1, 0)


@pytest.mark.parametrize("seed", range(20))
def test_padded_envelope_is_the_least_time_at_any_larger_step(seed):
    """Against brute force: each cell becomes the minimum over every (B', K') >= (B, K); the result never rises
    above the input and never falls along B or K; an already monotone grid is left as it is, with no note."""
    rng = np.random.default_rng(seed)
    ms = rng.random((int(rng.integers(1, 7)), int(rng.integers(1, 9)))) * 10.0 + 1.0
    env, note = padded_envelope(ms)
    brute = np.array([[ms[i:, j:].min() for j in range(ms.shape[1])] for i in range(ms.shape[0])])
    assert np.array_equal(env, brute)
    assert (np.diff(env, axis=0) >= 0).all() and (np.diff(env, axis=1) >= 0).all() and (env <= ms).all()
    assert (note != "") == bool((env < ms).any())
    again, again_note = padded_envelope(env)
    assert np.array_equal(again, env) and again_note == ""


@pytest.mark.skipif(__import__("importlib").util.find_spec("aiconfigurator_core") is None,
                    reason="the kernel database (dspark-sim[kernels]) is not installed")
def test_a_measured_kernel_estimate_never_gets_cheaper_with_more_tokens(tmp_path):
    """V4-Pro on B300 under vLLM: the measured fused-MoE data fall from 320 to 784 expert-parallel tokens (a step at
    B = 40 per rank would cost more than one at 98). The table written is non-decreasing in B and K, and says so."""
    shape, d = dep("deepseek-v4-pro", "B300", gpus=8, ep=8, dtype="fp8", parallel="dp", engine="vllm",
                   costs=engine_defaults("vllm"))
    b_axis = np.array([8, 16, 32, 40, 50, 62, 78, 98, 122])
    raw = estimate_points(shape, d, b_axis.astype(float), np.full(b_axis.shape, 83_200.0), kernels="db").ms
    assert raw[3] > raw[7]  # the measured data as they are
    paths = write_estimate_set(shape, d, tmp_path / "b300.csv", [], kernels="db", b_axis=b_axis,
                               k_axis=np.array([0, 83_200, 1_048_576]))
    table = StepTable.read(paths[-1])
    _, _, ms = table.grid.arrays
    assert (np.diff(ms, axis=1) >= 0).all() and (np.diff(ms, axis=0) >= 0).all()
    assert any("non-decreasing in B and K" in n for n in table.meta["notes"])


# --- calibration on 1-3 points -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prior(tmp_path_factory):
    shape, d = dep("qwen3-8b", "H200", costs=engine_defaults("vllm"))
    out = tmp_path_factory.mktemp("prior") / "h200.csv"
    write_estimate_set(shape, d, out, ["mtp"], kernels="roofline", b_axis=np.array([1, 4, 32, 256, 2048]),
                       k_axis=np.array([0, 65536, 1_048_576, 4_194_304]))
    return StepTable.read(out)


def truth_at(prior, truth, b, k):
    return apply_fit(prior, truth).grid.values(np.array(b, float), np.array(k, float))


def test_one_single_stream_point_fixes_the_per_step_cost(prior):
    truth = PriorFit(f_ms=2.5, s=1.4, c=0.7)
    fit = fit_on_prior(prior, [1], [0], truth_at(prior, truth, [1], [0]))
    assert fit.fitted == ["f"] and fit.f_ms == pytest.approx(2.5) and (fit.s, fit.c) == (1.0, 1.0)


def test_one_loaded_point_fixes_the_per_token_cost(prior):
    truth = PriorFit(s=1.4)
    fit = fit_on_prior(prior, [256], [0], truth_at(prior, truth, [256], [0]))
    assert fit.fitted == ["s"] and fit.s == pytest.approx(1.4)


def test_three_points_recover_every_term(prior):
    truth = PriorFit(f_ms=2.5, s=1.4, c=0.7)
    b, k = [1, 256, 32], [0, 65536, 4_194_304]
    fit = fit_on_prior(prior, b, k, truth_at(prior, truth, b, k))
    assert fit.fitted == ["f", "s", "c"]
    assert (fit.f_ms, fit.s, fit.c) == pytest.approx((2.5, 1.4, 0.7))
    assert max(map(abs, fit.residuals_pct)) < 1e-6


def test_points_that_cannot_separate_a_term_leave_it_at_the_prior(prior):
    truth = PriorFit(f_ms=1.0, s=1.2)
    b, k = [1, 256, 256], [0, 0, 0]
    fit = fit_on_prior(prior, b, k, truth_at(prior, truth, b, k))
    assert fit.fitted == ["f", "s"] and fit.c == 1.0 and any("per-KV-token" in n for n in fit.notes)
    assert (fit.f_ms, fit.s) == pytest.approx((1.0, 1.2))


def test_points_that_grow_less_than_the_context_alone_fit_one_scale_for_both(prior):
    """Two points at one context per request whose step grows less between them than the estimate's context part
    alone: holding c at the prior would need s <= 0, so f and one scale s = c are fitted, exactly, with a note."""
    truth = PriorFit(f_ms=3.0, s=0.3, c=0.3)
    b = [32, 256]
    k = [32 * 4096, 256 * 4096]  # 4k tokens of context per request at both
    ms = truth_at(prior, truth, b, k)
    context = _basis(prior.grid, np.array(b, float), np.array(k, float))[2]
    assert ms[1] - ms[0] < context[1] - context[0]  # the case this test is about
    fit = fit_on_prior(prior, b, k, ms)
    assert fit.fitted == ["f", "s", "c"] and (fit.f_ms, fit.s, fit.c) == pytest.approx((3.0, 0.3, 0.3))
    assert max(map(abs, fit.residuals_pct)) < 1e-6 and any("one scale for both" in n for n in fit.notes)
    # points that shrink with the load identify no positive scale at all: still refused, in one line
    with pytest.raises(HwProfileError, match="non-positive per-token cost"):
        fit_on_prior(prior, b, k, [ms[1], ms[0]])


def test_calibrate_cli_writes_the_set_and_says_what_moved(prior, tmp_path, capsys):
    src = Path(prior.path)
    for p in src.parent.glob(src.stem + "*"):
        shutil.copy(p, tmp_path / p.name)
    code, out, err = run(["calibrate", "--prior", str(tmp_path / src.name), "--point", "1,0,9.5",
                          "--out", str(tmp_path / "cal.csv")], capsys)
    assert code == 0, err
    assert "per-step cost: 0.300 ->" in out and "per-token cost: x1 (prior" in out
    cal = StepTable.read(tmp_path / "cal.csv")
    assert cal.grid.step_ms(1, 0) == pytest.approx(9.5)
    assert cal.meta["drafter_tables"]["mtp"]["table"] == "cal.drafter-mtp.csv"
    drafter = StepTable.read(tmp_path / "cal.drafter-mtp.csv")  # the per-step cost stays with the target
    assert drafter.grid.step_ms(1, 0) == pytest.approx(StepTable.read(
        tmp_path / f"{src.stem}.drafter-mtp.csv").grid.step_ms(1, 0))


def test_calibrate_names_each_term_in_words_and_warns_when_a_scale_is_far_from_one(prior, tmp_path, capsys):
    """Two points: the per-step and per-token costs, named in words. Points five times the estimate's growth
    between them move the per-token cost x5: the fit is exact, and a warning says the point or the estimate is
    probably wrong; a modest scale gives no warning."""
    src = Path(prior.path)
    for p in src.parent.glob(src.stem + "*"):
        shutil.copy(p, tmp_path / p.name)
    for scale, warned in ((1.3, False), (5.0, True)):
        b = [1, 256]
        ms = truth_at(prior, PriorFit(f_ms=1.0, s=scale), b, [0, 0])
        points = [x for bi, m in zip(b, ms, strict=True) for x in ("--point", f"{bi},0,{m:.6f}")]
        code, out, err = run(["calibrate", "--prior", str(tmp_path / src.name), *points,
                              "--out", str(tmp_path / f"cal{scale}.csv")], capsys)
        assert code == 0, err
        assert "calibrated the per-step cost and the per-token cost on 2 point(s)" in out
        warnings = [line for line in err.splitlines() if line.startswith("hw-profile: warning:")]
        assert bool(warnings) == warned, err
        if warned:
            assert warnings == [f"hw-profile: warning: the per-token cost moved x{scale:.2f}, more than 2x from the "
                                "estimate: a point is probably wrong (its batch tokens, KV tokens or time) or the "
                                "estimate is far off for this deployment (its engine, dtype or parallelism); check "
                                "the points before planning on this table"]


@pytest.mark.parametrize("argv, words", [
    (["estimate", "--model", "qwen3-8b", "--gpu", "H300", "--out", "x.csv"], ["--gpu", "H300"]),
    (["estimate", "--model", "qwen3-8b", "--gpu", "H200", "--ep", "2", "--gpus", "2", "--out", "x.csv"],
     ["--ep", "no experts"]),
    (["estimate", "--model", "qwen3-8b", "--gpu", "H200", "--cost", "warp=2", "--out", "x.csv"], ["--cost"]),
    (["estimate", "--model", "qwen3-8b", "--gpu", "H200", "--drafters", "medusa", "--out", "x.csv"],
     ["--drafters", "medusa"]),
    (["estimate", "--model", "qwen3-8b", "--gpu", "H200", "--out", "x.txt"], ["--out", ".csv"]),
    (["estimate", "--model", "deepseek-v4-flash", "--gpu", "H800", "--gpus", "64", "--ep", "64", "--cost",
      "overlap=fused", "--kernels", "roofline", "--out", "x.csv"], ["overlap=fused", "NVLink", "--ep 64"]),
    (["estimate", "--model", "deepseek-v4-flash", "--gpu", "H800", "--cost", "overlap=sometimes", "--out", "x.csv"],
     ["--cost overlap", "two-batch"]),
    (["estimate", "--model", "qwen3-8b", "--gpu", "H20", "--sibling", "H20", "--out", "x.csv"],
     ["--sibling", "H20", "another GPU"]),
    (["estimate", "--model", "qwen3-8b", "--gpu", "H20", "--sibling", "H200", "--kernels", "roofline", "--out",
      "x.csv"], ["--sibling", "--kernels roofline"]),
    (["estimate", "--model", "qwen3-8b", "--gpu", "H20", "--sibling", "H300", "--out", "x.csv"],
     ["--sibling", "H300"]),
    (["calibrate", "--point", "1,0,3", "--out", "x.csv"], ["--prior"]),
    (["calibrate", "--prior", "missing.csv", "--point", "1,0,3", "--out", "x.csv"], ["--prior", "missing.csv"]),
])
def test_estimate_mistakes_are_one_line(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    for word in words:
        assert word in err


@pytest.mark.skipif(__import__("importlib").util.find_spec("aiconfigurator_core") is None,
                    reason="the kernel database (dspark-sim[kernels]) is not installed")
def test_estimate_cli_sibling_prices_an_uncovered_gpu_from_a_covered_one(tmp_path, capsys):
    """R1 on two H20 nodes under SGLang (the database has no H20) from the H200's measured kernels: slower than the
    plain roofline at low load, where the measured kernels lose most to their roofline; a covered GPU refuses it."""
    argv = ["estimate", "--model", "deepseek-v3", "--gpu", "H20", "--gpus", "16", "--engine", "sglang",
            "--drafters", "mtp", "--max-batch-tokens", "64", "--max-kv-tokens", "65536"]
    code, _, err = run([*argv, "--sibling", "H200", "--out", str(tmp_path / "s.csv")], capsys)
    assert code == 0, err
    notes = StepTable.read(tmp_path / "s.csv").meta["notes"]  # how it was priced: in the sidecar (--notes prints it)
    assert any("what H200's measured kernels take beyond" in n for n in notes)
    code, _, err = run([*argv, "--out", str(tmp_path / "r.csv")], capsys)
    assert code == 0, err
    sib, roof = (StepTable.read(tmp_path / f"{n}.csv") for n in ("s", "r"))
    assert set(sib.points["source"]) == {"roofline+sibling"}
    assert sib.grid.step_ms(2, 8192) > 1.2 * roof.grid.step_ms(2, 8192)
    assert set(StepTable.read(tmp_path / "s.drafter-mtp.csv").points["source"]) <= {"roofline+sibling", "roofline"}
    code, _, err = run(["estimate", "--model", "qwen3-8b", "--gpu", "H200", "--sibling", "H100", "--out",
                        str(tmp_path / "x.csv")], capsys)
    assert code == 2 and err.count("\n") == 1 and "covers H200" in err


def test_estimate_cli_deepseek_dp_ep(tmp_path, capsys):
    code, _, err = run(["estimate", "--model", "deepseek-v4-flash", "--gpu", "H800", "--gpus", "8",
                          "--kernels", "roofline", "--max-batch-tokens", "2048", "--max-kv-tokens", "2000000",
                          "--out", str(tmp_path / "v4.csv")], capsys)
    assert code == 0, err
    assert "data-parallel attention, EP 8" in err
    table = StepTable.read(tmp_path / "v4.csv")
    assert table.meta["deployment"] == {"gpus": 8, "ep": 8, "parallel": "dp", "engine": "vllm"}
    assert table.meta["gpus"] == 1 and table.meta["dtype"] == "fp8"
    # the expert-parallel exchange: 40 MoE layers of at least the EP8 latency each
    assert table.grid.step_ms(1, 0) > 40 * 191e-3
    assert math.isfinite(table.grid.step_ms(2048, 2_000_000))


def test_estimate_cli_fused_overlap_on_one_board(tmp_path, capsys):
    """``--cost overlap=fused`` on an 8-GPU board: recorded in the sidecar with the verification-attention block,
    and every step at least as fast as the unfused exchange's (the fused layer never costs more)."""
    tables = {}
    for mode in ("none", "fused"):
        code, _, err = run(["estimate", "--model", "deepseek-v4-flash", "--gpu", "H800", "--gpus", "8",
                            "--kernels", "roofline", "--cost", f"overlap={mode}", "--max-batch-tokens", "1024",
                            "--max-kv-tokens", "1000000", "--out", str(tmp_path / f"{mode}.csv")], capsys)
        assert code == 0, err
        tables[mode] = StepTable.read(tmp_path / f"{mode}.csv")
    fused = tables["fused"]
    assert fused.meta["engine_costs"]["overlap"] == "fused" and fused.meta["engine_costs"]["fused_waves"] == 4.0
    assert fused.verify_attention is not None and fused.verify_attention.tokens_per_request == 2.0
    b, k = np.array([1.0, 64.0, 1024.0]), np.array([0.0, 100_000.0, 1_000_000.0])
    assert np.all(fused.grid.values(b, k) < tables["none"].grid.values(b, k))


def test_a_flat_estimate_between_the_points_moves_only_the_per_step_cost(tmp_path):
    """A V4 step bound by a slow exchange's latency is flat over a range of B, and a per-token scale fitted to two
    points inside it would explode."""
    shape = get_shape("deepseek-v4-flash")
    d = Deployment(gpu=get_gpu("H800"), gpus=64, ep=64, dtype="fp8", parallel="dp",
                   costs=replace(engine_defaults("sglang"), a2a_us_per_layer=5000.0))
    out = tmp_path / "v4.csv"
    write_estimate_set(shape, d, out, [], kernels="roofline", b_axis=np.array([1, 16, 64, 128, 256, 1024]),
                       k_axis=np.array([0, 100_000, 1_000_000]))
    prior = StepTable.read(out)
    b, k = [16, 128], [0, 0]
    assert np.ptp(prior.grid.values(np.array(b, float), np.zeros(2))) < 0.05 * prior.grid.step_ms(16, 0)
    fit = fit_on_prior(prior, b, k, [230.0, 236.0])
    assert fit.fitted == ["f"] and fit.s == 1.0 and any("flat" in n for n in fit.notes)


@pytest.mark.heavy
@pytest.mark.slow
@pytest.mark.skipif(__import__("importlib").util.find_spec("aiconfigurator_core") is None,
                    reason="the kernel database (dspark-sim[kernels]) is not installed")
def test_estimate_on_every_gpu_and_engine_the_kernel_database_covers():
    """Qwen3-8B is priced from measured kernels on every covered (GPU, engine); DeepSeek-V3/V4 from them where the
    database has their layout, else from the roofline with a note; never an error."""
    from hw_profile.estimate.estimate import default_parallel
    from hw_profile.kernels.database import coverage

    b = np.array([1.0, 16.0, 256.0])
    k = b * 4096
    pairs = coverage()
    assert len(pairs) >= 20
    for gpu, engine, _ in pairs:
        for model, gpus, overlap in (("qwen3-8b", 1, False), ("deepseek-v3", 8, False), ("deepseek-v4-flash", 8, True)):
            shape = get_shape(model)
            ep = gpus if shape.is_moe else 1
            # two micro-batches too: a one-token step is not split (a half-token lookup once raised here)
            d = Deployment(get_gpu(gpu), gpus=gpus, ep=ep, dtype="fp8" if shape.is_moe else "bf16",
                           parallel=default_parallel(shape, gpus, ep), engine=engine,
                           costs=replace(engine_defaults(engine), overlap=overlap))
            est = estimate_points(shape, d, b, k, kernels="auto")
            assert np.isfinite(est.ms).all() and (est.ms > 0).all(), (gpu, engine, model)
            if model == "qwen3-8b":
                assert (est.source == "kernels").all(), (gpu, engine)
            elif (est.source == "roofline").all():
                assert any("roofline instead" in n for n in est.notes), (gpu, engine, model)


def test_estimate_from_a_transformers_config(tiny_config, tmp_path, capsys):
    code, out, err = run(["estimate", "--model", str(tiny_config), "--gpu", "H20-141G", "--drafters", "mtp",
                          "--kernels", "roofline", "--out", str(tmp_path / "h20.csv")], capsys)
    assert code == 0, err
    table = StepTable.read(tmp_path / "h20.csv")
    assert table.meta["model_shape"]["hidden"] == 256 and table.meta["device"] == "H20-141G"
    assert table.meta["drafter_tables"]["mtp"]["table"] == "h20.drafter-mtp.csv"
    assert "h20.drafter-mtp.csv" in out


@pytest.mark.heavy
@pytest.mark.skipif(__import__("importlib").util.find_spec("aiconfigurator_core") is None,
                    reason="the kernel database (dspark-sim[kernels]) is not installed")
def test_the_accuracy_claimed_in_sidecars_and_docs_is_what_sim_to_real_measures(tmp_path, monkeypatch, capsys):
    """The count of public measurements within 30% that the sidecar caveat, the README and docs state is the one
    benchmarks/sim_to_real.py computes, and every row of its tables is in docs/sim-to-real.md as printed."""
    import importlib.util
    import re

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("sim_to_real", root / "benchmarks" / "sim_to_real.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "sim_to_real", module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", ["sim_to_real.py", "--markdown"])
    assert module.main() == 0
    printed = capsys.readouterr().out
    claim = re.search(r"kernels \+ engine: .* within 30%: (\d+ of \d+)", printed).group(1)
    from hw_profile.estimate.accuracy import DECODE_WITHIN_30
    assert claim == f"{DECODE_WITHIN_30[0]} of {DECODE_WITHIN_30[1]}"  # what every sidecar's expected_error says
    shape, d = dep()
    write_estimate_set(shape, d, tmp_path / "t.csv", [], kernels="roofline", b_axis=np.array([1, 8]),
                       k_axis=np.array([0, 1024]))
    assert claim in StepTable.read(tmp_path / "t.csv").meta["caveat"]["text"]
    for doc in ("README.md", "docs/hw-profile.md", "docs/sim-to-real.md"):
        assert f"within 30% on {claim}" in (root / doc).read_text().replace("\n", " "), doc
    page = (root / "docs" / "sim-to-real.md").read_text().splitlines()
    stale = [line for line in printed.splitlines() if line.startswith("| ") and line not in page]
    assert not stale, f"docs/sim-to-real.md lacks these rows as benchmarks/sim_to_real.py prints them: {stale}"


@pytest.mark.skipif(__import__("importlib").util.find_spec("aiconfigurator_core") is None,
                    reason="the kernel database (dspark-sim[kernels]) is not installed")
def test_the_infersim_kernel_comparison_in_the_docs_is_what_the_benchmark_prints(monkeypatch, capsys):
    """benchmarks/infersim_kernels.py against InferSim's H800 and H20 measurements: every row it prints is in
    docs/sim-to-real.md as printed, and the sources are where the page says they are (the H800's twin within 25%
    on most MLA decode points; the H20 roofline's GEMMs too fast at 16 tokens and too slow from 256 up)."""
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("infersim_kernels", root / "benchmarks" / "infersim_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", ["infersim_kernels.py", "--markdown"])
    assert module.main() == 0
    printed = capsys.readouterr().out
    page = (root / "docs" / "sim-to-real.md").read_text().splitlines()
    rows = [line for line in printed.splitlines() if line.startswith("| ")]
    assert len(rows) == 18
    stale = [line for line in rows if line not in page]
    assert not stale, f"docs/sim-to-real.md lacks these rows as benchmarks/infersim_kernels.py prints them: {stale}"
    table, by_m = module.rows()
    mla_h800 = next(r for r in table if r[0].startswith("MLA") and r[1] == "H800")
    assert float(mla_h800[3].split("x")[0]) == pytest.approx(1.0, abs=0.1)
    h20 = {int(r[1]): float(r[3].split("x")[0]) for r in by_m if r[0] == "H20"}
    assert h20[16] < 0.8 and min(h20[m] for m in (256, 1024, 4096)) > 1.2


@pytest.mark.skipif(__import__("importlib").util.find_spec("aiconfigurator_core") is None,
                    reason="the kernel database (dspark-sim[kernels]) is not installed")
def test_a_gated_deltanet_hybrid_is_priced_by_the_roofline_and_says_why():
    """The kernel database measures linear attention one token a sequence or one prompt at a time, not as a table's
    steps: a GPU it covers still prices Qwen3-Next by the roofline (not as GQA in every layer), and a note says
    why; --kernels db refuses in one line."""
    shape, d = dep("qwen3-next-80b-a3b", costs=engine_defaults("vllm"))
    b = np.array([1.0, 64.0])
    est = estimate_points(shape, d, b, b * 2048)
    assert set(est.source) == {"roofline"}
    assert any("Gated DeltaNet (linear attention) kernels are measured one token a sequence" in n for n in est.notes)
    roof = estimate_points(shape, d, b, b * 2048, kernels="roofline")
    np.testing.assert_allclose(est.ms, roof.ms)
    with pytest.raises(HwProfileError, match="Gated DeltaNet"):
        estimate_points(shape, d, b, b * 2048, kernels="db")
