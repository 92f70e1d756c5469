"""Progress that plans by (simulator/runs/progress.py): runs done of the total known so far, what is being
searched, and the time left at the runs' own pace; a line every 10 s off a terminal. Time is a test's own clock."""

from __future__ import annotations

import io

import pytest

from simulator.inputs.config import LoadedScenario, load_scenario
from simulator.inputs.systems import resolve_systems
from simulator.runs import progress
from simulator.runs.backends import Backend, Task
from simulator.runs.plan import Planner, SystemPlan, Target, Trial
from simulator.runs.progress import LineProgress, PlanProgress, eta_s, seconds
from simulator.runs.run import LoadPoint, RunSpec
from tests.simulator.test_plan import small_plan_scenario


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_is_the_remaining_runs_at_the_pace_so_far():
    assert eta_s(5, 20, 30.0) == pytest.approx(15 * 30.0 / 5)  # 6 s a run: 15 left, 90 s
    assert eta_s(0, 20, 30.0) is None and eta_s(5, None, 30.0) is None  # no pace yet, or no total
    assert eta_s(20, 20, 30.0) == 0.0
    assert [seconds(s) for s in (45, 89.4, 720, 5400, 9000)] == ["45 s", "89 s", "12 min", "1.5 h", "2.5 h"]


def test_a_sweeps_line_says_the_time_left_every_ten_seconds():
    clock, stream = Clock(), io.StringIO()
    bar = LineProgress("scn: runs", 10, stream, every_s=10.0, clock=clock)
    for _ in range(3):  # three runs, 4 s apart: a line once 10 s have passed
        clock.now += 4
        bar.update(1)
    assert stream.getvalue() == "scn: runs: 3/10 runs done, 12 s, about 28 s left\n"
    clock.now += 5
    bar.update(1)  # 5 s after the last line: none
    assert stream.getvalue().count("\n") == 1
    clock.now += 5
    bar.update(1)
    bar.close()
    assert stream.getvalue().splitlines()[1:] == ["scn: runs: 5/10 runs done, 22 s, about 22 s left",
                                                  "scn: runs: 5/10 runs done, 22 s, about 22 s left"]


def tasks_of(scn: LoadedScenario, system: int, replicas: int, seeds: int, tmp_path) -> list[Task]:
    """Real tasks as a plan queues them: one system of the scenario at ``replicas`` replicas, ``seeds`` seeds."""
    s = resolve_systems(scn)[system]
    m = scn.model
    variant = LoadedScenario(m.model_copy(update={"hardware": m.hardware.model_copy(update={"replicas": replicas})}),
                             scn.path, scn.overrides)
    return [Task(variant, RunSpec(s, LoadPoint(None), seed, True), tmp_path / f"{s.name}-{replicas}-{seed}.json")
            for seed in range(seeds)]


def test_a_plans_line_counts_the_runs_known_so_far_and_names_what_it_searches(scenario_file, tmp_path):
    scn = load_scenario(small_plan_scenario(scenario_file, hardware={"gpus_per_replica": 2}))
    clock, stream = Clock(), io.StringIO()
    bar = PlanProgress("scn: plan runs", stream, every_s=10.0, clock=clock)
    first = tasks_of(scn, 0, 1, 3, tmp_path) + tasks_of(scn, 1, 2, 3, tmp_path)
    bar.queued(first)
    for _ in range(3):  # three runs in 12 s
        clock.now += 4
        bar.stored(first[0])
    assert stream.getvalue().splitlines() == [
        "scn: plan runs: 3/6 runs done (known so far), 12 s, about 12 s left; searching mtp-1 at 2 GPUs, "
        "dspark at 4 GPUs"]
    for _ in range(3):
        bar.stored(first[0])
    bar.queued(tasks_of(scn, 1, 3, 3, tmp_path))  # the next round: dspark alone, one replica more
    clock.now += 12
    bar.stored(first[0])
    assert stream.getvalue().splitlines()[-1] == (
        "scn: plan runs: 7/9 runs done (known so far), 24 s, about 7 s left; searching dspark at 6 GPUs")
    bar.close()
    assert stream.getvalue().splitlines()[-1] == "scn: plan runs: 7/9 runs done (known so far), 24 s, about 7 s left"


def test_a_long_round_names_a_few_candidates_and_counts_the_rest(scenario_file, tmp_path):
    scn = load_scenario(small_plan_scenario(scenario_file, systems=["mtp-1", "dspark", "static-3", "static-5",
                                                                    "ar"]))
    bar = PlanProgress("p", io.StringIO(), clock=Clock(), shown=3)
    bar.queued([t for i in range(5) for t in tasks_of(scn, i, i + 1, 1, tmp_path)])
    assert bar.postfix() == "searching mtp-1 at 1 GPU, dspark at 2 GPUs, static-3 at 3 GPUs and 2 more"


