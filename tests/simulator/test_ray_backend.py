"""The Ray backend on a local 2-CPU Ray: the same runs.csv as the local pool (wall-clock aside), each result
stored as it finishes, and a missing Ray reported in one line."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from simulator.inputs.config import load_scenario
from simulator.runs.backends import Backend
from simulator.runs.sweep import Sweep
from tests.conftest import ROOT

ray = pytest.importorskip("ray", reason="the test extra installs ray; CI runs this")

SMALL = {"systems": ["mtp-1", "dspark", "static-3"], "frontier": {"concurrency": [2, 8, 32]},
         "traffic": {"kind": "poisson", "rate": 10.0}}


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=["wall_seconds"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def local_ray():
    """One private local Ray with 2 CPUs for the module (the backend leaves a Ray it did not start running)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_sweep_is_identical_to_the_local_pool_and_stores_as_it_goes(scenario_file, tmp_path, local_ray):
    path = scenario_file(**SMALL)
    scn = load_scenario(path)
    local = Sweep.plan(scn, tmp_path / "local", quick=True, seed=None, replicates=None)
    local.execute(jobs=2)
    local.write_runs_csv()

    on_ray = Sweep.plan(scn, tmp_path / "ray", quick=True, seed=None, replicates=None)
    stored_before = []

    class Count:
        def update(self, k):  # called after each result is stored: the store grows one file at a time
            stored_before.append(len(list(on_ray.store.glob("*.json"))))

        def close(self):
            pass

    assert on_ray.execute(2, lambda todo, total: Count(), Backend("ray", 2)) == len(on_ray.specs)
    assert stored_before == list(range(1, len(on_ray.specs) + 1))
    on_ray.write_runs_csv()
    a = pd.read_csv(tmp_path / "local" / "runs.csv")
    b = pd.read_csv(tmp_path / "ray" / "runs.csv")
    pd.testing.assert_frame_equal(comparable(a), comparable(b), check_exact=True)
    assert on_ray.execute(2, None, Backend("ray", 2)) == 0  # resumes: nothing left to run


@pytest.mark.heavy
@pytest.mark.slow
def test_cli_plan_on_ray_matches_the_local_plan(scenario_file, tmp_path, local_ray):
    from click.testing import CliRunner

    from simulator.cli import cli

    path = scenario_file(systems=["mtp-1"], frontier=None, traffic={"kind": "poisson", "rate": 30.0},
                         sla={"tps_targets": [100.0]})
    args = ["plan", str(path), "--quick", "--attainment", "0.9", "--max-gpus", "4", "--rate-tolerance", "0.25"]
    res_local = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "l"), "--jobs", "2"])
    res_ray = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "r"), "--backend", "ray"])
    assert res_local.exit_code == 0 and res_ray.exit_code == 0, res_ray.output
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "l" / "plan.csv"), pd.read_csv(tmp_path / "r" / "plan.csv"))


@pytest.mark.slow
def test_without_ray_the_backend_says_how_to_install_it_in_one_line(scenario_file, tmp_path):
    path = scenario_file()
    code = ("import sys; sys.modules['ray'] = None; from simulator.cli import main; "
            f"sys.argv = ['simulate', {str(path)!r}, '--quick', '--out', {str(tmp_path / 'o')!r}, '--backend', 'ray']; "
            "main()")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "pip install 'dspark-sim[ray]'" in proc.stderr and "Traceback" not in proc.stderr
