"""Benchmark-shaped workloads: traffic stages that stop (traffic.repeat), exact request counts per stage
(traffic.exact_counts) and shared prompt prefixes (workload.shared_prefix), at the level of the draws."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.errors import UserError
from simulator.inputs.config import Scenario, Traffic, Workload, load_scenario
from simulator.inputs.workload import RequestMaker, open_loop_arrivals, poisson_times, segment_bounds

STAGES = [{"duration_s": 20.0, "rate": 3.0}, {"duration_s": 10.0, "rate": 12.0}]


def arrivals(traffic: dict, duration: float, seed: int = 0, workload: dict | None = None):
    maker = RequestMaker(Workload.model_validate(workload or {}), Path, np.random.default_rng(seed))
    return open_loop_arrivals(Traffic.model_validate(traffic), maker, duration, Path, np.random.default_rng(seed + 1))


def test_stages_without_repeat_stop_at_the_last_segment_end():
    for exact in (False, True):
        arr = arrivals({"kind": "poisson", "segments": STAGES, "repeat": False, "exact_counts": exact}, 100.0)
        assert len(arr.time) > 100 and arr.time.max() < 30.0
        assert (np.diff(arr.time) >= 0).all()
    # the default repeats the stages to fill the run
    arr = arrivals({"kind": "poisson", "segments": STAGES}, 100.0)
    assert arr.time.max() > 90.0


def test_exact_counts_send_rate_times_duration_per_segment():
    traffic = {"kind": "poisson", "segments": [*STAGES, {"duration_s": 7.0, "rate": 0.5}], "repeat": False,
               "exact_counts": True}
    edges = segment_bounds(Traffic.model_validate(traffic))
    assert edges.tolist() == [0.0, 20.0, 30.0, 37.0]
    for seed in range(5):
        arr = arrivals(traffic, 60.0, seed)
        counts = np.histogram(arr.time, bins=edges)[0]
        assert counts.tolist() == [60, 120, 4]  # round(0.5 x 7) = 4 (numpy rounds half to even)
    # time_scale compresses the stages, counts follow the compressed durations
    fast = arrivals({**traffic, "time_scale": 2.0}, 60.0)
    assert np.histogram(fast.time, bins=edges / 2)[0].tolist() == [30, 60, 2]


def test_exact_counts_gaps_look_exponential():
    t = poisson_times([(1000.0, 5.0)], 1000.0, np.random.default_rng(3), repeat=False, exact_counts=True)
    gaps = np.diff(t)
    assert len(t) == 5000 and t[0] > 0 and t[-1] < 1000.0
    assert gaps.mean() == pytest.approx(0.2, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: coefficient of variation 1


def test_defaults_draw_what_they_always_drew():
    rng = np.random.default_rng(7)
    old = poisson_times([(5.0, 2.0), (5.0, 8.0)], 40.0, rng)
    new = poisson_times([(5.0, 2.0), (5.0, 8.0)], 40.0, np.random.default_rng(7), repeat=True, exact_counts=False)
    assert np.array_equal(old, new)
    # a constant rate with repeat off is the same stream (one segment spans the run)
    a = arrivals({"kind": "poisson", "rate": 4.0}, 30.0)
    b = arrivals({"kind": "poisson", "rate": 4.0, "repeat": False}, 30.0)
    assert np.array_equal(a.time, b.time) and np.array_equal(a.prompt, b.prompt) and a.prefix is None


def test_prefix_groups_in_range_roughly_uniform_and_seeded():
    wl = {"prompt": {"dist": "uniform", "low": 64, "high": 256}, "output": 32,
          "shared_prefix": {"tokens": 40, "groups": 5}}
    maker = RequestMaker(Workload.model_validate(wl), Path, np.random.default_rng(11))
    drawn = maker.draw(10000)
    assert len(drawn) == 4
    prompt, output, mix, prefix = drawn
    assert prefix.dtype == np.int64 and prefix.min() == 0 and prefix.max() == 4
    counts = np.bincount(prefix, minlength=5)
    assert (np.abs(counts - 2000) < 150).all()  # about 4.5 standard deviations
    # small draws come from the block and carry their prefixes too
    again = RequestMaker(Workload.model_validate(wl), Path, np.random.default_rng(11))
    firsts = [again.draw(3) for _ in range(4)]
    assert all(len(d) == 4 for d in firsts)
    block = RequestMaker(Workload.model_validate(wl), Path, np.random.default_rng(11)).draw(12)
    assert np.array_equal(np.concatenate([d[3] for d in firsts]), block[3])
    # the same lengths and mix as the workload without a prefix (groups are drawn after them)
    plain = RequestMaker(Workload.model_validate({k: v for k, v in wl.items() if k != "shared_prefix"}), Path,
                         np.random.default_rng(11)).draw(10000)
    assert len(plain) == 3
    assert np.array_equal(plain[0], prompt) and np.array_equal(plain[1], output) and np.array_equal(plain[2], mix)
    # open loop: one group per arrival
    arr = arrivals({"kind": "poisson", "rate": 20.0}, 10.0, workload=wl)
    assert arr.prefix is not None and len(arr.prefix) == len(arr.time) and arr.prefix.max() < 5


def test_prompts_not_longer_than_the_prefix_are_lengthened():
    wl = Workload.model_validate({"prompt": {"dist": "lognormal", "median": 50, "sigma": 1.0},
                                  "shared_prefix": {"tokens": 30, "groups": 2}})
    prompt = RequestMaker(wl, Path, np.random.default_rng(0)).draw(5000)[0]
    assert prompt.min() == 31


@pytest.mark.parametrize("prompt, tokens, ok", [
    (128, 127, True), (128, 128, False), (128, 500, False),
    ({"dist": "uniform", "low": 64, "high": 512}, 100, False),
    ({"dist": "uniform", "low": 64, "high": 512}, 63, True),
    ({"dist": "lognormal", "median": 300, "sigma": 0.5}, 1000, True),  # no positive minimum: not checked
])
def test_shared_prefix_must_be_shorter_than_the_shortest_prompt(scenario_file, prompt, tokens, ok):
    path = scenario_file(workload={"prompt": prompt, "shared_prefix": {"tokens": tokens, "groups": 3}})
    if ok:
        assert load_scenario(path).model.workload.shared_prefix.tokens == tokens
        return
    with pytest.raises(UserError) as err:
        load_scenario(path)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{path}: workload.shared_prefix.tokens: {tokens} tokens do not fit")


def test_shared_prefix_fields_are_strict(scenario_file):
    for bad, expect in (({"tokens": 0, "groups": 2}, "workload.shared_prefix.tokens: Input should be greater than 0"),
                        ({"tokens": 8, "groups": 0}, "workload.shared_prefix.groups: Input should be greater than 0"),
                        ({"tokens": 8}, "workload.shared_prefix.groups: required field is missing"),
                        ({"tokens": "8", "groups": 2}, "expected a number, got the string '8'")):
        with pytest.raises(UserError, match=expect):
            load_scenario(scenario_file(workload={"prompt": 128, "shared_prefix": bad}))


def test_repeat_and_exact_counts_are_for_poisson_traffic():
    base = {"hardware": {"table": "t.csv"}, "systems": ["ar"]}
    from pydantic import ValidationError

    from simulator.inputs.config import format_validation_error

    with pytest.raises(ValidationError) as err:
        Scenario.model_validate({**base, "traffic": {"kind": "trace", "trace": "a.csv", "repeat": False}})
    assert format_validation_error(Path("s.yaml"), err.value) == \
        "s.yaml: traffic.repeat: applies to poisson traffic; a replayed trace has its own arrivals"


def test_a_prompt_pool_is_cycled_in_one_shuffled_order():
    """inference-perf's shared-prefix data: groups x prompts_per_group whole prompts, generated once, requests taking
    them in one shuffled order, over and over: every run of G x P consecutive requests holds each prompt once."""
    wl = Workload.model_validate({"prompt": 240, "output": 32,
                                  "shared_prefix": {"tokens": 40, "groups": 3, "prompts_per_group": 4}})
    maker = RequestMaker(wl, Path, np.random.default_rng(5))
    ids = np.concatenate([maker.draw(5)[3] for _ in range(12)])  # 60 requests, drawn in pieces
    assert ids.min() == 0 and ids.max() == 11
    cycles = ids.reshape(5, 12)
    assert all(sorted(c) == list(range(12)) for c in cycles) and (cycles == cycles[0]).all()
    assert list(cycles[0]) != list(range(12))  # shuffled


def test_a_prompt_pool_needs_a_fixed_prompt_length(scenario_file):
    path = scenario_file(workload={"prompt": {"dist": "uniform", "low": 64, "high": 128},
                                   "shared_prefix": {"tokens": 8, "groups": 2, "prompts_per_group": 3}})
    with pytest.raises(UserError) as err:
        load_scenario(path)
    assert "\n" not in str(err.value)
    assert "workload.shared_prefix.prompts_per_group: a pool of repeated prompts needs a fixed prompt length" in \
        str(err.value)


def test_a_repeated_prompt_is_served_whole_from_the_prefix_cache(scenario_file):
    """Through a run: the pool's 6 prompts (of 200 tokens: 12 full blocks, 192 tokens) are computed once each;
    every later request prefills only the 8 tokens past its last full block."""
    from tests.simulator.engine_helpers import simulate

    path = scenario_file(workload={"prompt": 200, "output": 8,
                                   "shared_prefix": {"tokens": 50, "groups": 2, "prompts_per_group": 3}},
                         systems=["ar"], frontier={"concurrency": [4]}, engine={"kv_capacity_tokens": 100_000})
    row, sim = simulate(path)
    assert row["prefix_misses"] == 6 and row["prefix_hits"] > 0
    assert row["prefix_hit_tokens"] == 192 * row["prefix_hits"]
    st = sim.steps.frame()
    requests = row["prefix_hits"] + row["prefix_misses"]
    assert st["prefill_tokens"].sum() == 6 * 200 + (requests - 6) * 8
