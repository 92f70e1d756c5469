"""Engine scheduling modes (``engine.schedule``: mixed, prefill-first) and the one forward rule (a step is one
forward over all its tokens; a table sidecar's ``prefill_cost`` prices prompt chunks' attention apart), on a tiny
linear table whose step times are worked out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hw_profile.tables.step_table import ChunkAttention, StepTable
from simulator.core.engine import Simulation, StepPrices
from simulator.core.engine_config import EngineConfig
from simulator.core.invariants import check_invariants
from tests.simulator.engine_helpers import simulate

A_US, C_NS = 5.0, 10.0  # 10 ns per (chunk token, attended token) pair; 5 us per token: the retired GEMM price, ignored


def t_ms(b: float, k: float) -> float:
    """The table's step time: 4 ms fixed, 2 us per token, 10 ns per KV token read (exact under interpolation: the
    table is linear in B and in K)."""
    return 4.0 + 0.002 * b + 1e-5 * k


def tiny_table(tmp_path, priced: bool) -> StepTable:
    """The table written with its sidecar and read back, as the simulator reads a scenario's table."""
    rows = [{"batch_tokens": b, "kv_tokens": k, "status": "ok", "step_ms": t_ms(b, k)}
            for b in (1, 10_000) for k in (0, 1_000_000)]
    meta = {"prefill_cost": {"us_per_token": A_US, "ns_per_token_kv": C_NS, "source": "test"}} if priced else {}
    path = StepTable.from_points(rows, meta=meta).write(tmp_path / ("priced.csv" if priced else "plain.csv"))
    return StepTable.read(path)


def ar_sim(table: StepTable, schedule: str, *, max_batch_tokens: int = 1000, prefill_chunk: int = 200,
           max_running: int = 64, kv_capacity: int = 1_000_000) -> Simulation:
    """One replica serving the drafter-less system (one token per request-step) on ``table``."""
    config = EngineConfig(max_running=max_running, max_batch_tokens=max_batch_tokens, kv_capacity=kv_capacity,
                          prefill_chunk=prefill_chunk, schedule=schedule)
    return Simulation(config, StepPrices(table.grid, chunk_attention=table.chunk_attention))


def two_requests(sim: Simulation) -> None:
    """a: prompt 100, output 4, at t = 0; b: prompt 300, output 4, at 1 ms (during a's prefill)."""
    sim.open_loop(np.array([0.0, 0.001]), np.array([100, 300]), np.array([4, 4]), np.zeros(2, dtype=np.int64))
    sim.run(1.0)
    check_invariants(sim)


def test_a_mixed_step_is_one_forward_with_its_chunks_attention(tmp_path):
    sim = ar_sim(tiny_table(tmp_path, priced=True), "mixed")
    two_requests(sim)
    st = sim.steps.frame()
    # step 1: a's whole prompt and nothing to decode: T(100, 0) + its causal attention (100 x 50 pairs)
    # step 2: a decodes (1 token, 101 cached) with b's first chunk of 200 (nothing cached before it): T at all
    # 201 tokens and a's KV, + the chunk's 200 x 100 pairs
    # step 3: a decodes (102 cached) with b's second chunk of 100, which attends to the 200 before it
    expect = [t_ms(100, 0) + 100 * 50 * 1e-5,
              t_ms(201, 101) + 200 * 100 * 1e-5,
              t_ms(101, 102) + 100 * 250 * 1e-5]
    assert expect == pytest.approx([4.25, 4.60301, 4.45302], abs=1e-12)
    # the GEMMs are paid once: the decode token adds T(201) - T(200) = 2 us, not a second forward
    assert expect[1] - (t_ms(200, 0) + 200 * 100 * 1e-5) == pytest.approx(0.002 + 101e-5, abs=1e-12)
    assert list(st["prefill_tokens"][:3]) == [100, 200, 100]
    assert list(st["decoding"][:3]) == [0, 1, 1]
    assert st["step_ms"][:3] == pytest.approx(expect, abs=1e-9)
    assert np.diff(st["end"][:3]) * 1e3 == pytest.approx(expect[1:], abs=1e-9)  # the clock advanced by them


