"""Malformed scenarios stop with one line naming the file, the field and what was expected (exit code 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from simulator.errors import UserError
from simulator.inputs.config import load_scenario
from simulator.inputs.systems import resolve_systems
from tests.conftest import ROOT


@pytest.mark.parametrize(("fields", "expect"), [
    ({"engine": {"max_running": "many"}}, r"engine\.max_running: Input should be a valid integer.*'many'"),
    ({"engine": {"max_runing": 8}}, r"engine\.max_runing: unknown field"),
    ({"workload": {"prompt": {"dist": "lognormal", "median": 100}}}, r"workload\.prompt\.sigma: required field is missing"),
    ({"workload": {"prompt": {"dist": "zipf"}}}, r"workload\.prompt: Input tag 'zipf' .* expected tags: 'fixed', 'uniform', 'lognormal', 'empirical'"),
    ({"run": {"duration_s": 5, "warmup_s": 10}}, r"run: .*warmup_s must be shorter than duration_s"),
    ({"sla": {"tps_targets": []}}, r"sla\.tps_targets: List should have at least 1 item"),
    ({"traffic": {"kind": "poisson"}}, r"traffic: .*exactly one of 'rate' or 'segments'"),
    ({"systems": [{"policy": "dspark", "drafter": "medusa"}]}, r"systems\[0\]\.drafter: Input should be 'none', 'mtp'"),
    ({"hardware": {"replicas": 0}}, r"hardware\.replicas: Input should be greater than 0"),
])
def test_malformed_fields(scenario_file, fields, expect):
    path = scenario_file(**fields)
    with pytest.raises(UserError, match=expect) as err:
        load_scenario(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_missing_required_top_level_field(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"systems": ["dspark"], "frontier": {"concurrency": [1]}}))
    with pytest.raises(UserError, match=r"s\.yaml: hardware: required field is missing"):
        load_scenario(path)


def test_bad_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("systems: [dspark\nhardware: {")
    with pytest.raises(UserError, match=r"bad\.yaml: line \d+: not valid YAML"):
        load_scenario(bad)
    with pytest.raises(UserError, match="scenario file not found"):
        load_scenario(tmp_path / "nope.yaml")


def test_set_overrides(scenario_file):
    path = scenario_file(systems=["mtp-1", "dspark"])
    scn = load_scenario(path, ["engine.max_running=32", "systems.1.gamma=5", "workload.mix={math: 2}"])
    assert scn.model.engine.max_running == 32
    assert scn.model.systems[1].gamma == 5 and scn.model.systems[1].policy == "dspark"
    assert scn.model.workload.mix == {"math": 2}
    with pytest.raises(UserError, match=r"--set systems\.7\.gamma=5: systems\.7: expected a list index 0\.\.1"):
        load_scenario(path, ["systems.7.gamma=5"])
    with pytest.raises(UserError, match=r"expected dotted\.path=value"):
        load_scenario(path, ["engine.max_running"])
    with pytest.raises(UserError, match=r"engine\.max_running: Input should be greater than 0 \(got -1\)"):
        load_scenario(path, ["engine.max_running=-1"])


def test_set_appends_a_system_and_keeps_the_baseline(scenario_file):
    path = scenario_file(systems=["mtp-1", "dspark"], sla={"tps_targets": [80], "baseline": "mtp-1"})
    scn = load_scenario(path, ["systems+=oracle", "systems += [static-3, {policy: threshold-0.6}]"])
    assert [s if isinstance(s, str) else s.policy for s in scn.model.systems] == [
        "mtp-1", "dspark", "oracle", "static-3", "threshold-0.6"]
    assert scn.model.sla.baseline == "mtp-1"
    assert [s.name for s in resolve_systems(scn)][:3] == ["mtp-1", "dspark", "oracle"]
    with pytest.raises(UserError, match=r"--set engine\+=3: engine: \+= appends to a list, and engine is not one"):
        load_scenario(path, ["engine+=3"])
    # the list replaced without the baseline: the error says how to go on
    with pytest.raises(UserError, match=r"sla\.baseline: 'mtp-1' is not one of the systems \(dspark\); .*sla\.baseline="):
        resolve_systems(load_scenario(path, ["systems=[dspark]"]))


def run_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "simulator.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def run_main(capsys, *args) -> subprocess.CompletedProcess:
    """``simulate ARGS`` through the console script's own ``main`` (its error handling and exit codes) in this
    process: what run_cli checks, without a fresh interpreter's seconds of imports, for the fast tier."""
    from simulator.cli import main

    capsys.readouterr()
    argv, sys.argv = sys.argv, ["simulate", *args]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["simulate", *args], code, out, err)


