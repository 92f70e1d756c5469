"""Sweeps: stored as they finish, resumed without repeating work, identical results apart from wall-clock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from simulator.inputs.config import load_scenario
from simulator.runs.sweep import Sweep
from tests.conftest import ROOT

SMALL = {"systems": ["mtp-1", "dspark", "static-3"], "frontier": {"concurrency": [2, 8, 32]},
         "traffic": {"kind": "poisson", "rate": 10.0}}


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=["wall_seconds"]).reset_index(drop=True)


@pytest.mark.slow
def test_interrupted_sweep_resumes_without_repeating_runs(scenario_file, tmp_path):
    path = scenario_file(**SMALL)
    scn = load_scenario(path)
    reference = Sweep.plan(scn, tmp_path / "ref", quick=True, seed=None, replicates=None)
    reference.execute(jobs=1)
    reference.write_runs_csv()

    out = tmp_path / "interrupted"
    sweep = Sweep.plan(scn, out, quick=True, seed=None, replicates=None)

    class StopAfter:
        def __init__(self, n):
            self.left = n

        def update(self, k):
            self.left -= k
            if self.left == 0:
                raise KeyboardInterrupt

        def close(self):
            pass

    with pytest.raises(KeyboardInterrupt):
        sweep.execute(jobs=1, progress=lambda todo, total: StopAfter(5))
    stored = sorted(p.name for p in sweep.store.glob("*.json"))
    assert len(stored) == 5
    mtimes = {p.name: p.stat().st_mtime_ns for p in sweep.store.glob("*.json")}

    again = Sweep.plan(scn, out, quick=True, seed=None, replicates=None)
    assert len(again.pending()) == len(again.specs) - 5
    assert again.execute(jobs=2) == len(again.specs) - 5
    for name, t in mtimes.items():  # finished runs were not repeated
        assert (again.store / name).stat().st_mtime_ns == t
    again.write_runs_csv()
    assert again.execute(jobs=2) == 0
    pd.testing.assert_frame_equal(comparable(pd.read_csv(out / "runs.csv")),
                                  comparable(pd.read_csv(tmp_path / "ref" / "runs.csv")))


def test_a_changed_setting_or_input_file_invalidates_only_what_it_touches(scenario_file, tmp_path):
    path = scenario_file(**SMALL)
    base = Sweep.plan(load_scenario(path), tmp_path / "o", quick=True, seed=None, replicates=None)
    keys = base.keys()
    assert keys == Sweep.plan(load_scenario(path), tmp_path / "o", quick=True, seed=None, replicates=None).keys()
    more = Sweep.plan(load_scenario(path, ["systems=[mtp-1, dspark, static-3, ar]"]), tmp_path / "o", True, None, None)
    assert set(keys) <= set(more.keys())  # adding a system keeps every other run
    changed = Sweep.plan(load_scenario(path, ["engine.max_running=48"]), tmp_path / "o", True, None, None)
    assert not set(keys) & set(changed.keys())
    not_quick = Sweep.plan(load_scenario(path), tmp_path / "o", quick=False, seed=None, replicates=None)
    assert not set(keys) & set(not_quick.keys())


@pytest.mark.slow
def test_cli_ctrl_c_keeps_finished_runs_and_rerun_completes(scenario_file, tmp_path):
    path = scenario_file(**{**SMALL, "run": {"quick_duration_s": 6.0, "quick_warmup_s": 1.0}})
    out = tmp_path / "cli"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "simulator.cli", str(path), "--quick", "--out", str(out), "--jobs", "2"]
    # preexec_fn: SIGINT's default disposition even when this test runs in the background of a shell without job
    # control (which starts it ignored, and children inherit that)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline and len(list((out / ".runs").glob("*.json"))) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group, workers included
    _, err = proc.communicate(timeout=120)
    kept = len(list((out / ".runs").glob("*.json")))
    if proc.returncode == 0:
        pytest.skip("the sweep finished before the interrupt landed")
    assert proc.returncode == 130, err
    assert "interrupted:" in err and "Traceback" not in err
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"resuming: {kept} of 12 runs" in res.stderr
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 12
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["systems"]) == {"mtp-1", "dspark", "static-3"}


@pytest.mark.slow
def test_replicates_give_confidence_intervals_and_records_are_written(scenario_file, tmp_path):
    from click.testing import CliRunner

    from simulator.cli import cli

    path = scenario_file(systems=["mtp-1", "dspark"], frontier={"concurrency": [2, 16]})
    out, rec = tmp_path / "o", tmp_path / "rec"
    res = CliRunner().invoke(cli, [str(path), "--quick", "--out", str(out), "--replicates", "3", "--jobs", "1",
                                   "--records", str(rec)])
    assert res.exit_code == 0, res.output
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["seed"].unique()) == [0, 1, 2] and len(runs) == 12
    frontier = pd.read_csv(out / "frontier.csv")
    assert (frontier["seeds"] == 3).all() and frontier["throughput_per_gpu_ci95"].notna().all()
    steps = pd.read_parquet(rec / "scn__dspark__closed-16__seed1-quick.steps.parquet")
    reqs = pd.read_parquet(rec / "scn__dspark__closed-16__seed1-quick.requests.parquet")
    row = runs[(runs.policy == "dspark") & (runs.concurrency == 16) & (runs.seed == 1)].iloc[0]
    assert len(steps) == row["steps"]
    assert set(reqs["mix"]) <= {"math", "code", "chat"}
    assert "report:" in res.output


@pytest.mark.slow
def test_editing_a_plugin_between_runs_recomputes_its_runs(scenario_file, tmp_path):
    """A researcher's policy lives outside the project; changing its code changes the run key."""
    plug = tmp_path / "plug"
    plug.mkdir()
    policy = plug / "mypolicies.py"
    source = ("import numpy as np\nfrom simulator.core.policies import Policy\n\n"
              "class AlwaysK(Policy):\n    reads_confidence = False\n\n"
              "    def choose(self, view):\n        return np.minimum({k}, view.max_lengths)\n")
    policy.write_text(source.format(k=2))
    path = scenario_file(systems=["mtp-1", {"name": "mine", "policy": "mypolicies:AlwaysK"}],
                         frontier={"concurrency": [8]})
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plug), str(ROOT)])}
    cmd = [sys.executable, "-m", "simulator.cli", str(path), "--quick", "--out", str(out), "--jobs", "1"]

    def run() -> tuple[str, pd.DataFrame]:
        res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return res.stderr, pd.read_csv(out / "runs.csv").set_index("policy")

    _, first = run()
    # 1 + k tokens a step, a little less where a request's last tokens cap the block
    assert 2.8 < first.loc["mine", "mean_verify_budget"] <= 3.0
    err, _ = run()
    assert "resuming: 2 of 2 runs" in err  # nothing changed: everything stored
    policy.write_text(source.format(k=3))
    err, edited = run()
    assert "resuming: 1 of 2 runs" in err  # mtp-1 is kept, the edited policy re-runs
    assert 3.7 < edited.loc["mine", "mean_verify_budget"] <= 4.0
    assert edited.loc["mtp-1", "throughput_per_gpu"] == first.loc["mtp-1", "throughput_per_gpu"]


