"""benchmarks/sim_to_real_spec.py: the public A/B data, the split between what the project can and cannot build,
and one small A/B predicted end to end through the script's own command."""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from hw_profile.hardware.gpus import gpu_names
from hw_profile.hardware.shapes import SHAPES

ROOT = Path(__file__).resolve().parents[2]
# a path into the folders around a checkout (a parent folder, the sandbox's own) rather than a public source
LOCAL_PATH = re.compile(r"(?:^|[\s(`'\"])(?:\.\./|/work/|/tmp/)")
# a public source: owner/repo with a PR or issue number, a repository's post path or a file at a commit, or a
# Hugging Face data set with the file inside it
PUBLIC = re.compile(r"^([\w.-]+/[\w.-]+ ((PR|issue) #\d+|blog/\S+\.md|\S+\.md @ [0-9a-f]{7,40})"
                    r"|Hugging Face dataset [\w.-]+/[\w.-]+, \S+)")


@pytest.fixture(scope="module")
def spec():
    path = ROOT / "benchmarks" / "sim_to_real_spec.py"
    loader = importlib.util.spec_from_file_location("sim_to_real_spec", path)
    module = importlib.util.module_from_spec(loader)
    sys.modules["sim_to_real_spec"] = module
    loader.loader.exec_module(module)
    yield module
    sys.modules.pop("sim_to_real_spec", None)


def test_every_run_parses_and_names_a_public_source(spec):
    comparisons = spec.load()
    runs = {c.run["id"]: c.run for c in comparisons}
    assert len(runs) == len(yaml.safe_load(spec.DATA.read_text())["runs"])
    for run in runs.values():
        assert PUBLIC.match(run["source"]), run["source"]
        assert "shared" not in run["source"]
    text = spec.DATA.read_text() + (spec.DATA.parent / "README.md").read_text()
    assert not LOCAL_PATH.search(text), "the data cite a path on the machine they were made on"


KNOWN_GPUS = set(gpu_names())  # every entry under each of its spellings


def test_the_split_follows_the_deployment_and_the_numbers(spec):
    for c in spec.load():
        lacks = spec.missing(c)
        run, arms = c.run, (c.arm(c.a), c.arm(c.b))
        gpus = {a.get("gpu", run["gpu"]) for a in arms}
        known = run["model"] in SHAPES and all(g in KNOWN_GPUS for g in gpus) and run["engine"] in spec.ENGINES
        numbers = (all(a.get("concurrency") and a.get("system") for a in arms)
                   and (c.arm(c.al_from)["system"] == "ar" or c.arm(c.al_from).get("al") is not None
                        or c.breaks_even)
                   and c.arm(c.a).get("value") is not None
                   and (c.arm(c.b).get("value") is not None or c.arm(c.b).get("sign") is not None))
        assert (lacks == []) == (known and numbers and not c.excluded), (c.key, lacks)
        # each missing piece of the deployment is named
        assert (run["model"] not in SHAPES) == any(line.startswith("model shape") for line in lacks)
        assert any(g is not None and g not in KNOWN_GPUS for g in gpus) == any(
            line.startswith("GPU: no ") for line in lacks)
        assert (run["engine"] not in spec.ENGINES) == any(line.startswith("engine:") for line in lacks)


