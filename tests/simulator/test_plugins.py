"""Plug-in resolution (simulator/plugins.py): import strings, entry points, base classes, parameters, files."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from simulator.acceptance import AcceptanceSource, resolve_source
from simulator.errors import PolicyError, UserError
from simulator.plugins import (
    ACCEPTANCE_GROUP,
    POLICY_GROUP,
    construct,
    entry_points,
    source_files,
)
from simulator.policies import Policy, make_policy, resolve
from simulator.policies.adaptive import Threshold
from tests.simulator.engine_helpers import simulate


def write_distribution(root: Path, name: str, entry_points_txt: str) -> None:
    """An installed distribution as importlib.metadata finds it on sys.path: a dist-info folder."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points_txt))


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A temporary directory on sys.path holding a researcher's package and an installed distribution that
    registers its classes as entry points."""
    pkg = tmp_path / "mylab"
    (pkg / "sched").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sched" / "__init__.py").write_text("")
    (pkg / "sched" / "helpers.py").write_text("K = 2\n")
    (pkg / "sched" / "fixed.py").write_text(textwrap.dedent("""
        import numpy as np
        from simulator.policies import Policy
        from mylab.sched.helpers import K

        class AlwaysK(Policy):
            reads_confidence = False

            def choose(self, view):
                return np.minimum(K, view.max_lengths)

        class NotAPolicy:
            def choose(self, view):
                return view.max_lengths
    """))
    (tmp_path / "single.py").write_text(textwrap.dedent("""
        from simulator.policies import Policy

        class Zero(Policy):
            def choose(self, view):
                return view.max_lengths * 0
    """))
    write_distribution(tmp_path, "mylab", f"""
        [{POLICY_GROUP}]
        always-k = mylab.sched.fixed:AlwaysK
        broken = mylab.sched.fixed:Missing

        [{ACCEPTANCE_GROUP}]
        geometric = geometric_source:GeometricSource
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    forget_modules("mylab", "single")


def forget_modules(*tops: str) -> None:
    """Drop modules imported from a test's temporary directory, so the next test imports its own copy."""
    for name in [m for m in sys.modules if m.partition(".")[0] in tops]:
        del sys.modules[name]


def test_builtin_names_resolve_as_before():
    assert resolve("dspark")[0].name == "dspark"
    assert resolve("static-3") == (resolve("static")[0], {"k": 3})
    assert resolve("threshold-0.7") == (Threshold, {"value": 0.7})


def test_import_string_and_entry_point_name_the_same_class(plugin_dir):
    by_path, _ = resolve("mylab.sched.fixed:AlwaysK")
    by_name, _ = resolve("always-k")
    assert by_path is by_name and issubclass(by_name, Policy)
    assert "always-k" in entry_points(POLICY_GROUP)


def test_a_class_that_does_not_subclass_the_base_is_refused(plugin_dir):
    with pytest.raises(PolicyError, match=r"NotAPolicy.*expected a subclass of simulator\.policies\.base\.Policy"):
        resolve("mylab.sched.fixed:NotAPolicy")
    with pytest.raises(UserError, match=r"acceptance\.source: .*'AlwaysK', expected a subclass of .*AcceptanceSource"):
        resolve_source("mylab.sched.fixed:AlwaysK")


@pytest.mark.parametrize(("spec", "match"), [
    ("nosuchmodule:X", r"cannot import module 'nosuchmodule'"),
    ("mylab.sched.fixed:Nope", r"module 'mylab.sched.fixed' has no 'Nope'"),
    ("broken", r"entry point 'broken' .*mylab.sched.fixed:Missing.* does not load"),
    ("dspak", r"unknown policy 'dspak' \(did you mean 'dspark'\?\); known: .*always-k"),
    (":X", r"not an import string"),
])
def test_unresolvable_specs_are_one_line_errors(plugin_dir, spec, match):
    with pytest.raises(PolicyError, match=match) as info:
        resolve(spec)
    assert "\n" not in str(info.value)


def test_entry_point_source_resolves(plugin_dir, examples_on_path):
    cls = resolve_source("geometric")
    assert issubclass(cls, AcceptanceSource) and cls.__name__ == "GeometricSource"
    with pytest.raises(UserError, match=r"unknown acceptance source 'geometirc' \(did you mean 'geometric'\?\)"):
        resolve_source("geometirc")


