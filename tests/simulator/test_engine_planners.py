"""The engines' planners (``vllm-adaptive``, ``sglang-compact``, ``trtllm-adaptive``) against brute force on small
cases, vLLM's one-step lag, SGLang's fit, TensorRT-LLM's lagged snapshot, and all three in the engine (the invariant
checker runs on every simulate())."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hw_profile.tables.step_table import StepTimeGrid
from simulator.core.drafters import DRAFTER_KINDS, DraftCost
from simulator.core.forward import StepCost
from simulator.core.policies import PolicyView, checked_lengths, make_policy, top_k_prefix_lengths
from simulator.core.policies.engines import (
    SglangCompact,
    TrtllmAdaptive,
    VllmAdaptive,
    dummy_step_ms,
    fit_cost_model,
)
from simulator.errors import PolicyError
from tests.simulator.engine_helpers import simulate

CTX = 1000  # the profiled context in these tests (per dummy request)


def jagged_grid() -> StepTimeGrid:
    """A step table with a dip along B (so the running max matters) and a strong K term (so the profiled context
    matters): T(B, K) = 2 + 0.4 B + 0.001 K, minus 3 ms at B = 6 and B = 7."""
    b = np.arange(1, 41, dtype=float)
    k = np.array([0.0, 20_000.0, 40_000.0])
    ms = 2.0 + 0.4 * b[None, :] + 0.001 * k[:, None] - 3.0 * np.isin(b, (6, 7))[None, :]
    bb, kk = np.meshgrid(b, k)
    return StepTimeGrid.from_points(bb.ravel(), kk.ravel(), ms.ravel())


def drafter(kind: str = "dspark") -> DraftCost:
    b = np.array([1.0, 100.0])
    k = np.array([0.0, 1e6])
    bb, kk = np.meshgrid(b, k)
    return DraftCost(DRAFTER_KINDS[kind], StepTimeGrid.from_points(bb.ravel(), kk.ravel(),
                                                                 (0.5 + 0.01 * bb + 1e-6 * kk).ravel()))


def view(conf, sps, ids=None, remaining=None, step=0) -> PolicyView:
    conf = np.asarray(conf, dtype=float)
    rows, gamma = conf.shape
    remaining = np.full(rows, gamma + 1, dtype=np.int64) if remaining is None else np.asarray(remaining)
    return PolicyView(conf, remaining, np.full(rows, 100, dtype=np.int64), sps, gamma, step,
                      ids=None if ids is None else np.asarray(ids, dtype=np.int64))


def vllm_tables(grid: StepTimeGrid, draft: DraftCost, gamma: int, n_max: int, r_max: int, ctx: int = CTX):
    """The test's own reading of vLLM's startup profile: one dummy step per token count n (n / (gamma + 1)
    requests of ``ctx`` tokens each) and per request count, each made monotone; a plain loop, no shared code."""
    verify, top = [], 0.0
    for n in range(n_max + 1):
        req = max(int(np.ceil(n / (gamma + 1))), 1)
        top = max(top, grid.step_ms(n, req * ctx))
        verify.append(top)
    dcost, top = [], 0.0
    for r in range(r_max + 1):  # a dummy step's first pass takes in its gamma + 1 tokens a request
        top = max(top, draft.ms(r, gamma, r * ctx, r * (gamma + 1)))
        dcost.append(top)
    return np.array(verify), np.array(dcost)


def best_budget(conf: np.ndarray, objective) -> int:
    """Brute force over every length vector: the total drafts of the first vector (in order of total) whose
    objective(tau, drafts) is largest."""
    rows, gamma = conf.shape
    a = np.cumprod(conf, axis=1)
    best, budget = -np.inf, 0
    for ls in sorted(itertools.product(range(gamma + 1), repeat=rows), key=sum):
        tau = rows + sum(a[r, :k].sum() for r, k in enumerate(ls))
        value = objective(tau, sum(ls))
        if value > best + 1e-12:
            best, budget = value, sum(ls)
    return budget


CASES = [
    np.array([[0.9, 0.8, 0.7], [0.6, 0.9, 0.5]]),
    np.array([[0.95, 0.95, 0.95], [0.3, 0.9, 0.9], [0.99, 0.2, 0.8]]),
    np.array([[0.5, 0.5, 0.5], [0.7, 0.1, 0.9]]),
    np.array([[1.0, 0.99, 0.98, 0.97], [0.9, 0.9, 0.9, 0.9]]),
]


@pytest.mark.parametrize("conf", CASES)
@pytest.mark.parametrize("prefill", [0, 5])
@pytest.mark.parametrize("kind", ["dspark", "eagle3"])
def test_vllm_budget_is_the_brute_force_argmax_over_its_profiled_tables(conf, prefill, kind):
    grid, draft = jagged_grid(), drafter(kind)
    rows, gamma = conf.shape
    sps = StepCost(grid, kv=12_345.0, prefill=prefill, fixed_ms=0.7, rows=rows, verify_kv=0.0, draft=draft)
    policy = VllmAdaptive(profile_context=CTX)
    ids = np.arange(rows) + 40
    policy.choose(view(conf, sps, ids))  # the first step only fills the averages (nothing older to size from)
    lengths = policy.choose(view(conf, sps, ids, step=1))  # the average of a constant is the constant
    verify, dcost = vllm_tables(grid, draft, gamma, rows * (gamma + 1) + prefill, rows)
    budget = best_budget(conf, lambda tau, n: tau / (dcost[rows] + verify[rows + prefill + n]))
    assert lengths.sum() == budget
    assert np.array_equal(lengths, top_k_prefix_lengths(conf, budget))


def test_vllm_tables_are_the_profile_not_the_step():
    """The engine prices every step on its profile at one context: the same step, planned with tables profiled at
    two contexts, gets the budgets of those profiles, whatever the step's real KV."""
    grid = jagged_grid()
    conf = np.array([[0.9, 0.8, 0.7], [0.85, 0.8, 0.75]])
    true_sps = StepCost(grid, kv=40_000.0, prefill=0, fixed_ms=0.0, rows=2, verify_kv=0.0, draft=None)
    budgets = {}
    for ctx in (1, 20_000):
        policy = VllmAdaptive(profile_context=ctx)
        policy.choose(view(conf, true_sps))
        budgets[ctx] = int(policy.choose(view(conf, true_sps, step=1)).sum())
        verify, _ = vllm_tables(grid, drafter(), 3, 8, 2, ctx)
        assert budgets[ctx] == best_budget(conf, lambda tau, n, v=verify: tau / v[2 + n])
    assert budgets[1] != budgets[20_000]


