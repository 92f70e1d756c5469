"""Every runs.csv metric on hand-built request and step logs, with the figures worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hw_profile.tables.step_table import StepTimeGrid
from simulator.core.engine import REQUEST_COLUMNS, STEP_COLUMNS
from simulator.outputs.metrics import request_metrics, saturated, step_metrics, tau_by_mix, user_speed

NAN = float("nan")


def request_log(rows: list[dict]) -> dict[str, np.ndarray]:
    """A request log with the engine's columns; unspecified times NaN, counts 0."""
    defaults = {k: (NAN if t is np.float64 else (False if t is np.bool_ else 0)) for k, t in REQUEST_COLUMNS.items()}
    return {k: np.array([r.get(k, defaults[k]) for r in rows], dtype=t) for k, t in REQUEST_COLUMNS.items()}


def step_log(rows: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.array([r.get(k, 0) for r in rows], dtype=t) for k, t in STEP_COLUMNS.items()}


# window [10, 20), the run stopped following at 30; SLA target 50 tok/s/user
WARMUP, END, STOP, SLA = 10.0, 20.0, 30.0, 50.0
REQUESTS = request_log([
    # before the window: ignored however it went
    dict(arrival=5.0, routed=5.0, admitted=5.0, first_token=5.0, finish=15.0, output=11, generated=11, preemptions=5),
    # finished inside the window: speed (101 - 1) / (12.5 - 10.5) = 50 (meets the SLA), TTFT 0.5, wait 0.5
    dict(arrival=10.0, routed=10.5, admitted=11.0, first_token=10.5, finish=12.5, output=101, generated=101),
    # speed 100 / 4 = 25, TTFT 1, wait 0.2
    dict(arrival=12.0, routed=12.0, admitted=12.2, first_token=13.0, finish=17.0, output=101, generated=101),
    # finished after the window's end (followed): 180 / 9 = 20, TTFT 1, wait 0.5, preempted twice
    dict(arrival=15.0, routed=15.0, admitted=15.5, first_token=16.0, finish=25.0, output=181, generated=181,
         preemptions=2),
    # unfinished at the cap: 41 tokens so far, speed (41 - 1) / (30 - 20) = 4, TTFT 2, wait 1; an SLA miss
    dict(arrival=18.0, routed=18.0, admitted=19.0, first_token=20.0, output=500, generated=41),
    # unfinished without a first token: speed 0, TTFT >= 30 - 19 = 11, waited 11 for a slot and still waits
    dict(arrival=19.0, routed=19.0, output=500),
    # rejected (can never fit): not followed, counted in `rejected`
    dict(arrival=19.5, rejected=True, output=10**6),
    # arrived at the window's end: not followed
    dict(arrival=20.0, routed=20.0, admitted=20.0, first_token=20.5, finish=21.0, output=11, generated=11),
    # a one-token output (finished by the prefill pool, never routed): TTFT 0.5, no speed, no wait
    dict(arrival=11.0, first_token=11.5, finish=11.5, output=1, generated=1),
])


def test_request_metrics_by_hand():
    m = request_metrics(REQUESTS, WARMUP, END, STOP, SLA)
    speeds = [50.0, 25.0, 20.0, 4.0, 0.0]
    assert m["requests"] == 6 and m["unfinished"] == 2
    assert m["tps_per_user"] == pytest.approx(np.mean(speeds)) == pytest.approx(19.8)
    assert m["tps_per_user_p50"] == pytest.approx(20.0)
    assert m["tps_per_user_p10"] == pytest.approx(0.0 + 0.4 * 4.0)  # linear between the two slowest
    assert m["tpot_p50"] == pytest.approx(1 / 20.0)  # the inverse of the same speed
    assert m["sla_attainment"] == pytest.approx(1 / 5)  # only the first meets 50; unfinished are misses
    # TTFT over [0.5, 0.5, 1, 1, 2, 11]: p99 between 2 and 11
    assert m["ttft_p50"] == pytest.approx(1.0)
    assert m["ttft_p99"] == pytest.approx(2 + 0.95 * 9)
    # admission waits [0.2, 0.5, 0.5, 1, 11]
    assert m["admission_wait_p50"] == pytest.approx(0.5)
    assert m["admission_wait_p99"] == pytest.approx(1 + 0.96 * 10)
    assert m["preemptions"] == 2 and m["rejected"] == 1


def test_finisher_only_selection_would_have_flattered_these_requests():
    """The old selection (arrived in the window and finished before its end) keeps 50 and 25 tok/s only."""
    old = (REQUESTS["arrival"] >= WARMUP) & (REQUESTS["finish"] <= END) & ~REQUESTS["rejected"]
    speed = user_speed(REQUESTS["output"][old], REQUESTS["first_token"][old], REQUESTS["finish"][old])
    assert np.nanmean(speed) == pytest.approx(37.5)
    assert request_metrics(REQUESTS, WARMUP, END, STOP, SLA)["tps_per_user"] == pytest.approx(19.8)