def test_a_plan_hands_every_run_it_executes_to_the_progress(scenario_file, tmp_path):
    path = small_plan_scenario(scenario_file, systems=["mtp-1"])
    stream = io.StringIO()
    bar = PlanProgress("scn: plan runs", stream, every_s=0.0)
    target = Target(tps=100.0, attainment=0.9, ttft_p99=1.0, max_gpus=8, rate_tolerance=0.2)
    planner = Planner(load_scenario(path), tmp_path / "o", target, Backend("local", 1), quick=True,
                      on_stored=bar.stored, on_queued=bar.queued)
    planner.run()
    bar.close()
    assert bar.total == bar.done == planner.runs > 0
    lines = stream.getvalue().splitlines()
    totals = [int(line.split("/")[1].split()[0]) for line in lines]
    assert totals == sorted(totals) and totals[-1] == planner.runs  # the total only grows, to the runs executed
    assert all("searching mtp-1 at " in line for line in lines[:-1])


def test_a_followed_plan_states_its_searches_bounds_and_the_time_they_leave(scenario_file, tmp_path):
    """The line says how many searches are decided, what each open one still brackets, and an ETA from the
    candidates those bounds leave (each at every seed), not from the runs queued so far."""
    scn = load_scenario(small_plan_scenario(scenario_file))
    target = Target(tps=100.0, attainment=0.9, ttft_p99=1.0, max_gpus=8, rate_tolerance=0.05)
    planner = Planner(scn, tmp_path / "o", target, Backend("local", 1), replicates=3)
    mtp, dspark = resolve_systems(planner.scn)
    # mtp-1 failed at 1 and 2 replicas: 3-8 left; at most 4 more counts (4 fails, 8 meets, then 6 and 5 or 7),
    # then a headroom search (its first probe, 4 halvings of 2x down to 5%, one completion): 10 candidates
    searching = SystemPlan(mtp, trials=[Trial("decode", n, 1.0, None, {}, "saturated") for n in (1, 2)],
                           counts=(3, None))
    # dspark met at 2 and is bracketing its headroom between 1.0x and 2.0x: 4 halvings and a completion
    bracketing = SystemPlan(dspark, replicas=2, met=True, phase="headroom", scales=(1.0, 2.0))
    planner.plans = {"mtp-1": searching, "dspark": bracketing}
    clock, stream = Clock(), io.StringIO()
    bar = PlanProgress("scn: plan", stream, every_s=10.0, clock=clock)
    bar.follow([("", planner.outlook)], 3)
    bar.queued(tasks_of(scn, 0, 4, 2, tmp_path))  # two runs known beyond those done: not what the ETA counts
    for _ in range(10):
        clock.now += 5
        bar.stored()
    assert stream.getvalue().splitlines()[-1] == (
        "scn: plan: 0/2 searches decided; open: mtp-1 3-8 GPUs and 1 more; 10 runs done, 50 s; at most 15 "
        "candidates (45 runs at 3 seeds) left, about 4 min")
    assert bar.status(10, 50.0).startswith("scn: plan: 0/2") and "dspark" not in bar.status(10, 50.0)
    progress.WIDTH = 200  # room for both: each with what it still brackets
    try:
        assert "open: mtp-1 3-8 GPUs, dspark 2 GPUs, headroom +0%..+100%;" in bar.status(10, 50.0)
    finally:
        progress.WIDTH = 120
    searching.done = bracketing.done = True
    bar.close()
    assert stream.getvalue().splitlines()[-1] == "scn: plan: 2/2 searches decided; 10 runs done, 50 s"


@pytest.mark.slow
def test_a_real_plans_line_never_promises_fewer_runs_than_remain(scenario_file, tmp_path):
    path = small_plan_scenario(scenario_file, engine={"max_running": 32, "max_batch_tokens": 4096,
                                                      "prefill": "disaggregated"},
                               workload={"prompt": 1500, "output": 48}, traffic={"kind": "poisson", "rate": 40.0})
    stream = io.StringIO()
    bar = PlanProgress("scn: plan", stream, every_s=0.0)
    target = Target(tps=100.0, attainment=0.9, ttft_p99=0.5, max_gpus=8, rate_tolerance=0.2)
    planner = Planner(load_scenario(path), tmp_path / "o", target, Backend("local", 1), quick=True, replicates=2,
                      on_stored=bar.stored, on_queued=bar.queued)
    bar.follow([("", planner.outlook)], 2)
    planner.run()
    bar.close()
    lines = stream.getvalue().splitlines()
    decided = [int(line.split(": ")[2].split("/")[0]) for line in lines]
    assert decided == sorted(decided) and lines[-1].startswith("scn: plan: 3/3 searches decided; ")
    for line in lines[:-1]:
        done = int(line.split(" runs done")[0].rsplit(" ", 1)[1])
        left = int(line.split(" candidates (")[1].split(" runs")[0]) if " candidates (" in line else 0
        assert planner.runs - done <= left, line  # the runs that did remain were within the bound stated