def test_mixed_without_the_block_is_t_of_all_tokens(tmp_path):
    sim = ar_sim(tiny_table(tmp_path, priced=False), "mixed")
    two_requests(sim)
    st = sim.steps.frame()
    # today's engine: T(decode + prefill tokens, every token cached), e.g. step 2 = T(1 + 200, 101)
    assert st["step_ms"][:3] == pytest.approx([t_ms(100, 0), t_ms(201, 101), t_ms(101, 302)], abs=1e-9)
    assert np.array_equal(st["step_ms"], [sim.prices.clock.lookup(b, k) for b, k in zip(st["batch_tokens"],
                                                                                  st["kv_tokens"], strict=True)])


@pytest.mark.parametrize("priced", [True, False])
def test_prefill_first_runs_prompts_alone_and_decode_waits(tmp_path, priced):
    sim = ar_sim(tiny_table(tmp_path, priced=priced), "prefill-first")
    two_requests(sim)
    st = sim.steps.frame()
    rq = sim.requests.frame()
    # step 1: a's prompt alone; step 2: b's 300 tokens in one prefill-only batch (no per-request chunk: the
    # batch-token cap bounds it, as SGLang's chunked_prefill_size does) while a, holding its first token, waits;
    # step 3: both decode (a holds 101 tokens, b 301)
    if priced:
        expect = [t_ms(100, 0) + 100 * 50 * 1e-5, t_ms(300, 0) + 300 * 150 * 1e-5, t_ms(2, 402)]
        assert expect == pytest.approx([4.25, 5.05, 4.00802], abs=1e-12)
    else:
        expect = [t_ms(100, 0), t_ms(300, 0), t_ms(2, 402)]
    assert list(st["prefill_tokens"][:3]) == [100, 300, 0]
    assert list(st["decoding"][:3]) == [0, 0, 2]
    assert st["step_ms"][:3] == pytest.approx(expect, abs=1e-9)
    assert rq["first_token"][1] * 1e3 == pytest.approx(expect[0] + expect[1], abs=1e-9)


def test_prefill_first_chunks_a_prompt_longer_than_the_cap(tmp_path):
    sim = ar_sim(tiny_table(tmp_path, priced=True), "prefill-first", max_batch_tokens=250)
    sim.open_loop(np.array([0.0]), np.array([600]), np.array([2]), np.zeros(1, dtype=np.int64))
    sim.run(1.0)
    check_invariants(sim)
    st = sim.steps.frame()
    assert list(st["prefill_tokens"]) == [250, 250, 100, 0]
    # each chunk attends to the ones before it: in its attention price, not on T's K axis
    assert list(st["kv_tokens"][:3]) == [0, 0, 0]
    chunk = [t_ms(c, 0) + c * (p + c / 2) * 1e-5 for c, p in ((250, 0), (250, 250), (100, 500))]
    assert st["step_ms"][:3] == pytest.approx(chunk, abs=1e-9)


PROMPT = 1024


def open_loop_run(tmp_path, schedule: str) -> tuple[dict, Simulation]:
    """Requests of 1024 prompt and 60 output tokens every 40 ms for 3 s on one replica, under the same engine
    limits: 2048 tokens a step, at most 256 prompt tokens of one request in a mixed step (vLLM's per-request
    chunk). Returns the mean TTFT, the mean time per output token after the first, the longest wait between
    two decode steps (ms) and the simulation."""
    sim = ar_sim(tiny_table(tmp_path, priced=True), schedule, max_batch_tokens=2048, prefill_chunk=256)
    times = np.arange(0.0, 3.0, 0.04)
    n = len(times)
    sim.open_loop(times, np.full(n, PROMPT), np.full(n, 60), np.zeros(n, dtype=np.int64))
    sim.run(8.0)
    check_invariants(sim)
    rq, st = sim.requests.frame(), sim.steps.frame()
    assert not np.isnan(rq["finish"]).any()  # below capacity: every request finished
    decode_ends = st["end"][st["decoding"] > 0]
    return {"ttft": float(np.mean(rq["first_token"] - rq["arrival"]) * 1e3),
            "tpot": float(np.mean((rq["finish"] - rq["first_token"]) / (rq["output"] - 1)) * 1e3),
            "gap": float(np.diff(decode_ends).max() * 1e3)}, sim


