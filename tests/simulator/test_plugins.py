"""Plug-in resolution (simulator/core/plugins.py): import strings, entry points, base classes, parameters, files."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from simulator.core.acceptance import AcceptanceSource, Proposal, resolve_source
from simulator.core.acceptance.base import checked_accepted, checked_confidence
from simulator.core.acceptance.runtime import RuntimeSource
from simulator.core.plugins import (
    ACCEPTANCE_GROUP,
    POLICY_GROUP,
    construct,
    entry_points,
    source_files,
)
from simulator.core.policies import Policy, make_policy, resolve
from simulator.core.policies.adaptive import Threshold
from simulator.errors import PolicyError, SourceError, UserError
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
        from simulator.core.policies import Policy
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
        from simulator.core.policies import Policy

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
    with pytest.raises(PolicyError, match=r"NotAPolicy.*expected a subclass of simulator\.core\.policies\.base\.Policy"):
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
    with pytest.raises(UserError, match=r"acceptance\.options \(source 'profile', system 'dspark'\): unknown "
                                        r"parameter 'alpha'; ProfileSource takes scenario, drafter, gamma, mix, "
                                        r"calibrated, rng$") as info:
        simulate(path)
    assert "\n" not in str(info.value)


def test_oracle_needs_a_source_that_draws_outcomes(scenario_file, tmp_path, monkeypatch):
    (tmp_path / "nooutcome.py").write_text(textwrap.dedent("""
        import numpy as np
        from simulator.core.acceptance import AcceptanceSource, Proposal

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


class Overclaims(AcceptanceSource):
    """A plug-in source with a bug: it accepts the whole block whatever was verified."""

    draws_outcome = True

    def __init__(self, *, scenario, drafter, gamma, mix, calibrated, rng, negative=False):
        self.gamma = gamma
        self.negative = negative

    def propose(self, ids):
        return Proposal(confidence=np.full((len(ids), self.gamma), 0.9), outcome=np.full(len(ids), self.gamma))

    def verify(self, proposal, lengths):
        return np.full(len(lengths), -1 if self.negative else self.gamma)


@pytest.mark.parametrize(("options", "match"), [({}, r"7 draft tokens accepted for request 0, outside 0\.\.2"),
                                                ({"negative": True}, r"-1 draft tokens accepted .* outside 0\.\.2")])
def test_engine_refuses_a_source_that_accepts_more_than_was_verified(scenario_file, options, match):
    path = scenario_file(systems=["static-2"],
                         acceptance={"source": f"{__name__}:Overclaims", "options": options})
    # the run it broke in first (its scenario, system, load point and seed), then the source and the fault
    with pytest.raises(SourceError, match=rf"^{re.escape(str(path))}: system 'static-2' at closed-\d+, seed 0: "
                                          rf"acceptance source Overclaims: {match}"):
        simulate(path)


def test_checked_accepted_passes_valid_counts_through_and_names_each_fault():
    src = Overclaims.__new__(Overclaims)
    lengths = np.array([0, 2, 5], dtype=np.int64)
    ok = np.array([0, 1, 5], dtype=np.int64)
    assert checked_accepted(src, ok, lengths) is ok
    assert checked_accepted(src, [0, 2, 3], lengths).tolist() == [0, 2, 3]
    with pytest.raises(SourceError, match=r"shape \(2,\), expected \(3,\)"):
        checked_accepted(src, np.array([0, 1]), lengths)
    with pytest.raises(SourceError, match="dtype float64, expected integer counts"):
        checked_accepted(src, np.array([0.0, 1.0, 2.0]), lengths)
    with pytest.raises(SourceError, match=r"1 draft tokens accepted for request 0, outside 0\.\.0"):
        checked_accepted(src, np.array([1, 1, 1]), lengths)


def test_checked_confidence_passes_valid_arrays_through_and_names_each_fault():
    src = Overclaims.__new__(Overclaims)
    ok = np.full((3, 2), 0.5)
    assert checked_confidence(src, ok, 3, 2) is ok
    as_floats = checked_confidence(src, np.full((3, 2), 0.5, dtype=np.float32), 3, 2)
    assert as_floats.dtype == np.float64 and as_floats.tolist() == ok.tolist()
    with pytest.raises(SourceError, match=r"^acceptance source Overclaims: .* shape \(3, 1\), expected \(3, 2\)"):
        checked_confidence(src, np.full((3, 1), 0.5), 3, 2)
    with pytest.raises(SourceError, match=r"confidence of type str, expected a float array"):
        checked_confidence(src, "high", 3, 2)


@pytest.mark.slow
@pytest.mark.parametrize("command", [("check",), ("run", "--quick", "--jobs", "2")])
def test_bad_policy_parameters_stop_check_and_run_with_one_line(scenario_file, tmp_path, command):
    from tests.simulator.test_config import run_cli

    path = scenario_file(systems=["mtp-1", {"name": "thr", "policy": "threshold-1.5"}])
    res = run_cli(*command, str(path), *(["--out", str(tmp_path / "o")] if command[0] == "run" else []))
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    assert "system 'thr' (policy 'threshold-1.5'): value must be in [0, 1], got 1.5" in res.stderr


class EndsAtPrefill(RuntimeSource):
    """A token-generating source whose prefill samples the end-of-sequence token for every third request: nothing
    is accepted, and those requests must end in the step their prefill completes."""

    def __init__(self, *, scenario, drafter, gamma, mix, calibrated, rng, slots, disaggregated):
        self.gamma = gamma
        self.prefill_ids: list[int] = []

    def propose(self, ids):
        return Proposal(confidence=np.full((len(ids), self.gamma), 0.5))

    def verify(self, proposal, lengths):
        return lengths * 0

    def prefilled(self, ids):
        self.prefill_ids.extend(ids.tolist())
        return ids % 3 == 0


def test_a_prefill_that_samples_eos_ends_its_request_in_that_step(scenario_file):
    path = scenario_file(systems=["static-2"], acceptance={"source": f"{__name__}:EndsAtPrefill"},
                         engine={"prefill_chunk": 64})  # a 128-token prompt prefills over two steps
    _, sim = simulate(path, quick=True)
    req = sim.requests.frame()
    ended = np.array([rid for rid in sim.source.prefill_ids if rid % 3 == 0])
    kept = np.array([rid for rid in sim.source.prefill_ids if rid % 3 and not np.isnan(req["finish"][rid])])
    assert len(ended) > 5 and len(kept) > 5
    # the prefill's token is the request's only token: it finishes when that token is out, one token long
    assert np.array_equal(req["finish"][ended], req["first_token"][ended])
    assert (req["generated"][ended] == 1).all() and (req["decode_steps"][ended] == 0).all()
    assert (req["generated"][kept] == req["output"][kept]).all() and (req["decode_steps"][kept] > 0).all()