@pytest.mark.slow
def test_records_of_stored_runs_are_written_and_fresh_ignores_the_store(scenario_file, tmp_path):
    path = scenario_file(systems=["mtp-1", "dspark"], frontier={"concurrency": [4]})
    scn = load_scenario(path)
    out, rec = tmp_path / "o", tmp_path / "rec"
    assert Sweep.plan(scn, out, quick=True, seed=None, replicates=None).execute(jobs=1) == 2
    stored = {p.name: p.stat().st_mtime_ns for p in (out / ".runs").glob("*.json")}

    with_records = Sweep.plan(scn, out, quick=True, seed=None, replicates=None, records=rec)
    assert len(with_records.pending()) == 2  # stored rows, but no records yet
    assert with_records.execute(jobs=1) == 2
    assert sorted(p.name for p in rec.glob("*.steps.parquet")) == [
        "scn__dspark__closed-4__seed0-quick.steps.parquet", "scn__mtp-1__closed-4__seed0-quick.steps.parquet"]
    assert Sweep.plan(scn, out, quick=True, seed=None, replicates=None, records=rec).pending() == []
    steps = pd.read_parquet(rec / "scn__dspark__closed-4__seed0-quick.steps.parquet")
    row = with_records.results().set_index("policy").loc["dspark"]
    assert len(steps) == row["steps"]  # the records belong to the stored row (runs are deterministic)

    # another scenario's records, or this one's after an edit, are never taken for this run's: the file names
    # carry the scenario's name and each run's records its run key
    other = load_scenario(scenario_file("other", systems=["mtp-1", "dspark"], frontier={"concurrency": [4]}))
    edited = load_scenario(path, ["engine.max_batch_tokens=3000"])
    for scn2, out2 in ((other, tmp_path / "o2"), (edited, out)):
        assert Sweep.plan(scn2, out2, quick=True, seed=None, replicates=None).execute(jobs=1) == 2  # stored
        assert len(Sweep.plan(scn2, out2, quick=True, seed=None, replicates=None, records=rec).pending()) == 2

    fresh = Sweep.plan(scn, out, quick=True, seed=None, replicates=None, fresh=True)
    assert len(fresh.pending()) == 2
    assert fresh.execute(jobs=1) == 2 and fresh.pending() == []
    for name, t in stored.items():
        assert (out / ".runs" / name).stat().st_mtime_ns > t  # re-run and overwritten