def test_the_script_lists_each_comparison_it_cannot_build_once(spec, capsys, tmp_path):
    # the Kimi-K3 TokenSpeed runs: a shape now, but TokenSpeed (an engine the estimate does not price) and an
    # unpublished draft length stand in the way of each, so nothing is simulated
    assert spec.main(["--markdown", "--runs", "kimi-k3-tokenspeed", "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    wanted = [c for c in spec.load() if "kimi-k3-tokenspeed" in c.run["id"]]
    lines = [ln for ln in out.splitlines() if ln.startswith("- kimi-k3")]
    assert len(lines) == len(wanted) > 0
    assert not any("model shape" in ln for ln in lines)
    assert all("engine: tokenspeed" in ln or "draft length or verify policy not published" in ln for ln in lines)
    assert "Summary: sign right on 0 of 0" in out


def test_a_mistake_in_the_data_is_one_line(spec, capsys, tmp_path):
    doc = yaml.safe_load(spec.DATA.read_text())
    del doc["runs"][1]["source"]
    bad = tmp_path / "runs.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert spec.main(["--data", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{bad}: runs[1].source: expected a non-empty text"]


def _grid(path: Path) -> pd.Series:
    df = pd.read_csv(path, comment="#")
    return df.set_index(["batch_tokens", "kv_tokens"])["step_ms"]


def tiny_doc(al: float = 3.0) -> dict:
    """One A/B of Qwen3-0.6B on one A100 against one H200, priced on the roofline (a few seconds to estimate)."""
    arm = {"system": "static-3", "gamma": 3, "concurrency": 4, "al": al}
    return {"runs": [{
        "id": "tiny-gpus", "what": "a test A/B", "source": "example/repo PR #1", "model": "qwen3-0.6b",
        "gpu": "A100", "engine": "vllm", "metric": "output tok/s per GPU",
        "estimate": {"gpus": 1, "drafters": "dspark", "kernels": "roofline"},
        "prefill": "disaggregated", "workload": {"prompt": 128, "output": 128},
        "run": {"duration_s": 6.0, "warmup_s": 1.0},
        "acceptance": {"profile": "paper-qwen3-8b", "drafter": "dspark"},
        "arms": {"a100": {"label": "A100", "value": 100.0, **arm},
                 "h200": {"label": "H200", "value": 80.0, "gpu": "H200", **arm}},
        "ab": [{"a": "a100", "b": "h200", "kind": "H200/A100", "al_from": "a"}]}]}


@pytest.mark.slow
def test_one_ab_end_to_end_where_every_step_is_cheaper(spec, capsys, tmp_path):
    """A100 against H200 on the roofline: where the H200's target and drafter tables are cheaper at every point,
    the same closed loop (same workload and acceptance streams) must run faster on it, whatever the measured
    figures say; the measured ratio and the error are the data's."""
    doc = tiny_doc()
    data = tmp_path / "runs.yaml"
    data.write_text(yaml.safe_dump(doc))
    cache = tmp_path / "cache"
    assert spec.main(["--data", str(data), "--markdown", "--seeds", "1", "--cache", str(cache)]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("| tiny-gpus (H200/A100)"))
    cells = [x.strip() for x in row.strip("|").split("|")]
    measured, predicted, error, agrees = cells[3], float(cells[4].rstrip("x")), cells[5], cells[6]
    assert measured == "0.80x"

    # the cached tables the script priced the arms on (asking again writes nothing)
    tables = {gpu: spec.table(spec.estimate_args(doc["runs"][0], {"gpu": gpu}), cache) for gpu in ("A100", "H200")}
    for name in ("table.csv", "table.drafter-dspark.csv"):
        slow, fast = (_grid(tables[g].with_name(name)) for g in ("A100", "H200"))
        common = slow.index.intersection(fast.index)
        assert len(common) > 100 and (fast[common] <= slow[common]).all()
    assert predicted > 1.0
    assert agrees == "no"  # the data say 0.80x: the prediction's sign is physics', not the data's
    # the error is the predicted ratio over the data's (the printed ratio is rounded to two decimals)
    assert abs(float(error.rstrip("%")) - (predicted / 0.8 - 1) * 100) <= 1


@pytest.mark.slow
def test_a_scenario_that_cannot_be_built_is_one_line(spec, capsys, tmp_path):
    # an acceptance length no block of 3 drafts can reach (at most 4 tokens a step)
    data = tmp_path / "runs.yaml"
    data.write_text(yaml.safe_dump(tiny_doc(al=4.5)))
    assert spec.main(["--data", str(data), "--seeds", "1", "--cache", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [ln for ln in err.splitlines() if not ln.startswith("  ")]  # indented lines: progress
    assert len(errors) == 1 and errors[0].startswith(f"sim_to_real_spec: {data}: run 'tiny-gpus', arm 'a100': ")
    assert "acceptance.acceptance_length" in errors[0]


def test_a_simulated_figure_is_put_in_the_sources_metric(spec):
    """Per GPU (or rank) as simulated; a deployment's total over its GPUs; a "total" metric adds the prompts by
    Little's law over the closed loop (prompt + output tokens per output token)."""
    tp4 = {"estimate": {"gpus": 4, "parallel": "tp"}, "workload": {"prompt": 1024, "output": 2048}}
    dp16 = {"estimate": {"gpus": 16, "parallel": "dp"}, "replicas": 16, "workload": {"prompt": 1024, "output": 2048}}
    arm, res = {}, spec.ArmResult(100.0, 5.0, 10.0, 100.0)  # 100 output tok/s per GPU, a steady loop
    assert spec.in_metric({**tp4, "metric": "output tok/s per GPU"}, arm, res) == 100.0
    assert spec.in_metric({**dp16, "metric": "output tok/s per rank"}, arm, res) == 100.0
    assert spec.in_metric({**tp4, "metric": "output tok/s"}, arm, res) == 400.0
    assert spec.in_metric({**dp16, "metric": "output tok/s"}, arm, res) == 1600.0
    assert spec.in_metric({**tp4, "metric": "total tok/s per GPU"}, arm, res) == pytest.approx(150.0)
    uniform = {**tp4, "workload": {"prompt": {"dist": "uniform", "low": 1, "high": 8191}, "output": 1024}}
    assert spec.in_metric({**uniform, "metric": "total tok/s"}, arm, res) == pytest.approx(400.0 * 5120 / 1024)
    # an arm's own estimate options (another GPU count) win over the run's
    assert spec.in_metric({**tp4, "metric": "output tok/s"}, {"estimate": {"gpus": 8}}, res) == 800.0
    # a finite run counts its own prompts, not the workload's means
    finite = replace(res, prompt_per_output=3.0)
    assert spec.in_metric({**uniform, "metric": "total tok/s per GPU"}, arm, finite) == pytest.approx(400.0)


def test_a_finite_arms_ratio_counts_its_own_prompts_where_the_metric_does(spec):
    """Two finite runs of different lists (128 and 512 prompts) drew different prompt lengths: a "total" metric's
    ratio counts each run's own, an output metric's does not; a steady loop's arms share the workload's means."""
    a = spec.ArmResult(100.0, 5.0, 10.0, 100.0, prompt_per_output=8.0)
    b = spec.ArmResult(150.0, 5.0, 10.0, 100.0, prompt_per_output=9.0)
    assert b.counted("total tok/s per GPU") / a.counted("total tok/s per GPU") == pytest.approx(1500.0 / 900.0)
    assert b.counted("output tok/s") / a.counted("output tok/s") == pytest.approx(1.5)
    steady = spec.ArmResult(100.0, 5.0, 10.0, 100.0)
    assert steady.counted("total tok/s per GPU") == steady.counted("output tok/s") == 100.0


@pytest.mark.parametrize("requests", [8, 16.5, True])  # fewer than the 16 at once, not whole, not a number
def test_a_malformed_prompt_count_is_one_line(spec, tmp_path, requests):
    doc = yaml.safe_load(spec.DATA.read_text())
    run = next(r for r in doc["runs"] if r["id"] == "v4flash-sglang-h200-gb300")
    run["arms"]["h200-ll-c16"]["requests"] = requests
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(spec.DataError, match=r"arms\.h200-ll-c16\.requests: expected the prompts the benchmark "
                                             "sent, a whole number no smaller than the concurrency"):
        spec.load(path)


def _break_even_doc(sign: int | None = -1, al_range=(1.5, 3.5)) -> dict:
    """Speculation against none on Qwen3-0.6B on one A100 (roofline), the drafting arm's AL unpublished."""
    doc = tiny_doc()
    run = doc["runs"][0]
    run["id"], run["al_range"] = "tiny-even", list(al_range)
    spec_arm = {"label": "static-3", "system": "static-3", "gamma": 3, "concurrency": 4, "al": None}
    if sign is not None:
        spec_arm["sign"] = sign
    run["arms"] = {"none": {"label": "none", "system": "ar", "concurrency": 4, "value": 1.0}, "spec": spec_arm}
    run["ab"] = [{"a": "none", "b": "spec", "kind": "spec/none", "al_from": "b"}]
    return doc


def _one(spec, tmp_path, doc):
    data = tmp_path / "runs.yaml"
    data.write_text(yaml.safe_dump(doc))
    return spec.load(data)[0]


def test_the_break_even_length_is_where_the_ratio_crosses_one(spec, tmp_path):
    """Bisection against a closed form: a gain of al / 2.5 breaks even at 2.5; asked again at the range's ends
    only where it does not cross inside; the verdict reads the predicted sign at every published length."""
    c = _one(spec, tmp_path, _break_even_doc(sign=-1))
    assert c.breaks_even and spec.missing(c) == []
    asked = []

    def ratio(al):
        asked.append(al)
        return al / 2.5

    r = spec.break_even(c, ratio)
    assert abs(r["break_even"] - 2.5) <= spec.TOLERANCE
    assert r["ratios"] == pytest.approx((1.5 / 2.5, 3.5 / 2.5)) and r["verdict"] == "open"
    assert len(asked) <= 2 + int(np.ceil(np.log2(2.0 / spec.TOLERANCE)))
    # faster at every published length: wrong against a measured loss, right against a measured gain
    for sign, verdict in ((-1, "no"), (1, "yes")):
        asked.clear()
        r = spec.break_even(_one(spec, tmp_path, _break_even_doc(sign=sign)), lambda al: al / 1.2)
        assert (r["break_even"], r["verdict"], len(asked)) == (None, verdict, 0)
    r = spec.break_even(c, lambda al: al / 9.0)
    assert r["break_even"] is None and r["verdict"] == "yes"


def test_a_comparison_without_a_range_or_a_draft_length_still_lacks_its_length(spec, tmp_path):
    doc = _break_even_doc()
    del doc["runs"][0]["al_range"]
    c = _one(spec, tmp_path, doc)
    assert not c.breaks_even and any("acceptance length not published" in ln for ln in spec.missing(c))
    doc = _break_even_doc()
    doc["runs"][0]["arms"]["spec"]["system"] = None
    c = _one(spec, tmp_path, doc)
    assert not c.breaks_even and any("draft length" in ln for ln in spec.missing(c))


@pytest.mark.parametrize("bad", [[3.0, 2.0], [1.0, 2.0], [2.0], "2-3", [True, 3.0]])
def test_a_malformed_range_is_one_line(spec, capsys, tmp_path, bad):
    doc = _break_even_doc()
    doc["runs"][0]["al_range"] = bad
    data = tmp_path / "runs.yaml"
    data.write_text(yaml.safe_dump(doc))
    assert spec.main(["--data", str(data)]) == 2
    assert capsys.readouterr().err.strip() == (f"{data}: runs[0].al_range: expected two acceptance lengths "
                                               "[low, high] with 1 < low < high")


@pytest.mark.heavy
def test_a_break_even_end_to_end(spec, capsys, tmp_path):
    """Through the script's command: the predicted ratio grows from the range's low end to its high end, and the
    printed break-even length lies between them."""
    data = tmp_path / "runs.yaml"
    data.write_text(yaml.safe_dump(_break_even_doc(sign=1, al_range=(1.2, 3.8))))
    assert spec.main(["--data", str(data), "--markdown", "--seeds", "1", "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("| tiny-even (spec/none)"))
    cells = [x.strip() for x in row.strip("|").split("|")]
    assert cells[3:5] == ["> 1", "1.2-3.8"]
    lo, hi = (float(x.rstrip("x")) for x in cells[5].split("-"))
    # slower at an AL of 1.2 (each step verifies 4 tokens for 1.2), faster at 3.8: the crossing lies between
    assert lo < 1.0 < hi
    assert 1.2 < float(cells[6]) < 3.8 and cells[7] == "open"
    assert "Break-even: the sign right at every published acceptance length on" in out


def test_a_drafters_config_reaches_the_estimate_and_keys_its_table(spec, tmp_path, monkeypatch):
    """A run whose drafter is a published checkpoint names its config beside the data (`drafter_config`): the
    estimate reads it from there, and a change to the file writes the table again."""
    k3 = next(c.run for c in spec.load() if c.run["id"] == "kimi-k3-sglang-mi350x")
    args = spec.estimate_args(k3, {})
    i = args.index("--drafter-config")
    name, _, rel = args[i + 1].partition("=")
    assert name == "dspark" and not Path(rel).is_absolute() and (ROOT / rel).is_file()
    assert yaml.safe_load((ROOT / rel).read_text())["num_hidden_layers"] == 5
    # the key follows the file's content, not only its name
    config = tmp_path / "d.json"
    monkeypatch.setattr(spec, "ROOT", tmp_path)
    config.write_text('{"num_hidden_layers": 5}')
    before = spec.table_key(["--drafter-config", "dspark=d.json"])
    assert spec.table_key(["--drafter-config", "dspark=d.json"]) == before
    config.write_text('{"num_hidden_layers": 4}')
    assert spec.table_key(["--drafter-config", "dspark=d.json"]) != before


def test_a_plan_at_the_arms_load_says_when_to_turn_speculation_off(spec):
    """The plan's rule at one load: the most output per GPU wins, so a spec-against-none ratio under 1 at every
    acceptance length reads "turn speculation off" with its margin, over 1 "speculate", and a range across 1 is
    open."""
    assert spec.speculation_call(0.8) == "turn speculation off (20% more output per GPU without it)"
    assert spec.speculation_call(0.7, 0.95) == "turn speculation off (5% more output per GPU without it)"
    assert spec.speculation_call(1.25) == "speculate (+25% or more)"
    assert spec.speculation_call(1.5, 1.1) == "speculate (+10% or more)"
    assert spec.speculation_call(0.73, 1.77) == "speculate only at the higher acceptance lengths"
