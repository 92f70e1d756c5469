"""hw-profile's table commands run without torch or transformers (the base install `./run hw-profile analytic`
gives); the commands that time a model name the extra they need in one line; `./run` installs torch only for
them, and the profile extra holds what they import."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from hw_profile.cli import main
from tests.conftest import ROOT

NO_TORCH = """
import sys
sys.modules["torch"] = None  # any import of torch (or transformers) now raises
sys.modules["transformers"] = None
from hw_profile.cli import main
out = sys.argv[1]
for argv in (["analytic", "--gpu", "H200", "--model", "qwen3-8b", "--max-batch-tokens", "256", "--out", out + "/a.csv"],
             ["analytic", "--gpu", "H200", "--model", "deepseek-v4-flash", "--dtype", "fp8", "--drafter-layers", "3",
              "--out", out + "/d.csv"],
             ["fit", out + "/a.csv"],
             ["show", out + "/a.csv", out + "/d.csv"],
             ["compare", out + "/a.csv", out + "/d.csv"]):
    try:
        main(argv)
    except SystemExit as exc:
        assert not exc.code, (argv, exc.code)
print("torch-free:", sys.modules["torch"] is None and sys.modules["transformers"] is None)
"""


@pytest.mark.slow
def test_table_commands_run_with_torch_and_transformers_unimportable(tmp_path):
    res = subprocess.run([sys.executable, "-c", NO_TORCH, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "torch-free: True" in res.stdout
    assert {p.name for p in tmp_path.iterdir()} >= {"a.csv", "a.smooth.csv", "d.csv", "a.vs.d.html"}


def test_sps_without_transformers_is_one_line_naming_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(SystemExit) as exc:
        main(["sps", "--model", "qwen3-0.6b", "--out", str(tmp_path / "t.csv")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert err.startswith("hw-profile: hw-profile sps needs transformers") and "dspark-sim[profile]" in err
    assert not (tmp_path / "t.csv").exists()


def third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("hw_profile", "__future__")}


def test_the_profile_extra_holds_what_sps_and_peaks_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = {d.split(">")[0].split("=")[0].split("[")[0].strip().lower()
              for d in project["optional-dependencies"]["profile"] + project["dependencies"]}
    modules = set().union(*(third_party_imports(ROOT / "hw_profile" / "measure" / f) for f in (
        "profiler.py", "model_builder.py", "telemetry.py", "peaks.py")))
    assert {"torch", "transformers", "pynvml"} <= modules
    dists = packages_distributions()
    for module in modules:
        assert {d.lower() for d in dists.get(module, [module])} & listed, f"{module}: not in the profile extra"


def fake_venv(root: Path, stamps: list[str]) -> Path:
    """A venv whose python and pip fail (so any install attempt fails loudly) and whose hw-profile echoes."""
    import hashlib

    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in (("python", "exit 1"), ("pip", 'echo "pip $*" >&2; exit 1'), ("hw-profile", 'echo "ran $*"')):
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    for extras in stamps:
        (root / f".dspark-{extras}").write_text(want + "\n")
    return root


@pytest.mark.parametrize("args, extras", [
    (["analytic", "--gpu", "H200"], "base"), (["fit", "t.csv"], "base"), (["show", "t.csv"], "base"),
    (["compare", "a", "b"], "base"), (["calibrate", "x"], "base"), (["--help"], "base"),
    (["sps", "--model", "qwen3-0.6b"], "profile"), (["peaks"], "profile"),
])
def test_run_installs_torch_only_for_sps_and_peaks(tmp_path, args, extras):
    """With only EXTRAS installed (its stamp), ./run hw-profile ARGS runs at once; asking for the other set would
    try pip, which fails here."""
    venv = fake_venv(tmp_path / "venv", [extras])
    res = subprocess.run([str(ROOT / "run"), "hw-profile", *args], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "DSPARK_VENV": str(venv)})
    assert res.returncode == 0 and res.stdout.strip() == "ran " + " ".join(args), res.stderr
    other = fake_venv(tmp_path / "other", ["profile" if extras == "base" else "base"])
    res = subprocess.run([str(ROOT / "run"), "hw-profile", *args], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "DSPARK_VENV": str(other)})
    assert res.returncode != 0 and "pip install" in res.stderr