@pytest.mark.parametrize(("spec", "params", "match"), [
    ("threshold-1.5", {}, r"system 'thr' \(policy 'threshold-1.5'\): value must be in \[0, 1\], got 1.5"),
    ("static-2", {"kk": 3}, r"unknown parameter 'kk' \(did you mean 'k'\?\); StaticK takes k"),
    ("static", {}, r"missing a required argument: 'k'; StaticK takes k"),
    ("dspark", {"lag": 2}, r"unknown parameter 'lag'; DSpark takes no parameters"),
])
def test_bad_policy_parameters_name_the_system(spec, params, match):
    with pytest.raises(PolicyError, match=match):
        make_policy(spec, params, "thr")


def test_construct_reports_value_errors_but_keeps_other_bugs():
    class Picky:
        def __init__(self, x: int):
            if x < 0:
                raise ValueError("x must be >= 0")
            self.y = 1 / x

    with pytest.raises(UserError, match=r"^field: x must be >= 0$"):
        construct(Picky, {"x": -1}, "field")
    with pytest.raises(ZeroDivisionError):  # a bug in the plug-in keeps its traceback
        construct(Picky, {"x": 0}, "field")


def test_source_files_cover_the_module_or_its_whole_package(plugin_dir):
    always, _ = resolve("mylab.sched.fixed:AlwaysK")
    files = source_files(always)
    pkg = (plugin_dir / "mylab").resolve()
    assert {pkg / "__init__.py", pkg / "sched" / "__init__.py", pkg / "sched" / "fixed.py",
            pkg / "sched" / "helpers.py"} <= set(files)
    assert any(f.name == "base.py" and f.parent.name == "policies" for f in files)  # Policy's own package
    zero, _ = resolve("single:Zero")
    own = [f for f in source_files(zero) if f.is_relative_to(plugin_dir.resolve())]
    assert own == [(plugin_dir / "single.py").resolve()]


def test_plugin_source_runs_and_matches_the_closed_form(scenario_file, examples_on_path):
    """The i.i.d. source verified in full: tau = (1 - alpha^(g+1)) / (1 - alpha)."""
    alpha, gamma = 0.7, 4
    path = scenario_file(systems=[{"name": "s", "drafter": "dspark", "gamma": gamma, "policy": f"static-{gamma}"}],
                         acceptance={"source": "geometric_source:GeometricSource", "options": {"alpha": alpha}},
                         workload={"prompt": 64, "output": 400}, frontier={"concurrency": [32]})
    row, _ = simulate(path)
    assert row["tau"] == pytest.approx((1 - alpha ** (gamma + 1)) / (1 - alpha), rel=0.03)


@pytest.mark.parametrize(("acceptance", "match"), [
    ({"options": {"alpha": 1.5}}, r"acceptance\.options \(source .*, system 's'\): alpha must lie in \[0, 1\)"),
    ({"options": {"alpah": 0.5}}, r"acceptance\.options .*unknown parameter 'alpah' \(did you mean 'alpha'\?\)"),
    ({"options": {"gamma": 3}}, r"acceptance\.options\.gamma: set by the simulator"),
])
def test_bad_source_options_are_one_line_errors(scenario_file, examples_on_path, acceptance, match):
    path = scenario_file(systems=[{"name": "s", "policy": "static-2"}],
                         acceptance={"source": "geometric_source:GeometricSource", **acceptance})
    with pytest.raises(UserError, match=match):
        simulate(path)


def test_builtin_source_takes_no_options(scenario_file):
    path = scenario_file(acceptance={"source": "profile", "options": {"alpha": 0.5}})
    with pytest.raises(UserError, match=r"acceptance\.options: the built-in source 'profile' takes no options"):
        simulate(path)


def test_oracle_needs_a_source_that_draws_outcomes(scenario_file, tmp_path, monkeypatch):
    (tmp_path / "nooutcome.py").write_text(textwrap.dedent("""
        import numpy as np
        from simulator.acceptance import AcceptanceSource, Proposal

        class Blind(AcceptanceSource):
            def __init__(self, *, scenario, drafter, gamma, mix, calibrated, rng):
                self.gamma = gamma

            def propose(self, ids):
                return Proposal(confidence=np.full((len(ids), self.gamma), 0.5))

            def verify(self, proposal, lengths):
                return lengths * 0
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nooutcome", raising=False)
    path = scenario_file(systems=["oracle"], acceptance={"source": "nooutcome:Blind"})
    with pytest.raises(UserError, match=r"policy 'oracle', which reads realised outcomes .* does not draw them"):
        simulate(path)
    row, _ = simulate(scenario_file(systems=["static-2"], acceptance={"source": "nooutcome:Blind"}))
    assert row["tau"] == 1.0  # nothing accepted, one target token per step
    assert np.isfinite(row["throughput_per_gpu"])