def test_prefill_first_lowers_ttft_and_delays_decode(tmp_path):
    mixed, sim_m = open_loop_run(tmp_path, "mixed")
    first, sim_f = open_loop_run(tmp_path, "prefill-first")
    n = len(sim_m.requests.frame()["arrival"])
    assert sim_m.steps.frame()["prefill_tokens"].sum() == sim_f.steps.frame()["prefill_tokens"].sum() == n * PROMPT
    st_f = sim_f.steps.frame()
    assert not np.any((st_f["prefill_tokens"] > 0) & (st_f["decoding"] > 0))  # prefill-first never mixes
    # a prompt is one prefill-only step (11.3 ms) instead of four mixed chunks, each a step of its own:
    # measured here, mean TTFT 13.7 ms against 26.1 ms
    assert first["ttft"] < 0.7 * mixed["ttft"]
    # decode waits for every prefill-only step: the longest decode gap is at least one whole prompt's step
    # (11.3 ms, 15.4 measured), while a mixed step never holds more than a 256-token chunk (6.9 ms); time per
    # output token 5.54 against 4.91 ms
    whole_prompt = t_ms(PROMPT, 0) + PROMPT * (PROMPT / 2) * 1e-5
    assert first["gap"] >= whole_prompt > mixed["gap"]
    assert first["tpot"] > 1.1 * mixed["tpot"]


@pytest.mark.parametrize("system", ["ar", "dspark"])
@pytest.mark.parametrize("schedule", ["mixed", "prefill-first"])
def test_scenario_schedule_and_sidecar_reach_the_engine(tmp_path, scenario_file, system, schedule):
    table = tiny_table(tmp_path, priced=True)
    fields = {"hardware": {"table": str(table.path), "drafter_tables": {"dspark": str(table.path)}},
              "systems": [system], "frontier": {"concurrency": [16]},
              "workload": {"output": {"dist": "uniform", "low": 16, "high": 112}},  # users finish apart
              "engine": {"kv_capacity_tokens": 100_000, "schedule": schedule}}
    row, sim = simulate(scenario_file(**fields))  # the invariants hold (simulate checks them)
    assert sim.config.schedule == schedule
    assert sim.prices.forward.chunk == ChunkAttention(C_NS, "test")
    st = sim.steps.frame()
    mixes = (st["prefill_tokens"] > 0) & (st["decoding"] > 0)
    assert st["prefill_tokens"].sum() > 0 and mixes.any() == (schedule == "mixed")
    plain = st["prefill_tokens"] == 0  # steps without prompt tokens: T(B, K) as without the block
    forward = st["step_ms"][plain] - st["draft_ms"][plain] - sim.config.stall_ms * (system == "dspark")
    assert forward == pytest.approx([t_ms(b, k) for b, k in zip(st["batch_tokens"][plain], st["kv_tokens"][plain],
                                                                strict=True)], abs=1e-9)
    assert row["tau"] >= 1.0


@pytest.mark.slow
def test_check_names_the_schedule_and_price_and_a_wrong_schedule_is_one_line(tmp_path, scenario_file):
    from tests.simulator.test_config import run_cli

    table = tiny_table(tmp_path, priced=True)
    path = scenario_file(hardware={"table": str(table.path)}, systems=["ar"],
                         engine={"kv_capacity_tokens": 100_000, "schedule": "prefill-first"})
    res = run_cli("check", str(path))
    assert res.returncode == 0, res.stderr
    assert "prefill: colocated, schedule prefill-first" in res.stdout
    assert ("a step is one forward over all its tokens; prompt chunks' attention priced apart (table sidecar): "
            "10 ns per (chunk token, token it attends to)") in res.stdout
    res = run_cli("check", str(path), "--set", "engine.schedule=sglang")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert "engine.schedule: Input should be 'mixed' or 'prefill-first' (got 'sglang')" in res.stderr