def test_vllm_sizes_from_confidences_one_step_old():
    """A confidence change is acted on in sizing one step later, through the EMA (0.8 on the newest step)."""
    grid = jagged_grid()
    sps = StepCost(grid, kv=0.0, prefill=0, fixed_ms=0.0, rows=2, verify_kv=0.0, draft=None)
    high = np.array([[0.99, 0.99, 0.99], [0.98, 0.98, 0.98]])
    low = np.array([[0.3, 0.2, 0.1], [0.25, 0.2, 0.1]])
    ids = [7, 3]
    policy = VllmAdaptive(profile_context=CTX)
    verify, _ = vllm_tables(grid, drafter(), 3, 8, 2)

    def expect(conf):
        return best_budget(conf, lambda tau, n: tau / verify[2 + n])

    sums = [int(policy.choose(view(c, sps, ids, step=s)).sum()) for s, c in enumerate([high] * 3 + [low] * 3)]
    assert sums[0] == 0  # nothing to size from yet
    assert sums[1] == sums[2] == sums[3] == expect(high)  # step 3 sees `low` but sizes from the steps before
    assert expect(high) != expect(low)
    mixed = 0.8 * low + 0.2 * high
    assert sums[4] == expect(mixed)
    assert sums[5] == expect(0.8 * low + 0.2 * mixed)


def test_vllm_follows_requests_by_id_and_sizes_newcomers_at_the_batch_mean():
    grid = jagged_grid()
    sps = StepCost(grid, kv=0.0, prefill=0, fixed_ms=0.0, rows=2, verify_kv=0.0, draft=None)
    verify, _ = vllm_tables(grid, drafter(), 3, 12, 3)
    high = np.array([0.99, 0.99, 0.99])
    low = np.array([0.3, 0.2, 0.1])
    policy = VllmAdaptive(profile_context=CTX)
    policy.choose(view(np.stack([high, low]), sps, ids=[5, 9]))
    # the rows swap places and a newcomer (id 2) joins: each known request keeps its own average
    now = np.stack([low, high, high])
    got = int(policy.choose(view(now, sps, ids=[9, 5, 2], step=1)).sum())
    sizing = np.stack([low, high, (high + low) / 2])
    assert got == best_budget(sizing, lambda tau, n: tau / verify[3 + n])


