"""The plug-in API is imported from ``simulator`` itself, and the last release's paths still work for one release
with a warning that names the stable import."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

import simulator
from simulator.core.acceptance.base import AcceptanceSource, GrowingArrays, Proposal
from simulator.core.engine_rules import Admission, Preemption, RoutedRequest, Router
from simulator.core.policies.base import Policy, PolicyView
from tests.conftest import ROOT

DOCUMENTED = {"Policy": Policy, "PolicyView": PolicyView, "AcceptanceSource": AcceptanceSource,
              "Proposal": Proposal, "GrowingArrays": GrowingArrays, "Router": Router, "RoutedRequest": RoutedRequest, "Admission": Admission,
              "Preemption": Preemption}


def test_every_documented_name_imports_from_simulator_and_is_the_class_the_engine_checks():
    for name, cls in DOCUMENTED.items():
        assert getattr(simulator, name) is cls, name
    assert set(DOCUMENTED) <= set(simulator.__all__)


def test_the_docs_name_exactly_the_exported_api():
    text = (ROOT / "docs" / "extending.md").read_text()
    line = re.search(r"^from simulator import (.+)$", text, re.M).group(1)
    assert {n.strip() for n in line.split(",")} == set(DOCUMENTED)


@pytest.mark.slow
@pytest.mark.parametrize("old, names", [("simulator.policies", ["Policy", "PolicyView"]),
                                        ("simulator.acceptance", ["AcceptanceSource", "Proposal"]),
                                        ("simulator.acceptance.base", ["GrowingArrays"]),
                                        ("simulator.engine_rules", ["Router", "Admission", "Preemption"])])
def test_the_last_releases_paths_still_import_with_a_warning(old, names):
    # a fresh interpreter: the warning fires when the module first loads, and this process may have loaded it
    code = (f"import warnings; warnings.simplefilter('error')\n"
            f"try:\n    from {old} import {', '.join(names)}\nexcept FutureWarning as w:\n    print('WARNED', w)\n"
            f"else:\n    print('SILENT')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.startswith("WARNED") and "from simulator import" in out, out
    with pytest.warns(FutureWarning):
        module = importlib.reload(importlib.import_module(old.replace(".base", "")))
    for name in names:
        assert getattr(importlib.import_module(old), name) is DOCUMENTED[name]
    assert module is not None
