"""Acceptance set from one measured acceptance length (``acceptance.acceptance_length``): the scaled profile
reproduces it as a run measures it, keeps the profile's shape, reaches a run, and bad values are one line."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.core.acceptance.latent import conditional_acceptance
from simulator.core.acceptance.pooled import lognormal_output_pmf
from simulator.core.acceptance.profile import load_profile
from simulator.core.acceptance.scaling import benchmark_lengths, mix_weights, pooled_over_mix, scaled_profile
from simulator.core.calibration import logit
from simulator.errors import UserError
from simulator.inputs.config import acceptance_length_at, load_scenario
from tests.simulator.engine_helpers import simulate
from tests.simulator.test_config import run_cli

OUTPUT = (384.0, 0.7, 2048)


@pytest.mark.slow
@pytest.mark.parametrize(("profile", "drafter", "target", "at", "mix"), [
    ("paper-qwen3-8b", "dspark", 3.2, 5, {"math": 1, "code": 1, "chat": 2}),
    ("paper-qwen3-8b", "dspark", 5.5, 7, {"chat": 1}),
    ("paper-qwen3-8b", "mtp", 1.7, 1, {"math": 1}),
    ("deployed-deepseek-v4", "dspark", 3.5, 5, {"serving": 1}),
])
def test_scaled_profile_measures_the_target_and_keeps_its_shape(profile, drafter, target, at, mix):
    p = load_profile(profile)
    q = scaled_profile(p, drafter, target, at, mix, OUTPUT)
    d0, d1 = p.drafters[drafter], q.drafters[drafter]
    lengths = benchmark_lengths(q, drafter, d1.conditional, at, lognormal_output_pmf(*OUTPUT))
    assert pooled_over_mix(lengths, mix_weights(q, drafter, mix)) == pytest.approx(target, abs=1e-6)
    shift = logit(d1.conditional) - logit(d0.conditional)
    assert np.allclose(shift, shift.flat[0], atol=1e-9)  # one logit shift everywhere: the shape is the profile's
    assert abs(shift.flat[0]) > 0.01
    # the latent means reproduce the shifted rates, so a run's request-steps see them
    for mu, cond in zip(d1.mu, d1.conditional, strict=True):
        assert np.allclose(conditional_acceptance(mu, p.variation), cond, atol=1e-7)
    others = [name for name in p.drafters if name != drafter]
    assert all(q.drafters[name] is p.drafters[name] for name in others)


@pytest.mark.slow
def test_a_run_measures_the_length_it_was_scaled_to(scenario_file):
    """static-5 with acceptance_length 2.6 at 5 drafts: runs.csv's tau reads 2.6 (sampling and the closed loop's
    pooling within 2%); the same scenario without the field reads the profile's own level."""
    fields = dict(acceptance={"profile": "paper-qwen3-8b", "acceptance_length": 2.6}, drafter={"name": "dspark",
                  "gamma": 5}, systems=["static-5"], workload={"prompt": 64, "output": 512, "mix": {"chat": 1}},
                  frontier={"concurrency": [48]}, engine={"max_running": 64, "max_batch_tokens": 8192},
                  run={"duration_s": 20.0, "warmup_s": 2.0})
    row, _ = simulate(scenario_file(**fields))
    assert row["tau"] == pytest.approx(2.6, rel=0.02)
    plain, _ = simulate(scenario_file(name="plain", **{**fields, "acceptance": {"profile": "paper-qwen3-8b"}}))
    assert abs(plain["tau"] - 2.6) > 0.3


@pytest.mark.slow
def test_acceptance_length_at_another_block(scenario_file):
    """Measured at 3 drafts a step, run at 7: the static-3 arm reads the target, the longer block more."""
    fields = dict(acceptance={"profile": "paper-qwen3-8b", "acceptance_length": 2.5, "acceptance_length_at": 3},
                  systems=["static-3", "static-7"], workload={"prompt": 64, "output": 512, "mix": {"code": 1}},
                  frontier={"concurrency": [48]}, engine={"max_running": 64, "max_batch_tokens": 8192},
                  run={"duration_s": 20.0, "warmup_s": 2.0})
    path = scenario_file(**fields)
    three, _ = simulate(path, "static-3")
    seven, _ = simulate(path, "static-7")
    assert three["tau"] == pytest.approx(2.5, rel=0.02)
    assert seven["tau"] > three["tau"] + 0.1


def test_mtp_k_is_scaled_at_its_k_drafts(scenario_file):
    """An MTP-2 length (`drafter: {name: mtp, gamma: 2}`) is measured at 2 drafts a step, not MTP-1's one: 2.3 is
    a length one draft cannot reach, and a run of mtp-2 reads it."""
    fields = dict(acceptance={"profile": "paper-qwen3-8b", "acceptance_length": 2.3}, drafter={"name": "mtp",
                  "gamma": 2}, systems=["mtp-2"], workload={"prompt": 64, "output": 512, "mix": {"chat": 1}},
                  frontier={"concurrency": [48]}, engine={"max_running": 64, "max_batch_tokens": 8192},
                  run={"duration_s": 20.0, "warmup_s": 2.0})
    assert acceptance_length_at(load_scenario(scenario_file(**fields)).model) == 2
    row, _ = simulate(scenario_file(**fields))
    assert row["tau"] == pytest.approx(2.3, rel=0.02)
    plain, _ = simulate(scenario_file(name="plain", **{**fields, "acceptance": {"profile": "paper-qwen3-8b"}}))
    assert plain["tau"] > 2.3 + 0.1


@pytest.mark.parametrize(("acceptance", "needle"), [
    ({"acceptance_length": 0.5}, "acceptance.acceptance_length: expected a length above 1 and below 8"),
    ({"acceptance_length": -1}, "acceptance.acceptance_length: Input should be greater than 0"),
    ({"acceptance_length": 1.0}, "acceptance.acceptance_length: expected a length above 1 and below 8"),
    ({"acceptance_length": 9.0}, "acceptance.acceptance_length: expected a length above 1 and below 8"),
    ({"acceptance_length": 4.5, "acceptance_length_at": 3}, "expected a length above 1 and below 4"),
    ({"acceptance_length": "3.2"}, "acceptance.acceptance_length: expected a number, got the string '3.2'"),
    ({"acceptance_length_at": 3}, "acceptance.acceptance_length_at: says where acceptance.acceptance_length"),
    ({"source": "trace", "trace": "t.csv", "acceptance_length": 3.0},
     "acceptance.acceptance_length: scales an acceptance profile; source 'trace' takes none"),
])
def test_bad_acceptance_lengths_are_one_line_naming_file_and_field(scenario_file, acceptance, needle):
    path = scenario_file(acceptance=acceptance)
    with pytest.raises(UserError) as exc:
        load_scenario(path)
    message = str(exc.value)
    assert message.startswith(f"{path}: ") and needle in message and "\n" not in message


@pytest.mark.slow
def test_a_length_no_run_can_measure_is_one_line_at_run_time(scenario_file):
    """Below the range check but past what requests that end can pool (1.9999 at one draft a step, outputs of
    64 tokens): the command stops with one line naming the file and the field, exit code 2."""
    path = scenario_file(acceptance={"acceptance_length": 1.9999}, drafter={"name": "mtp"}, systems=["mtp-1"])
    res = run_cli(str(path), "--out", str(path.parent / "out"), "--quick")
    assert res.returncode == 2, res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"{path}: acceptance.acceptance_length: 1.9999 is outside what drafter 'mtp'" in line
