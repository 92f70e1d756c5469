"""The distribution: every package is listed in pyproject.toml, and a non-editable install runs without the
source tree (the scenario library travels as package data)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

from tests.conftest import ROOT


def test_pyproject_lists_every_package():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for top in ("simulator", "hw_profile", "atomic_files", "dspark_runtime")
             for p in (ROOT / top).rglob("__init__.py")}
    assert set(setuptools["packages"]) == found | {"simulator.scenarios"}
    assert setuptools["package-dir"] == {"simulator.scenarios": "scenarios"}


def run(cmd: list[str], cwd: Path, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))}\n{res.stdout}\n{res.stderr}"
    return res


@pytest.mark.heavy
@pytest.mark.slow
def test_non_editable_install_runs_without_the_source_tree(tmp_path):
    """Build the wheel, install it into a fresh virtual environment (its dependencies come from this one's
    site-packages, so nothing is downloaded) and run the CLI from a folder outside the repository."""
    wheels = tmp_path / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
         str(ROOT)], ROOT, dict(os.environ))
    (wheel,) = wheels.glob("dspark_sim-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    site = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path,
                    {}).stdout.strip())
    # the dependencies (numpy, pandas, simpy, ...) of this environment, without its editable install of the project
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], tmp_path, {})

    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    where = run([str(py), "-c", "import simulator, simulator.inputs.library as l; print(simulator.__file__, l.library_dir())"],
                elsewhere, env).stdout.split()
    assert all(Path(p).is_relative_to(site) for p in where), where  # the installed copy, not the checkout

    listing = run([str(env_dir / "bin" / "simulate"), "list"], elsewhere, env).stdout
    assert "scenarios (" in listing and "  peak " in listing and "  tiny-world-trace " in listing
    assert "paper-qwen3-8b     target Qwen3-8B" in listing and "h200-qwen3-8b-bf16.csv" in listing
    for name in ("peak", "scenarios/azure-conv.yaml", "tiny-world-trace.yaml"):  # tables, traces, profiles
        assert ": ok" in run([str(env_dir / "bin" / "simulate"), "check", name], elsewhere, env).stdout
    run([str(env_dir / "bin" / "simulate"), "peak", "--quick", "--jobs", "1", "--out", "results/peak", "--set", "systems=[mtp-1, dspark]",
         "--set", "frontier.concurrency=[8]", "--set", "run.quick_duration_s=3", "--set", "run.quick_warmup_s=1"],
        elsewhere, env)
    assert (elsewhere / "results" / "peak" / "runs.csv").is_file()