def test_vllm_sizing_ignores_positions_past_a_requests_end():
    grid = jagged_grid()
    sps = StepCost(grid, kv=0.0, prefill=0, fixed_ms=0.0, rows=1, verify_kv=0.0, draft=None)
    conf = np.array([[0.99, 0.99, 0.99]])
    policy = VllmAdaptive(profile_context=CTX)
    policy.choose(view(conf, sps))
    ending = np.array([[0.99, 0.0, 0.0]])  # the engine zeroes what a request cannot verify
    lengths = policy.choose(view(ending, sps, remaining=[2], step=1))
    verify, _ = vllm_tables(grid, drafter(), 3, 4, 1)
    assert lengths.sum() == best_budget(ending, lambda tau, n: tau / verify[1 + n])


def test_sglang_fit_recovers_the_coefficients_of_its_own_formula():
    rng = np.random.default_rng(0)
    bias, alpha, theta = 3.2, 0.045, 0.021
    bs = rng.integers(1, 300, 80)
    k = bs * rng.integers(0, 8, 80)
    got = fit_cost_model(bs, k, bias + alpha * bs + theta * (bs + k))
    assert got == pytest.approx((bias, alpha, theta), rel=1e-9)


def test_sglang_fit_from_a_table_built_from_its_formula():
    """A step table T(B, K) = bias + (alpha / ctx) K + theta B is, at the profile's dummy shapes (bs requests of
    ctx tokens, bs (1 + k) tokens), exactly SGLang's formula; the policy's profile and fit recover it, the drafter's
    cost at the profiled shapes landing in alpha and bias."""
    bias, alpha, theta, ctx = 2.5, 0.03, 0.02, 512
    b = np.array([1.0, 4096.0])
    kv = np.array([0.0, 300.0 * ctx])
    bb, kk = np.meshgrid(b, kv)
    grid = StepTimeGrid.from_points(bb.ravel(), kk.ravel(), (bias + alpha / ctx * kk + theta * bb).ravel())
    policy = SglangCompact(profile_context=ctx)
    sps = StepCost(grid, kv=0.0, prefill=0, fixed_ms=0.0, rows=1, verify_kv=0.0, draft=None)
    assert fit_cost_model(*policy.profile(sps, 5)) == pytest.approx((bias, alpha, theta), rel=1e-9)


@pytest.mark.parametrize("conf", CASES)
def test_sglang_plan_is_the_brute_force_argmax_of_its_fitted_cost(conf):
    grid, draft = jagged_grid(), drafter()
    rows, gamma = conf.shape
    sps = StepCost(grid, kv=5000.0, prefill=3, fixed_ms=0.2, rows=rows, verify_kv=0.0, draft=draft)
    policy = SglangCompact(profile_context=CTX, batch_sizes=[1, 2, 3, 4, 6, 8])
    lengths = checked_lengths(policy, "sglang-compact", policy.choose(view(conf, sps)), view(conf, sps))
    bias, alpha, theta = fit_cost_model(*policy.profile(sps, gamma))
    budget = best_budget(conf, lambda tau, n: tau / (bias + alpha * rows + theta * (rows + 3 + n)))
    assert lengths.sum() == budget
    assert np.array_equal(lengths, top_k_prefix_lengths(conf, budget))  # per-request windows by survival


def test_sglang_without_a_table_verifies_every_drafted_token():
    conf = np.array([[0.1, 0.1, 0.1], [0.9, 0.0, 0.0]])
    sps = StepCost(jagged_grid(), kv=0.0, prefill=0, fixed_ms=0.0, rows=2, verify_kv=0.0, draft=None)
    lengths = make_policy("sglang-compact", {"table": False}).choose(view(conf, sps, remaining=[4, 2]))
    assert lengths.tolist() == [3, 1]


def test_sglang_reads_a_plain_sps_callable_as_its_table():
    """Given an SPS curve instead of the engine's table (the audit's worlds), the points are that curve at this
    step's R: a curve that is exactly linear in B is recovered and planned on exactly."""
    conf = np.array([[0.9, 0.6, 0.3], [0.8, 0.8, 0.8]])
    t0, t1 = 4.0, 0.9

    def sps(b):
        return 1000.0 / (t0 + t1 * np.asarray(b, dtype=float))

    policy = SglangCompact()
    lengths = policy.choose(view(conf, sps))
    assert lengths.sum() == best_budget(conf, lambda tau, n: tau / (t0 + t1 * (2 + n)))


