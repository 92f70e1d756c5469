"""A speculative system runs in the engine's speculative mode as its table records it (``SpeculativeMode``), a plain
system as the table prices plain steps: SGLang's running-request cap of 48, its speculative CUDA-graph sizes and the
host work its overlap scheduler no longer hides apply to the drafting arm only, so an A/B compares what the engine
runs."""

from __future__ import annotations

import numpy as np
import pytest

from hw_profile.cli import main as hw_profile
from hw_profile.estimate.engine_costs import SCHEDULER_MS_TP, SPEC_FORWARD_HOST_MS
from simulator.core.engine import StepPlan, StepPrices
from simulator.inputs.config import load_scenario
from simulator.inputs.hardware import load_hardware
from tests.simulator.engine_helpers import simulate

ESTIMATE = ["estimate", "--model", "qwen3-8b", "--gpu", "H100", "--kernels", "roofline", "--drafters", "eagle3",
            "--max-batch-tokens", "1024", "--max-kv-tokens", "400000"]


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """Two estimates of one deployment, SGLang's and vLLM's (each with its EAGLE-3 drafter's table)."""
    out = {}
    for engine in ("sglang", "vllm"):
        path = tmp_path_factory.mktemp(engine) / "t.csv"
        with pytest.raises(SystemExit) as done:
            hw_profile([*ESTIMATE, "--engine", engine, "--out", str(path)])
            raise SystemExit(0)
        assert not done.value.code
        out[engine] = path
    return out


def scenario(scenario_file, table, **engine):
    return scenario_file(hardware={"table": str(table)}, engine={"max_running": 64, "max_batch_tokens": 1024, **engine},
                         drafter={"name": "eagle3", "gamma": 2}, systems=["ar", "static-2"],
                         acceptance={"profile": "paper-qwen3-8b"}, workload={"prompt": 64, "output": 200},
                         frontier={"concurrency": [64]})


def test_sglang_speculates_in_its_own_mode_and_plain_decoding_does_not(tables, scenario_file):
    scn = load_scenario(scenario(scenario_file, tables["sglang"]))
    hw = load_hardware(scn, {"none", "eagle3"})
    clock, policy, cap, ahead, host = hw.speculating(scn.model.engine, gamma=0)
    assert (clock, policy, cap, ahead, host) == (hw.clock, hw.policy, 64, True, 0.0)
    clock, policy, cap, ahead, host = hw.speculating(scn.model.engine, gamma=2)
    # the scheduler's work once, and each forward the worker launches beyond the verify (the drafter's chained
    # passes, the draft extend) prepared by the host
    assert (cap, ahead) == (48, False) and host == pytest.approx(SCHEDULER_MS_TP + 2 * SPEC_FORWARD_HOST_MS)
    assert hw.speculating(scn.model.engine, gamma=1)[4] == pytest.approx(SCHEDULER_MS_TP + SPEC_FORWARD_HOST_MS)
    assert hw.speculating(scn.model.engine, gamma=5, parallel=True)[4] == pytest.approx(
        SCHEDULER_MS_TP + SPEC_FORWARD_HOST_MS)
    assert clock.graphs.sizes[:9] == (1, 2, 3, 4, 5, 6, 7, 8, 10) and policy is clock
    assert clock.ms is hw.clock.ms  # the same step times, replayed at other captured sizes
    # 9 requests: SGLang's plain list pads them to 16, its speculative one to 10
    assert clock.step_ms(27, 9 * 500, 9) < hw.clock.step_ms(27, 9 * 500, 9)
    # the deployment's own cap, and its own say on the step ahead, win
    own = load_scenario(scenario(scenario_file, tables["sglang"], speculative_max_running=60, schedule_ahead=True))
    _, _, cap, ahead, _ = load_hardware(own, {"eagle3"}).speculating(own.model.engine, gamma=2)
    assert (cap, ahead) == (60, True)


def test_a_speculative_step_pays_the_host_work_once():
    """``StepPrices.host_ms`` joins every step's fixed cost, at every verified B the policy prices."""
    from hw_profile.tables.step_table import StepTable

    grid = StepTable.from_points({"batch_tokens": np.array([1.0, 64.0, 1.0, 64.0]),
                                  "kv_tokens": np.array([0.0, 0.0, 1e5, 1e5]),
                                  "step_ms": np.array([5.0, 9.0, 6.0, 10.0])}).grid
    plan = StepPlan(0.0, running=4, kv_used=0)
    plan.rows, plan.kv = 4, 2000.0
    plain, spec = StepPrices(grid).step_cost(plan), StepPrices(grid, host_ms=0.74).step_cost(plan)
    b = np.array([4.0, 12.0, 20.0])
    np.testing.assert_allclose(spec.ms(b) - plain.ms(b), 0.74)
    assert spec.ms(12.0) - plain.ms(12.0) == pytest.approx(0.74)


@pytest.mark.slow
def test_the_running_cap_binds_the_speculative_arm_only(tables, scenario_file):
    """64 users in a closed loop: plain decoding runs them all at once, SGLang's speculative arm at most 48 (the rest
    queue); a vLLM table adds no cap. (Run with the estimate's request_ms, a replacement request can still be with
    the API server when the run stops: INV-10 counts it there, where it once called it lost.)"""
    path = scenario(scenario_file, tables["sglang"])
    _, sim_plain = simulate(path, "ar", quick=True)
    _, sim_spec = simulate(path, "static-2", quick=True)
    assert sim_plain.config.max_running == 64 and sim_spec.config.max_running == 48
    assert sim_plain.steps.frame()["running"].max() == 64
    assert sim_spec.steps.frame()["running"].max() == 48
    _, sim_vllm = simulate(scenario(scenario_file, tables["vllm"]), "static-2", quick=True)
    assert sim_vllm.config.max_running == 64 and sim_vllm.steps.frame()["running"].max() == 64


def test_check_names_whose_cap_a_speculative_system_runs_under(tables, scenario_file):
    """`simulate check`'s line: the engine's own cap while speculating, or the scenario's where it sets one."""
    from simulator.cli import speculative_line

    for own, words in ((None, "at most 48 running requests unless the deployment sets its own"),
                       (60, "at most 60 running requests (engine.speculative_max_running)")):
        extra = {} if own is None else {"speculative_max_running": own}
        scn = load_scenario(scenario(scenario_file, tables["sglang"], **extra))
        line = speculative_line(load_hardware(scn, {"eagle3"}).speculative, scn.model.engine)
        assert line.startswith("speculative mode (speculative systems only): sglang") and words in line
