"""A plug-in that raises during a run: one line naming the plug-in, the system and the load point, exit 2; its
traceback behind --debug."""

from __future__ import annotations

import subprocess
import sys

import pytest

from simulator.errors import PluginCrash
from simulator.inputs.config import load_scenario
from simulator.inputs.systems import resolve_systems
from simulator.runs.run import LoadPoint, RunSpec, plugin_crashes
from tests.conftest import ROOT


@pytest.mark.slow
def test_a_crashing_plugin_is_one_line_naming_it_the_system_and_the_load_point(scenario_file, tmp_path, crashy):
    """Through the console script, runs on a process pool (the error crosses from a worker): one line, exit 2;
    --debug, anywhere on the line, prints the plug-in's traceback above it."""
    path = scenario_file(systems=["dspark", {"name": "mine", "policy": crashy}], frontier={"concurrency": [4, 8]})
    env = {"PYTHONPATH": f"{ROOT}:{tmp_path / 'plugins'}", "PATH": "/usr/bin:/bin"}
    args = [sys.executable, "-m", "simulator.cli", str(path), "--quick", "--jobs", "2", "--out", str(tmp_path / "o")]
    res = subprocess.run(args, capture_output=True, text=True, env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    error = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(error) == 1 and error[0].startswith(f"error: {path}: plug-in 'crashy_policy:Crashy' (policy) raised "
                                                   "ZeroDivisionError: a bug in the plug-in (system 'mine' at load "
                                                   "point closed-")
    assert error[0].endswith(", seed 0; --debug shows the traceback)")
    res = subprocess.run([*args, "--debug"], capture_output=True, text=True, env=env)
    assert res.returncode == 2 and "Traceback (most recent call last)" in res.stderr
    assert 'crashy_policy.py", line ' in res.stderr
    last = res.stderr.rstrip().splitlines()[-1]  # the load point that fails first depends on the pool's timing
    assert last.startswith(error[0].split(" at load point ")[0]) and last.endswith("--debug shows the traceback)")


def test_only_a_plugins_own_frames_make_an_exception_its_error(scenario_file, crashy):
    scn = load_scenario(scenario_file(systems=["dspark", {"name": "mine", "policy": crashy}]))
    mine = resolve_systems(scn)[1]
    with pytest.raises(KeyError), plugin_crashes(scn, RunSpec(mine, LoadPoint(4), 0, True)):
        raise KeyError("a bug of the simulator keeps its traceback")
    import crashy_policy

    policy = crashy_policy.Crashy()
    policy.steps = 20
    with pytest.raises(PluginCrash, match=r"plug-in 'crashy_policy:Crashy' \(policy\) raised ZeroDivisionError: a bug "
                       r"in the plug-in \(system 'mine' at load point closed-4, seed 3;") as err, \
            plugin_crashes(scn, RunSpec(mine, LoadPoint(4), 3, True)):
        policy.choose(None)
    assert "Traceback" in err.value.detail and "crashy_policy.py" in err.value.detail
