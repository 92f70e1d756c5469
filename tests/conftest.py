"""Shared fixtures: the smallest scenarios that show a behaviour, built in a temporary directory."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

# Under xdist each worker is one of ./run's two processes: torch's intra-op threads (one per core by default) on top
# of them would oversubscribe the cores, and its spinning threads slowed a model build 5x. Set before torch loads.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
H200_TABLE = ROOT / "scenarios" / "hardware" / "h200-qwen3-8b-bf16.csv"
EXAMPLES = ROOT / "docs" / "examples"

BASE = {
    "hardware": {"table": str(H200_TABLE)},
    "engine": {"max_running": 64, "max_batch_tokens": 4096},
    "systems": ["dspark"],
    "workload": {"prompt": 128, "output": 64},
    "frontier": {"concurrency": [8]},
    "run": {"duration_s": 8.0, "warmup_s": 1.0, "quick_duration_s": 2.0, "quick_warmup_s": 0.5,
            "drain_cap_s": 8.0, "quick_drain_cap_s": 2.0},
}


def merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


@pytest.fixture
def scenario_file(tmp_path):
    """scenario_file(**fields) -> path of a scenario YAML: BASE merged with the given fields."""

    def make(name: str = "scn", **fields) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(merge(BASE, fields)))
        return path

    return make


@pytest.fixture
def examples_on_path(monkeypatch):
    """docs/examples importable, as a user's PYTHONPATH=docs/examples would make it."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return EXAMPLES


CRASHY = '''
import numpy as np

from simulator import Policy


class Crashy(Policy):
    """Verifies one draft a step for 20 steps, then fails as a buggy plug-in would."""

    reads_confidence = False

    def __init__(self):
        self.steps = 0

    def choose(self, view):
        self.steps += 1
        if self.steps > 20:
            raise ZeroDivisionError("a bug in the plug-in")
        return np.minimum(1, view.max_lengths)
'''


@pytest.fixture
def crashy(tmp_path, monkeypatch):
    """A plug-in policy ``crashy_policy:Crashy`` that raises during a run."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "crashy_policy.py").write_text(CRASHY)
    monkeypatch.syspath_prepend(str(folder))
    return "crashy_policy:Crashy"