@pytest.mark.slow
def test_cli_errors_are_one_line_exit_2(scenario_file, tmp_path):
    path = scenario_file(systems=["dspark", "nonsense-policy"])
    res = run_cli("check", str(path))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    assert "systems[1].policy: unknown policy 'nonsense-policy'" in res.stderr
    missing_table = scenario_file(name="t", hardware={"table": str(tmp_path / "none.csv")})
    res = run_cli("check", str(missing_table))
    assert res.returncode == 2 and "hardware.table:" in res.stderr and "not found" in res.stderr
    res = run_cli(str(tmp_path / "absent.yaml"))
    assert res.returncode == 2 and "scenario file not found" in res.stderr


@pytest.mark.slow
def test_cli_check_reports_what_would_run(scenario_file):
    path = scenario_file(systems=["mtp-1", "dspark"], frontier={"concurrency": [1, 8]})
    res = run_cli("check", str(path), "--set", "run.replicates=3")
    assert res.returncode == 0, res.stderr
    assert "runs: 12 (x3 seeds)" in res.stdout and "mtp-1 [mtp, gamma 1, static-1]" in res.stdout


@pytest.mark.slow
def test_mix_entry_unknown_to_profile(scenario_file):
    path = scenario_file(workload={"mix": {"poetry": 1}})
    res = run_cli("check", str(path))
    assert res.returncode == 2 and "workload.mix.poetry: not a domain or benchmark" in res.stderr


@pytest.mark.slow
def test_baseline_must_be_one_of_the_systems(scenario_file):
    path = scenario_file(systems=["mtp-1", "dspark"], sla={"tps_targets": [80], "baseline": "mtp-2"})
    res = run_cli("check", str(path))
    assert res.returncode == 2 and "sla.baseline: 'mtp-2' is not one of the systems (mtp-1, dspark)" in res.stderr


@pytest.mark.parametrize(("fields", "expect"), [
    ({"engine": {"max_runing": 8}}, r"engine\.max_runing: unknown field \(did you mean 'max_running'\?\)"),
    ({"run": {"duration": 8}}, r"run\.duration: unknown field \(did you mean 'duration_s'\?\)"),
    ({"systems": [{"policy": "dspark", "gama": 5}]}, r"systems\[0\]\.gama: unknown field \(did you mean 'gamma'\?\)"),
    ({"workload": {"prompt": {"dist": "lognormal", "median": 100, "sigma": 1, "mx": 9}}},
     r"workload\.prompt\.mx: unknown field \(did you mean 'max'\?\)"),
    ({"hardwear": {}}, r"hardwear: unknown field \(did you mean 'hardware'\?\)"),
    ({"engine": {"zzz": 1}}, r"engine\.zzz: unknown field$"),
])
def test_unknown_keys_suggest_the_closest_field(scenario_file, fields, expect):
    with pytest.raises(UserError, match=expect):
        load_scenario(scenario_file(**fields))


@pytest.mark.parametrize(("fields", "expect"), [
    ({"traffic": {"kind": "poisson", "rate": "60"}}, r"traffic\.rate: expected a number, got the string '60'; "
                                                      "write it without quotes"),
    ({"engine": {"max_running": "64"}}, r"engine\.max_running: expected a number, got the string '64'"),
    ({"frontier": {"concurrency": [4, "8"]}}, r"frontier\.concurrency\[1\]: expected a number, got the string '8'"),
    ({"workload": {"mix": {"math": "2"}}}, r"workload\.mix\.math: expected a number, got the string '2'"),
])
def test_quoted_numbers_are_refused_not_converted(scenario_file, fields, expect):
    with pytest.raises(UserError, match=expect):
        load_scenario(scenario_file(**fields))