BUILT_SOURCE = """
import numpy as np
from simulator.core.acceptance import AcceptanceSource, Proposal

class Built(AcceptanceSource):
    # stands for a source that loads a built model: its digest is that of the file it would load

    @classmethod
    def input_digest(cls, options):
        with open(options["model"]) as f:
            return f.read()

    def __init__(self, *, scenario, drafter, gamma, mix, calibrated, rng, model):
        self.gamma = gamma

    def propose(self, ids):
        return Proposal(confidence=np.full((len(ids), self.gamma), 0.5))

    def verify(self, proposal, lengths):
        return lengths * 0
"""


def test_a_sources_input_digest_keys_its_runs(scenario_file, tmp_path, monkeypatch):
    """Rebuilding the data a plug-in source loads (the live runtime's world) invalidates its stored runs."""
    (tmp_path / "builtmodel.py").write_text(BUILT_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    model = tmp_path / "model.txt"
    model.write_text("build 1")
    path = scenario_file(acceptance={"source": "builtmodel:Built", "options": {"model": str(model)}})

    def keys():
        return Sweep.plan(load_scenario(path), tmp_path / "o", quick=True, seed=None, replicates=None).keys()

    first = keys()
    assert keys() == first
    model.write_text("build 2")
    assert not set(keys()) & set(first)


def test_a_finite_list_at_a_load_is_another_run_than_the_steady_loop(scenario_file, tmp_path):
    """The run store's keys tell a prompt list at a concurrency from the steady loop there (and lists of other
    lengths apart), so a sweep never serves one for the other; a steady point keeps its key."""
    def keys(frontier):
        scn = load_scenario(scenario_file(frontier=frontier, systems=["ar"]))
        return Sweep.plan(scn, tmp_path / "o", quick=True, seed=None, replicates=None).keys()

    steady = keys({"concurrency": [8]})
    assert steady == keys({"concurrency": [8]})
    listed = keys({"concurrency": [8], "requests": [16]})
    longer = keys({"concurrency": [8], "requests": [32]})
    assert len({*steady, *listed, *longer}) == 3
