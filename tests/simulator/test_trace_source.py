"""Replaying recorded verifications (the runtime's `dspark eval` trace format) through the engine."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator.errors import UserError
from tests.simulator.engine_helpers import simulate

GAMMA = 4


def write_trace(path, rng, n=3000):
    rows = []
    for drafter, head in (("dspark", True), ("dflash", False)):
        for domain, p in (("math", 0.9), ("chat", 0.6)):
            for _ in range(n):
                acc = int(np.argmin(np.r_[rng.random(GAMMA) < p, False]))
                c = rng.uniform(0.3, 1.0, GAMMA) if head else [None] * GAMMA
                rows.append({"domain": domain, "benchmark": f"{domain}-bench", "drafter": drafter, "gamma": GAMMA,
                             "accepted": acc, **{f"c_{j + 1}": c[j] for j in range(GAMMA)},
                             **{f"raw_{j + 1}": c[j] for j in range(GAMMA)}})
    pd.DataFrame(rows).to_csv(path, index=False)
    return pd.DataFrame(rows)


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "trace.csv"
    return path, write_trace(path, np.random.default_rng(0))


def test_full_block_replay_reproduces_the_recorded_tau(scenario_file, trace):
    path, df = trace
    scn = scenario_file(acceptance={"source": "trace", "trace": str(path)}, drafter={"name": "dspark", "gamma": GAMMA},
                        systems=[f"static-{GAMMA}"], workload={"mix": {"math": 1}, "output": 4000},
                        frontier={"concurrency": [16]})
    row, _ = simulate(scn)
    recorded = 1 + df[(df.drafter == "dspark") & (df.domain == "math")]["accepted"].mean()
    assert row["tau"] == pytest.approx(recorded, rel=0.03)
    assert row["tau_by_mix"]["math"] == pytest.approx(recorded, rel=0.03)


def test_shorter_blocks_truncate_and_longer_ones_are_refused(scenario_file, trace):
    path, df = trace
    scn = scenario_file(acceptance={"source": "trace", "trace": str(path)}, drafter={"name": "dspark", "gamma": 2},
                        systems=["static-2"], workload={"mix": {"chat": 1}, "output": 4000})
    row, _ = simulate(scn)
    recorded = 1 + np.minimum(df[(df.drafter == "dspark") & (df.domain == "chat")]["accepted"], 2).mean()
    assert row["tau"] == pytest.approx(recorded, rel=0.03)
    longer = scenario_file(name="long", acceptance={"source": "trace", "trace": str(path)},
                           drafter={"name": "dspark", "gamma": 6}, systems=["static-2"])
    with pytest.raises(UserError, match="recorded blocks have gamma 4"):
        simulate(longer)


def test_a_drafter_without_confidences_serves_only_policies_that_read_none(scenario_file, trace):
    path, _ = trace
    base = {"acceptance": {"source": "trace", "trace": str(path)}, "drafter": {"name": "dflash", "gamma": GAMMA},
            "workload": {"mix": {"math": 1, "chat": 1}}}
    row, _ = simulate(scenario_file(systems=["static-3", "goodput-k"], **base), "static-3")
    assert row["tau"] > 1.0
    with pytest.raises(UserError, match=r"policy 'dspark', which reads confidences .* no calibrated confidences for drafter 'dflash'"):
        simulate(scenario_file(name="d", systems=["dspark"], **base))


def test_unknown_drafter_or_mix_entry(scenario_file, trace):
    path, _ = trace
    with pytest.raises(UserError, match=r"no rows for drafter 'eagle3' \(the trace has: dflash, dspark\)"):
        simulate(scenario_file(acceptance={"source": "trace", "trace": str(path)},
                               drafter={"name": "eagle3", "gamma": GAMMA}, systems=["static-1"]))
    with pytest.raises(UserError, match="no rows for workload mix entry 'code'"):
        simulate(scenario_file(name="m", acceptance={"source": "trace", "trace": str(path)},
                               drafter={"name": "dspark", "gamma": GAMMA}, systems=["static-1"],
                               workload={"mix": {"code": 1}}))