@pytest.mark.slow
def test_bad_mix_entry_names_the_file_and_field(scenario_file):
    path = scenario_file(workload={"mix": {"math": 1, "cdoe": 1}})
    res = run_cli("check", str(path))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert f"{path}: workload.mix.cdoe: not a domain or benchmark of acceptance profile 'paper-qwen3-8b' " \
           "(did you mean 'code'?)" in res.stderr


@pytest.mark.slow
def test_gamma_too_large_blames_the_system(scenario_file):
    path = scenario_file(systems=["mtp-1", {"name": "big", "policy": "dspark", "gamma": 100}],
                         engine={"max_running": 64, "max_batch_tokens": 4096})
    res = run_cli("check", str(path))
    assert res.returncode == 2
    assert (f"{path}: system 'big': gamma 100 does not fit: a full batch verifies max_running x (1 + gamma) = "
            "64 x 101 = 6464 tokens, more than engine.max_batch_tokens 4096; use gamma <= 63") in res.stderr


def test_builtin_scenarios_and_library_files_are_found_by_name(tmp_path, monkeypatch):
    from simulator.inputs.library import library_dir

    monkeypatch.chdir(tmp_path)  # no scenarios/ folder here
    for name in ("peak", "peak.yaml", "scenarios/peak.yaml"):
        assert load_scenario(name).path == library_dir() / "peak.yaml"
    with pytest.raises(UserError, match=r"^elsewhere/peak.yaml: scenario file not found"):
        load_scenario("elsewhere/peak.yaml")  # a path in another folder is never swapped for a built-in
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"hardware": {"table": "hardware/h200-qwen3-8b-bf16.csv"}, "systems": ["dspark"],
                                    "frontier": {"concurrency": [4]}}))
    scn = load_scenario(mine)
    assert scn.resolve("hardware/h200-qwen3-8b-bf16.csv") == library_dir() / "hardware" / "h200-qwen3-8b-bf16.csv"
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "h200-qwen3-8b-bf16.csv").write_text("x")
    assert scn.resolve("hardware/h200-qwen3-8b-bf16.csv") == tmp_path / "hardware" / "h200-qwen3-8b-bf16.csv"


@pytest.mark.slow
def test_list_shows_scenarios_and_sources():
    res = run_cli("list")
    assert res.returncode == 0, res.stderr
    assert "scenarios (" in res.stdout and "\n  peak " in res.stdout and "\n  azure-conv " in res.stdout
    sources = res.stdout.split("acceptance sources:\n")[1].split("drafters:")[0]
    assert sources.startswith("  profile            Samples acceptance") and "\n  trace              Replays" in sources


@pytest.mark.slow
def test_a_prefill_table_is_never_silently_ignored(scenario_file):
    """Without a disaggregated prefill it prices nothing: an error. Without prefill_replicas a run's unbounded pool
    prices prompts from hardware.table: `check` (and a run) warn; a plan sizes finite pools with it."""
    table = str(ROOT / "scenarios" / "hardware" / "h200-qwen3-8b-bf16.csv")
    colocated = scenario_file(name="colocated", hardware={"prefill_table": table})
    res = run_cli("check", str(colocated))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "hardware.prefill_table prices a disaggregated prefill pool; set engine.prefill: disaggregated" in res.stderr
    unbounded = scenario_file(name="unbounded", hardware={"prefill_table": table}, engine={"prefill": "disaggregated"})
    res = run_cli("check", str(unbounded))
    assert res.returncode == 0, res.stderr
    assert ("warning: hardware.prefill_table prices the replicas of a finite prefill pool (hardware.prefill_replicas, "
            "or the pools `simulate plan` sizes); this run's unbounded pool prices every prompt from hardware.table"
            in res.stderr)
    res = run_cli("check", str(unbounded), "--set", "hardware.prefill_replicas=2")
    assert res.returncode == 0 and "warning" not in res.stderr