def test_a_prefill_pool_prices_its_forwards_by_the_same_rule(tmp_path):
    import simpy

    from simulator.core.forward import ForwardPrice
    from simulator.core.prefill import PrefillPool

    table = tiny_table(tmp_path, priced=True)
    env = simpy.Environment()
    done = {}
    pool = PrefillPool(env, 1, table.grid, 4000, lambda rid: done.setdefault(rid, env.now), table.chunk_attention)
    for rid, n in enumerate([1000, 1000, 1000, 1000, 5000]):
        pool.submit(rid, n)
    env.run()
    # forward 1: four prompts of 1000 (nothing cached); forward 2: 4000 of the long prompt; forward 3: its last
    # 1000 after 4000 cached; each is T at its tokens plus its chunks' attention
    first = t_ms(4000, 0) + 4 * (1000 * 500 * 1e-5)
    second = first + t_ms(4000, 0) + 4000 * 2000 * 1e-5
    third = second + t_ms(1000, 0) + 1000 * 4500 * 1e-5
    assert first == pytest.approx(12.0 + 20.0, abs=1e-12)
    assert [done[r] * 1e3 for r in range(5)] == pytest.approx([first] * 4 + [third], abs=1e-9)
    # an unbounded pool: each prompt alone, nothing cached
    alone = ForwardPrice(table.grid, table.chunk_attention).alone_ms(np.array([1000, 5000]))
    assert alone == pytest.approx([t_ms(1000, 0) + 5.0, t_ms(5000, 0) + 125.0], abs=1e-9)
    plain = tiny_table(tmp_path, priced=False)
    assert ForwardPrice(plain.grid, None).alone_ms(np.array([1000])) == pytest.approx([t_ms(1000, 0)], abs=1e-9)


def test_a_disaggregated_scenario_prices_the_pool_from_the_table(tmp_path, scenario_file):
    table = tiny_table(tmp_path, priced=True)
    base = {"hardware": {"table": str(table.path)}, "systems": ["ar"],
            "engine": {"kv_capacity_tokens": 100_000, "prefill": "disaggregated"}}
    _, unbounded = simulate(scenario_file(name="unbounded", **base))
    rq = unbounded.requests.frame()
    ttft = (rq["first_token"] - rq["arrival"]) * 1e3
    # prompts of 128 tokens, each prefilled alone: T(128, 0) + 128 x 64 pairs x 10 ns
    assert ttft[~np.isnan(ttft)] == pytest.approx(t_ms(128, 0) + 0.08192, abs=1e-9)
    sized = {**base, "hardware": {**base["hardware"], "prefill_replicas": 1}}
    _, pool = simulate(scenario_file(name="sized", **sized))
    assert pool.prefill_pool.price.chunk == ChunkAttention(C_NS, "test")


def test_request_ms_delays_every_request_before_the_engine_sees_it(tmp_path):
    """A request's time outside the forwards (API server, tokenisation) adds to its TTFT and E2E, not its TPOT."""
    table = tiny_table(tmp_path, priced=True)
    runs = {}
    for ms in (0.0, 3.0):
        config = EngineConfig(max_running=64, max_batch_tokens=1000, kv_capacity=1_000_000, request_ms=ms)
        sim = Simulation(config, StepPrices(table.grid, chunk_attention=table.chunk_attention))
        sim.open_loop(np.array([0.0]), np.array([100]), np.array([4]), np.zeros(1, dtype=np.int64))
        sim.run(1.0)
        check_invariants(sim)
        runs[ms] = sim.requests.frame()
    for col in ("first_token", "finish"):
        assert (runs[3.0][col][0] - runs[0.0][col][0]) * 1e3 == pytest.approx(3.0, abs=1e-9)
    assert runs[3.0]["arrival"][0] == runs[0.0]["arrival"][0] == 0.0


@pytest.mark.slow
def test_gpu_memory_utilization_sizes_the_pool_and_a_bad_one_is_one_line(tmp_path):
    from tests.simulator.test_config import run_cli

    peak = Path(__file__).resolve().parents[2] / "scenarios" / "peak.yaml"
    res = run_cli("check", str(peak), "--set", "engine.gpu_memory_utilization=1.5")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert "engine.gpu_memory_utilization: Input should be less than or equal to 1" in res.stderr
    pools = []
    for u in ("0.5", "0.9"):
        res = run_cli("check", str(peak), "--set", f"engine.gpu_memory_utilization={u}")
        assert res.returncode == 0, res.stderr
        pools.append(int(res.stdout.split("KV capacity ")[1].split(" tokens")[0].replace(",", "")))
    # the pool is (U x memory - weights - activations - runtime) / KV bytes in blocks of 16: 0.4 x the 139.8 GiB the
    # H200 reports more at 0.9, over the bf16 cache of a Qwen3-8B-shaped model (147,456 bytes a token)
    assert pools[1] - pools[0] == pytest.approx(0.4 * 139.8 * 2**30 / 147_456, abs=16)
    # a tenth of the H200's memory holds less than Qwen3-8B's 16 GB of bf16 weights: no pool, and the line says why
    res = run_cli("check", str(peak), "--set", "engine.gpu_memory_utilization=0.1")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert ("engine.kv_capacity_tokens: required, since its weights (16 GB a GPU) leave no room for a KV cache in "
            "150.109 GB at engine.gpu_memory_utilization 0.1 (vllm's rule) on hardware.gpus_per_replica 1") in res.stderr


