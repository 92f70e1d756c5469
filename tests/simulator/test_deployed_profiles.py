"""The deployed-drafter profiles hold their public numbers: the logged shape, the logged accepted length as a run
pools it, the sources beside them, and a run reads them back."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.core.acceptance.deployed import (
    conditional_from_survival,
    endpoint_shape,
    pooled_over,
    read_data,
    row_shape,
)
from simulator.core.acceptance.latent import full_block_tau
from simulator.core.acceptance.pooled import lognormal_output_pmf, pooled_tau
from simulator.core.acceptance.profile import load_profile
from simulator.core.calibration import logit
from tests.simulator.engine_helpers import simulate

DATA = read_data()
ENTRIES = [(p, d, b) for (p, d, b), _ in DATA.groupby(["profile", "drafter", "benchmark"], sort=False)]


def rows_of(profile, drafter, benchmark):
    return DATA[(DATA.profile == profile) & (DATA.drafter == drafter) & (DATA.benchmark == benchmark)]


def test_logged_rates_are_survivals_whose_sum_is_the_logged_length():
    """The V4 logs' per-position rates are unconditional: 1 + their sum is the logged accepted length."""
    for bench, length in (("ascend-decode", 1.98), ("ascend-prefill-heavy", 2.61)):
        rows = rows_of("deployed-deepseek-v4", "dspark", bench).sort_values("position")
        assert 1.0 + rows["acceptance"].sum() == pytest.approx(length, abs=0.005)
        assert full_block_tau(conditional_from_survival(rows["acceptance"].to_numpy())) == pytest.approx(length,
                                                                                                        abs=0.005)


@pytest.mark.parametrize(("profile", "drafter", "benchmark"), ENTRIES)
def test_each_entry_keeps_the_logged_shape_and_pools_to_the_logged_length(profile, drafter, benchmark):
    rows = rows_of(profile, drafter, benchmark)
    p = load_profile(profile)
    d = p.drafters[drafter]
    i = d.benchmarks.index(benchmark)
    shift = logit(d.conditional[i]) - logit(row_shape(rows))
    assert np.allclose(shift, shift[0], atol=1e-5)  # one logit shift: the logged shape, moved to its level
    assert abs(shift[0]) < 0.2  # pooling moves the level a little, not the data
    length = float(rows["acceptance_length"].iloc[0])
    pooled = pooled_tau(d.mu[i], p.variation, lognormal_output_pmf(*pooled_over(rows)))
    assert float(pooled) == pytest.approx(length, abs=1e-4)
    assert d.tau[i] == pytest.approx(length)
    assert p.domains[benchmark] == rows["domain"].iloc[0]
    assert d.gamma == int(rows["gamma"].iloc[0])


def test_sources_are_recorded_beside_each_entry():
    import yaml

    for profile in DATA["profile"].unique():
        doc = yaml.safe_load((load_profile(profile).path).read_text())
        for (drafter, bench), rows in DATA[DATA.profile == profile].groupby(["drafter", "benchmark"]):
            entry = doc["drafters"][drafter]["benchmarks"][bench]
            assert entry["source"] == rows["source"].iloc[0]
            assert entry["source"].split(":")[0].split(" (")[0] in (
                "vllm-project/vllm-ascend PR #11431", "sgl-project/sglang PR #33109", "DeepSeek-V3 technical report",
                "vllm-project/vllm PR #52992")
            logged = {int(k): v for k, v in entry["logged_acceptance"].items()}
            assert logged == {int(r.position): r.acceptance for r in rows.dropna(subset=["acceptance"]).itertuples()}


def test_glm_endpoint_shape_meets_its_three_numbers():
    c = endpoint_shape(0.71, 0.05, 4.35, 16)
    assert c[0] == pytest.approx(0.71) and np.prod(c) == pytest.approx(0.05, rel=1e-6)
    assert full_block_tau(c) == pytest.approx(4.35, abs=1e-6)
    z = logit(c[1:])
    assert np.allclose(np.diff(z, 2), 0.0, atol=1e-6)  # logit-linear past the first position
    with pytest.raises(ValueError, match="no logit-linear shape"):
        endpoint_shape(0.71, 0.05, 15.0, 16)


def test_a_v4_run_reads_the_logged_length_back(scenario_file):
    """static-5 over the V4 serving logs, at the output lengths the profile was pooled over: runs.csv's tau is the
    two logged phases pooled (tokens over steps, equal weight), within sampling."""
    path = scenario_file(acceptance={"profile": "deployed-deepseek-v4"}, drafter={"name": "dspark", "gamma": 5},
                         systems=["static-5"], frontier={"concurrency": [48]},
                         engine={"max_running": 64, "max_batch_tokens": 8192},
                         workload={"prompt": 64, "output": {"dist": "lognormal", "median": 384, "sigma": 0.7,
                                                            "max": 2048}, "mix": {"serving": 1}},
                         run={"duration_s": 25.0, "warmup_s": 3.0})
    row, _ = simulate(path)
    expect = 1.0 / (0.5 / 1.98 + 0.5 / 2.61)
    assert row["tau"] == pytest.approx(expect, rel=0.03)