# --- trtllm-adaptive -----------------------------------------------------------------------------------------------


def trtllm_plan(lagged: np.ndarray, cost_ms, tiers=None, min_gain: float = 0.01) -> np.ndarray:
    """The test's own reading of TensorRT-LLM's planner, written as loops: every request verifies one draft; for
    each captured length t the budget R (t - 1) buys the largest survival products above that floor; Theta = (R +
    the first positions' survival + what the budget buys) / cost(R (t + 1)); the best t, or the whole block unless
    it wins by min_gain; then the windows: the budget's largest products, by position then request on ties."""
    rows, gamma = lagged.shape
    surv = np.cumprod(lagged, axis=1)
    above = sorted(((surv[r, j], j, r) for r in range(rows) for j in range(1, gamma)), key=lambda x: (-x[0], x[1], x[2]))
    tiers = list(range(1, gamma + 1)) if tiers is None else tiers
    theta = {}
    for t in tiers:
        n = rows * (t - 1)
        tau = rows + surv[:, 0].sum() + sum(v for v, _, _ in above[:n])
        theta[t] = tau / cost_ms(rows * (t + 1))
    best = max(tiers, key=lambda t: (theta[t], t))
    if gamma in tiers and best != gamma and theta[best] < theta[gamma] * (1 + min_gain):
        best = gamma
    lengths = np.ones(rows, dtype=np.int64)
    for v, _, r in above[:rows * (best - 1)]:
        lengths[r] += v >= 1e-6
    return lengths


def linear_sps(t0: float, t1: float):
    return lambda b: 1000.0 / (t0 + t1 * np.asarray(b, dtype=float))


@pytest.mark.parametrize("conf", CASES)
@pytest.mark.parametrize("t1", [0.05, 0.6, 3.0])
def test_trtllm_plans_on_the_block_before_as_its_rule_says(conf, t1):
    """Against the loop-written rule, on the confidences of the step before (this step's are different), at cheap,
    middling and dear verified tokens; the budget is a tier total and the windows prefixes."""
    sps = linear_sps(4.0, t1)
    policy = TrtllmAdaptive()
    rows, gamma = conf.shape
    first = policy.choose(view(conf, sps))
    now = np.clip(conf[::-1].copy() * 0.5, 0.0, 1.0) if rows > 1 else conf * 0.5
    got = policy.choose(view(now, sps, step=1))
    want = trtllm_plan(conf, lambda tokens: 4.0 + t1 * tokens)
    assert np.array_equal(got, want)
    assert (got.sum() - rows) % rows == 0 or (got < gamma).all()  # a tier's total, bar products under 1e-6
    assert first.tolist() == trtllm_plan(np.ones_like(conf), lambda tokens: 4.0 + t1 * tokens).tolist()


def test_trtllm_never_reads_this_steps_confidences():
    """Non-anticipating: after the same history, any confidences this step give the same lengths (here the step
    before was confident, so it verifies long; the live block would say otherwise)."""
    sps = linear_sps(2.0, 0.4)
    history = np.array([[0.95, 0.9, 0.9, 0.9], [0.9, 0.9, 0.85, 0.8], [0.99, 0.99, 0.99, 0.99]])
    answers = set()
    for live in (np.full((3, 4), 0.01), np.full((3, 4), 0.99), np.random.default_rng(1).uniform(size=(3, 4))):
        policy = TrtllmAdaptive()
        policy.choose(view(history, sps, ids=[4, 5, 6]))
        answers.add(tuple(policy.choose(view(live, sps, ids=[4, 5, 6], step=1))))
    assert len(answers) == 1


def test_trtllm_follows_requests_by_id_lags_as_asked_and_takes_newcomers_as_certain():
    sps = linear_sps(3.0, 0.5)
    a, b, c = np.array([0.9, 0.8, 0.7]), np.array([0.3, 0.2, 0.1]), np.array([0.6, 0.6, 0.6])
    policy = TrtllmAdaptive()
    policy.choose(view(np.stack([a, b]), sps, ids=[5, 9]))
    got = policy.choose(view(np.stack([c, c, c]), sps, ids=[9, 5, 2], step=1))
    cost = lambda tokens: 3.0 + 0.5 * tokens  # noqa: E731
    assert np.array_equal(got, trtllm_plan(np.stack([b, a, np.ones(3)]), cost))
    two = TrtllmAdaptive(lag=2)
    steps = [np.stack([a, a]), np.stack([b, b]), np.stack([c, c])]
    out = [two.choose(view(x, sps, ids=[1, 2], step=s)) for s, x in enumerate(steps)]
    assert np.array_equal(out[1], trtllm_plan(np.ones((2, 3)), cost))  # nothing two steps old yet
    assert np.array_equal(out[2], trtllm_plan(steps[0], cost))