def test_a_scheduler_one_step_ahead_admits_a_new_request_a_step_later(tmp_path):
    """With the step after the running one scheduled when it starts (vLLM's asynchronous scheduling), a request that
    arrives during step 1 cannot join step 2, already decided, only step 3; with nothing running it joins at once."""
    table = tiny_table(tmp_path, priced=True)
    first = {}
    for ahead in (False, True):
        config = EngineConfig(max_running=64, max_batch_tokens=1000, kv_capacity=1_000_000, schedule_ahead=ahead)
        sim = Simulation(config, StepPrices(table.grid, chunk_attention=table.chunk_attention))
        # a at t = 0 (nothing runs: it starts at once); b at 1 ms, during a's prefill step
        sim.open_loop(np.array([0.0, 0.001]), np.array([100, 100]), np.array([50, 4]), np.zeros(2, dtype=np.int64))
        sim.run(1.0)
        check_invariants(sim)
        st, rq = sim.steps.frame(), sim.requests.frame()
        ends = list(st["end"])
        prefills = list(st["prefill_tokens"][:3])
        first[ahead] = (rq["first_token"][0], rq["first_token"][1], ends, prefills)
    a0, b0, ends0, pre0 = first[False]
    a1, b1, ends1, pre1 = first[True]
    assert a0 == a1 == ends0[0] == ends1[0]  # the first request: no step running, no lag
    assert pre0 == [100, 100, 0] and b0 == ends0[1]  # b prefills in step 2
    assert pre1 == [100, 0, 100] and b1 == ends1[2]  # ... or in step 3, a step later


def test_the_engine_costs_outside_the_forward_come_from_the_table_unless_the_scenario_sets_them(tmp_path):
    """An estimate's sidecar records request_ms and whether the engine schedules a step ahead; a measured table
    (no engine costs) has neither; the scenario's engine.request_ms / engine.schedule_ahead win."""
    from hw_profile.tables.table_set import TableSet
    from simulator.inputs.hardware import request_ms, schedule_ahead

    rows = [{"batch_tokens": 1, "kv_tokens": 0, "status": "ok", "step_ms": 1.0}]
    est = TableSet(StepTable.from_points(rows, meta={"engine_costs": {"request_ms": 10.0, "overlap_schedule": True}}))
    measured = TableSet(StepTable.from_points(rows, meta={"kind": "measured"}))
    assert request_ms(est, None) == 10.0 and schedule_ahead(est, None) is True
    assert request_ms(measured, None) == 0.0 and schedule_ahead(measured, None) is False
    assert request_ms(est, 2.5) == 2.5 and schedule_ahead(est, False) is False


def test_every_table_writer_records_the_kv_cache_it_priced():
    """The KV bytes a token holds, per GPU and per replica, as each writer priced them: an analytic table of fp8
    weights with the engines' default 16-bit cache (the one cache type rule every writer shares), split over
    tensor-parallel GPUs but never below one KV head a GPU; a latent (MLA) cache whole on every GPU."""
    from hw_profile.hardware.gpus import get_gpu
    from hw_profile.hardware.shapes import get_shape
    from hw_profile.kernels.roofline import analytic_table

    qwen = get_shape("qwen3-8b")  # 36 layers, 8 KV heads of 128
    t = analytic_table(qwen, get_gpu("H200"), gpus=2, dtype="fp8", b_axis=np.array([1, 8]), k_axis=np.array([0, 64]))
    assert t.meta["kv_bytes_per_token_per_gpu"] == 36 * 2 * 4 * 128 * 2  # bf16 cache, 4 KV heads a GPU
    assert t.meta["kv_dtype"] == "bf16"
    assert t.meta["kv_bytes_per_token"] == 2 * t.meta["kv_bytes_per_token_per_gpu"]
    assert qwen.kv_cache_facts(2.0, 16, 16)["kv_bytes_per_token_per_gpu"] == 36 * 2 * 1 * 128 * 2  # one head each
    v3 = get_shape("deepseek-v3")
    facts = v3.kv_cache_facts(2.0, 8, 8)
    assert facts["kv_bytes_per_token_per_gpu"] == v3.kv_bytes_per_token  # the latent, whole on every GPU
