"""`simulate break-even`: the acceptance length at which a speculative system ties no speculation. The bisection
against closed forms and brute force, the crossing against runs on either side of it, and bad input in one line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator.errors import UserError
from simulator.runs.break_even import Search, crossing, one_point, plan_search
from tests.simulator.test_config import run_cli


def test_the_crossing_of_a_closed_form_within_the_tolerance_in_few_evaluations():
    asked = []

    def ratio(length):
        asked.append(length)
        return length / 2.5

    at_low, at_high, length = crossing(ratio, 1.5, 3.5, 0.05)
    assert abs(length - 2.5) <= 0.05 and (at_low, at_high) == pytest.approx((0.6, 1.4))
    assert len(asked) <= 2 + int(np.ceil(np.log2(2.0 / 0.05)))
    # no crossing inside: the ends only
    asked.clear()
    assert crossing(ratio, 3.0, 4.0)[2] is None and crossing(ratio, 1.1, 2.0)[2] is None and len(asked) == 4


@pytest.mark.parametrize("seed", range(20))
def test_the_crossing_of_a_rising_staircase_matches_brute_force(seed):
    """A ratio rising in steps (as throughput does on a table's CUDA-graph stairs): the crossing found lies within
    the tolerance of the first length on a fine grid where the ratio reaches 1."""
    rng = np.random.default_rng(seed)
    edges = np.sort(rng.uniform(1.0, 6.0, 12))
    levels = np.sort(rng.uniform(0.3, 2.5, 13))

    def ratio(length):
        return float(levels[np.searchsorted(edges, length)])

    at_low, at_high, length = crossing(ratio, 1.1, 5.9, 0.02)
    grid = np.arange(1.1, 5.9, 0.001)
    values = np.array([ratio(x) for x in grid])
    if not at_low < 1.0 < at_high:
        assert length is None
        return
    first = grid[np.argmax(values >= 1.0)]
    assert abs(length - first) <= 0.02 + 0.001


def _scenario(scenario_file, **extra):
    fields = dict(acceptance={"profile": "paper-qwen3-8b"}, drafter={"name": "dspark", "gamma": 5},
                  systems=["static-5", "mtp-1"], workload={"prompt": 64, "output": 256, "mix": {"chat": 1}},
                  frontier={"concurrency": [16]}, run={"duration_s": 10.0, "warmup_s": 2.0})
    return scenario_file(**{**fields, **extra})


@pytest.mark.heavy
def test_runs_either_side_of_the_break_even_fall_either_side_of_no_speculation(scenario_file):
    """Through the real simulator: the found length brackets the tie. Runs just below it are slower than no
    speculation, just above faster (same seeds, so the workload is the same); the scenario's own acceptance
    (the paper profile, far above it) is faster still."""
    path = _scenario(scenario_file)
    search, pairs, left, at, own = plan_search(path, (), (), (), None, None, 0.05, None, 1, False)
    assert pairs == [("static-5", 16)] and at == 5 and (search.low, search.high) == (1.1, 5.9)
    assert left == ["mtp-1: drafts with mtp, not the scenario's drafter (dspark), whose acceptance the length sets"]
    b = one_point(search, "static-5", 16)
    assert b.ratio_low < 1.0 < b.ratio_high and b.length is not None and b.as_set > 1.0
    # the scenario's own length, counted as the search counts, is what a run of static-5 verifying its whole block
    # measures: far above the break-even, as the ratio as set says
    assert own > b.length + 1.0
    step = 2 * search.tolerance
    assert b.length - step > 1.02
    below = one_point(Search(path, (), max(1.01, b.length - step - 0.2), b.length - step, 0.05, search.seeds, False),
                      "static-5", 16)
    above = one_point(Search(path, (), b.length + step, b.length + step + 0.2, 0.05, search.seeds, False),
                      "static-5", 16)
    assert below.ratio_high < 1.0 < above.ratio_low
    assert b.plain_tps_per_gpu == pytest.approx(below.plain_tps_per_gpu)


@pytest.mark.heavy
def test_the_command_prints_the_table_and_writes_the_csv(scenario_file, tmp_path):
    path = _scenario(scenario_file, frontier={"concurrency": [4, 32]})
    out = tmp_path / "out"
    res = run_cli("break-even", str(path), "--quick", "--jobs", "1", "--out", str(out), "--range", "1.2", "4.5")
    assert res.returncode == 0, res.stderr
    assert "left out: mtp-1" in res.stderr and "break-even: 2 of 2" in res.stderr
    assert "Searched from 1.2 to 4.5" in res.stdout and "(--quick" in res.stdout
    table = pd.read_csv(out / "break_even.csv")
    assert list(table["concurrency"]) == [4, 32] and set(table["system"]) == {"static-5"}
    assert (table["length_at"] == 5).all() and f"the scenario's own: {table['scenario_length'][0]:.2f}" in res.stdout
    assert max(len(ln) for ln in res.stdout.splitlines() if not ln.startswith("break-even: ")) <= 120
    assert (table["ratio_low"] < table["ratio_high"]).all()
    for r in table.itertuples():
        line = next(ln for ln in res.stdout.splitlines() if ln.startswith("static-5") and f" {r.concurrency} " in ln)
        assert line.endswith(r.break_even)
        if np.isfinite(r.length):
            assert 1.2 < r.length < 4.5 and r.ratio_low < 1.0 < r.ratio_high


@pytest.mark.slow
@pytest.mark.parametrize(("args", "fields", "message"), [
    (["--range", "3", "2"], {}, "--range: expected 1 < LOW < HIGH < 6"),
    (["--range", "1.5", "6.5"], {}, "--range: expected 1 < LOW < HIGH < 6"),
    (["--systems", "static-9"], {}, "--systems: 'static-9' is not one of the scenario's systems"),
    (["--systems", "mtp-1"], {}, "no system drafts with the scenario's drafter (dspark)"),
    ([], {"frontier": None, "traffic": {"kind": "poisson", "rate": 4.0}}, "no closed-loop load: give --concurrency"),
])
def test_bad_input_is_one_line(scenario_file, args, fields, message):
    path = _scenario(scenario_file, **fields)
    res = run_cli("break-even", str(path), "--quick", "--jobs", "1", *args)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0 and message in res.stderr, res.stderr


def test_an_acceptance_that_is_not_a_profile_is_refused(scenario_file, tmp_path):
    trace = tmp_path / "trace.parquet"
    path = _scenario(scenario_file, acceptance={"source": "trace", "trace": str(trace)})
    with pytest.raises(UserError, match=r"acceptance\.source: break-even scales a profile's acceptance"):
        plan_search(path, (), (), (), None, None, 0.05, None, 1, True)


def test_the_scenarios_own_length_is_what_its_full_block_measures(scenario_file):
    """Unscaled, the profile's length at 5 drafts is what a run of static-5 reads in runs.csv (sampling and the
    closed loop's pooling within 3%); scaled, it is the length the scenario sets."""
    from simulator.inputs.config import load_scenario
    from simulator.inputs.systems import resolve_systems
    from simulator.runs.break_even import scenario_length
    from simulator.runs.run import LoadPoint, RunSpec, run_one

    path = _scenario(scenario_file, run={"duration_s": 20.0, "warmup_s": 2.0}, frontier={"concurrency": [48]})
    scn = load_scenario(path)
    row, _ = run_one(scn, RunSpec(resolve_systems(scn)[0], LoadPoint(48), 0, False))
    assert row["tau"] == pytest.approx(scenario_length(scn), rel=0.03)
    assert scenario_length(load_scenario(path, ["acceptance.acceptance_length=2.6"])) == 2.6


def test_a_profile_without_the_scenario_drafter_is_refused(scenario_file):
    from simulator.inputs.config import load_scenario
    from simulator.runs.break_even import scenario_length

    path = _scenario(scenario_file, acceptance={"profile": "deployed-deepseek-v4"}, drafter={"name": "eagle3",
                                                                                            "gamma": 3})
    with pytest.raises(UserError, match="'deployed-deepseek-v4' has no 'eagle3' drafter to scale"):
        scenario_length(load_scenario(path))


@pytest.mark.slow
def test_a_scenario_with_prompt_lists_breaks_even_on_its_lists(scenario_file):
    """Where the frontier gives a finite prompt list at a load, the search runs that list (as the benchmark it
    replays), not a steady loop; a load passed by hand without one is a steady loop."""
    from simulator.inputs.config import load_scenario
    from simulator.inputs.systems import resolve_systems
    from simulator.runs.batch import run_batch
    from simulator.runs.break_even import _throughput
    from simulator.runs.run import LoadPoint, RunSpec, run_one

    path = _scenario(scenario_file, frontier={"concurrency": [16], "requests": [40]},
                     run={"duration_s": 300.0, "warmup_s": 2.0})
    search = Search(path, (), 1.1, 5.9, 0.05, (0,), False)
    scn = load_scenario(path, ["systems+=ar"])
    plain = next(s for s in resolve_systems(scn) if s.name == "ar")
    listed, _ = run_batch(scn, plain, 16, 40)
    assert _throughput(search, [], "ar", 16) == pytest.approx(listed.output_per_gpu)
    steady, _ = run_one(scn, RunSpec(plain, LoadPoint(8), 0, False))
    assert _throughput(search, [], "ar", 8) == pytest.approx(steady["throughput_per_gpu"])
    assert steady["throughput_per_gpu"] != pytest.approx(run_batch(scn, plain, 8, 44)[0].output_per_gpu, rel=0.01)