def test_trtllm_keeps_the_whole_block_unless_a_trim_wins_by_its_margin():
    """One request, survival 0.9 then 0.9 x 0.95: on a cost where the trimmed length wins by under 1%, the
    planner keeps the block; with min_gain 0 it takes the trim; a ladder without the block takes its best rung."""
    conf = np.array([[0.9, 0.95, 0.5]])
    tau = [1 + 0.9, 1 + 0.9 + 0.855, 1 + 0.9 + 0.855 + 0.4275]
    cost_full = 10.0
    cost_two = tau[1] / (tau[2] / cost_full * 1.005)  # Theta at two drafts 0.5% over the block's
    grid_ms = {2: 7.0, 3: cost_two, 4: cost_full}

    def sps(b):
        return 1000.0 / np.array([grid_ms.get(int(x), 0.5) for x in np.atleast_1d(b)])

    def plan(**params):
        policy = TrtllmAdaptive(**params)
        policy.choose(view(conf, sps))
        return policy.choose(view(conf, sps, step=1)).tolist()

    assert tau[0] / grid_ms[2] < tau[2] / cost_full  # one draft loses outright
    assert plan() == [3]
    assert plan(min_gain=0.0) == [2]
    assert plan(tiers=[1, 2]) == [2]


def test_trtllm_profiles_whole_steps_at_this_batch_size():
    """Its cost at R requests is the engine's profile: a dummy decode step of R x (t + 1) tokens over R requests
    of profile_context tokens plus the drafter's pass, monotone along t; prompt tokens do not count."""
    grid, draft = jagged_grid(), drafter()
    conf = np.array([[0.9, 0.8, 0.7], [0.6, 0.9, 0.5]])
    sps = StepCost(grid, kv=9_999.0, prefill=7, fixed_ms=0.3, rows=2, verify_kv=0.0, draft=draft)
    policy = TrtllmAdaptive(profile_context=CTX)
    policy.choose(view(conf, sps))
    got = policy.choose(view(conf, sps, step=1))
    steps = [grid.step_ms(2 * (t + 1), 2 * CTX) + draft.ms(2, 3, 2.0 * CTX, 2) for t in (1, 2, 3)]
    monotone = np.maximum.accumulate(steps)
    assert np.allclose(policy._profile[2], monotone)
    assert np.allclose(dummy_step_ms(grid, np.array([4.0]), np.array([2.0]), CTX), grid.step_ms(4, 2 * CTX))
    assert np.array_equal(got, trtllm_plan(conf, lambda tokens: monotone[tokens // 2 - 2]))


def test_trtllm_without_a_table_verifies_every_drafted_token():
    conf = np.array([[0.1, 0.1, 0.1], [0.9, 0.0, 0.0]])
    lengths = make_policy("trtllm-adaptive", {"table": False}).choose(view(conf, linear_sps(1, 5), remaining=[4, 2]))
    assert lengths.tolist() == [3, 1]


@pytest.mark.parametrize(("name", "params", "needle"), [
    ("trtllm-adaptive", {"lag": 0}, "lag must be a positive integer"),
    ("trtllm-adaptive", {"min_gain": 1.5}, "min_gain must be in [0, 1)"),
    ("trtllm-adaptive", {"tiers": [0, 2]}, "tiers must be a list of positive integers"),
    ("vllm-adaptive", {"ema_alpha": 1.5}, "ema_alpha must be in (0, 1]"),
    ("vllm-adaptive", {"profile_context": 0}, "profile_context must be a positive integer"),
    ("sglang-compact", {"table": "yes"}, "table must be true or false"),
    ("sglang-compact", {"batch_sizes": [8]}, "batch_sizes needs at least two"),
])
def test_bad_parameters_are_one_line(name, params, needle):
    with pytest.raises(PolicyError) as exc:
        make_policy(name, params)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.slow
def test_engine_planners_in_a_scenario_trim_with_load(scenario_file):
    """All three run in the engine (invariants checked), verify less per request-step at high load than at low,
    and SGLang's planner without a table verifies the whole block."""
    path = scenario_file(systems=["vllm-adaptive", "sglang-compact", "trtllm-adaptive",
                                  {"name": "sglang-no-table", "policy": "sglang-compact", "params": {"table": False}}],
                         frontier={"concurrency": [4, 120]}, engine={"max_running": 128, "max_batch_tokens": 8192},
                         workload={"output": 512})
    for system in ("vllm-adaptive", "sglang-compact", "trtllm-adaptive"):
        low, _ = simulate(path, system, concurrency=4)
        high, _ = simulate(path, system, concurrency=120)
        assert low["mean_verify_budget"] > high["mean_verify_budget"] + 0.5, system
    full, sim = simulate(path, "sglang-no-table", concurrency=120)
    steps = sim.steps.frame()
    gamma = sim.config.gamma
    assert full["mean_verify_budget"] > gamma  # every drafted token, bar requests' last steps
    assert steps["verified"].sum() > 0.97 * gamma * steps["decoding"].sum()


def test_every_built_in_policy_runs_under_the_invariant_checker():
    """test_engine.py's shapes run every system of ALL_SYSTEMS through check_invariants: every registered
    built-in must be among them."""
    from simulator.core.policies import REGISTRY, resolve
    from simulator.inputs.systems import shorthand
    from tests.simulator.test_engine import ALL_SYSTEMS

    policies = [s["policy"] if isinstance(s, dict) else shorthand(s, "dspark").policy for s in ALL_SYSTEMS]
    covered = {resolve(p)[0] for p in policies}
    assert set(REGISTRY.values()) <= covered


def test_sglang_profiles_the_batch_sizes_its_table_says_the_engine_captures():
    """As the engine derives its table from its captured graphs: a table that records capture by requests (an
    SGLang estimate's cuda_graphs) is profiled at those sizes, one captured by tokens or none at the default list,
    and batch_sizes given wins over both."""
    from dataclasses import replace

    from hw_profile.tables.cuda_graphs import CudaGraphs
    from simulator.core.policies.engines import CAPTURE_BATCH_SIZES

    grid = jagged_grid()
    by_requests = replace(grid, graphs=CudaGraphs((1, 2, 3, 5, 8), "requests", 0.0))
    by_tokens = replace(grid, graphs=CudaGraphs((1, 2, 3, 5, 8), "tokens", 0.0))
    policy = SglangCompact()
    assert policy.profiled_sizes(by_requests).tolist() == [1, 2, 3, 5, 8]
    assert policy.profiled_sizes(by_tokens).tolist() == list(CAPTURE_BATCH_SIZES)
    assert policy.profiled_sizes(grid).tolist() == list(CAPTURE_BATCH_SIZES)
    assert SglangCompact(batch_sizes=[2, 4]).profiled_sizes(by_requests).tolist() == [2, 4]
    sps = StepCost(by_requests, kv=0.0, prefill=0, fixed_ms=0.0, rows=1, verify_kv=0.0, draft=None)
    bs, _, _ = policy.profile(sps, 2)
    assert sorted(set(bs.tolist())) == [1, 2, 3, 5, 8] and len(bs) == 5 * 3


def test_vllm_profiles_an_autoregressive_drafters_first_pass_over_the_dummy_steps_tokens():
    """An EAGLE-style drafter's first pass takes in every token the target processed; vLLM's startup profile runs
    it on dummy steps of gamma + 1 tokens a request, so its draft table holds that pass, not one token a request.
    By hand on the test's linear grid (0.5 + 0.01 B ms at K = 0): gamma passes of R tokens, plus the first pass's
    extra R x gamma tokens at 0.01 ms each."""
    sps = StepCost(jagged_grid(), kv=0.0, prefill=0, fixed_ms=0.0, rows=8, verify_kv=0.0, draft=drafter("eagle3"))
    policy = VllmAdaptive(profile_context=1)
    conf = np.full((8, 3), 0.9)
    policy.choose(view(conf, sps))
    for r in (1, 4, 8):
        one_a_request = 3 * (0.5 + 0.01 * r + 1e-6 * r)
        assert policy._draft[r] == pytest.approx(one_a_request + 0.01 * r * 3, rel=1e-9)