def test_user_speed_is_one_definition():
    s = user_speed(np.array([101, 1, 2]), np.array([0.0, 1.0, 1.0]), np.array([2.0, 1.0, 1.5]))
    assert s[0] == 50.0 and math.isnan(s[1]) and s[2] == 2.0


def test_empty_window_gives_nan_not_zero():
    m = request_metrics(request_log([dict(arrival=1.0, output=5)]), WARMUP, END, STOP, SLA)
    assert m["requests"] == 0 and math.isnan(m["tps_per_user"]) and math.isnan(m["sla_attainment"])
    assert math.isnan(m["ttft_p99"]) and math.isnan(m["tpot_p50"])


STEPS = step_log([
    dict(replica=0, start=8.0, end=9.0, running=9, decoding=9, emitted=1000, step_ms=1000, batch_tokens=9),
    dict(replica=0, start=10.0, end=12.0, running=4, decoding=4, verified=8, accepted=6, emitted=10, step_ms=2000,
         batch_tokens=12, kv_tokens=400, queued=1),
    dict(replica=1, start=11.0, end=15.0, running=2, decoding=2, verified=2, accepted=1, emitted=3, step_ms=4000,
         batch_tokens=4, kv_tokens=200, queued=0),
    # a step that also prefills 100 tokens and completes one prefill (its first token)
    dict(replica=0, start=12.0, end=20.0, running=3, decoding=2, prefill_tokens=100, prefill_done=1, verified=4,
         accepted=4, emitted=7, step_ms=8000, batch_tokens=106, kv_tokens=300, queued=2),
    dict(replica=1, start=15.0, end=21.0, running=9, decoding=9, emitted=500, step_ms=6000, batch_tokens=9),
])


def flat_grid(ms: float) -> StepTimeGrid:
    return StepTimeGrid(b_axis=np.array([1.0, 10_000.0]), k_axis=np.array([0.0]), ms=np.array([[ms, ms]]))


def test_step_metrics_by_hand():
    # the forward takes 500 ms and 50 J (100 W); a step's energy is that power over its whole duration
    m = step_metrics(STEPS, WARMUP, END, gpus=2, energy=flat_grid(50.0), clock=flat_grid(500.0))
    assert m["throughput_per_gpu"] == pytest.approx((10 + 3 + 7) / 10 / 2)
    assert m["tau"] == pytest.approx((6 + 1 + 4 + 8) / 8)  # accepted drafts + one token per request-step
    assert m["mean_verify_budget"] == pytest.approx((8 + 2 + 4 + 8) / 8)
    assert m["mean_running"] == pytest.approx((4 * 2 + 2 * 4 + 3 * 8) / 14)  # weighted by step time
    assert m["mean_kv_tokens"] == pytest.approx((400 * 2 + 200 * 4 + 300 * 8) / 14)
    assert m["joules_per_token"] == pytest.approx(100 * (2 + 4 + 8) / 20)
    assert math.isnan(step_metrics(STEPS, WARMUP, END, gpus=2)["joules_per_token"])  # no energy in the table


def saturation_log(mid: tuple[int, int], last: tuple[int, int]) -> dict[str, np.ndarray]:
    return step_log([dict(replica=r, end=t, queued=q, step_ms=1)
                     for t, qs in ((4.0, mid), (10.0, last)) for r, q in enumerate(qs)])


@pytest.mark.parametrize(("mid", "last", "expect"), [
    ((5, 5), (8, 6), True),     # 14 queued > max(10, 0.1 x 2 x 64 = 12.8) and growing
    ((5, 5), (6, 6), False),    # growing but 12 <= 12.8: a short queue
    ((8, 8), (7, 7), False),    # long but shrinking
    ((0, 0), (0, 0), False),
])
def test_saturated_thresholds(mid, last, expect):
    assert saturated(saturation_log(mid, last), end=10.0, replicas=2, max_running=64) is expect


def test_saturated_floor_of_ten_on_small_deployments():
    # capacity 1 x 8: a tenth is 0.8, so the floor of 10 decides
    assert not saturated(saturation_log((1,), (10,)), end=10.0, replicas=1, max_running=8)
    assert saturated(saturation_log((1,), (11,)), end=10.0, replicas=1, max_running=8)


def test_tau_by_mix_by_hand():
    req = request_log([
        dict(arrival=12.0, mix=0, decode_steps=10, accepted=15),
        dict(arrival=13.0, mix=1, decode_steps=4, accepted=0),
        dict(arrival=14.0, mix=0, decode_steps=10, accepted=5),
        dict(arrival=1.0, mix=1, decode_steps=100, accepted=300),  # before the window
        dict(arrival=25.0, mix=1, decode_steps=100, accepted=300),  # after it (the drain's load)
    ])
    out = tau_by_mix(req, WARMUP, END, ["math", "chat"])
    assert out == {"math": pytest.approx((15 + 5 + 20) / 20), "chat": pytest.approx(1.0)}
