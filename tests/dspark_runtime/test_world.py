"""The tiny world end to end at smoke size: the build's stages and files, held-out splits, determinism, the eval
command's outputs (trace in the simulator's format), STS on real rollouts, and one-line errors with exit code 2."""

from __future__ import annotations

import csv
import itertools
import json

import numpy as np
import pytest
from click.testing import CliRunner

from dspark_runtime.cli import cli
from dspark_runtime.corpus import build_corpus, load_corpus
from dspark_runtime.world import SIZES
from simulator.errors import UserError


def test_build_writes_every_stage(smoke_world):
    paths, size, manifest = smoke_world
    assert set(manifest["stages"]) == {"corpus", "tokenizer", "target", "selfdistill", "drafters", "calibration"}
    assert (paths.target / "config.json").is_file() and (paths.target / "tokenizer.json").is_file()
    for kind in ("dspark", "dflash", "eagle3", "dspark-gated", "dspark-rnn"):
        assert (paths.drafter(kind) / "model.safetensors").is_file()
        has_head = kind.startswith("dspark")
        assert (paths.drafter(kind) / "calibration.json").is_file() == has_head
    cal = json.loads((paths.drafter("dspark") / "calibration.json").read_text())
    assert len(cal["temperatures"]) == size.gamma and cal["split"] == "calib" and cal["n_blocks"] > 0


@pytest.mark.slow
def test_corpus_is_deterministic_and_held_out(smoke_world):
    paths, size, _ = smoke_world
    records = load_corpus(paths.corpus)
    assert records == build_corpus(size, 0)
    assert {r.domain for r in records} == {"math", "code", "chat"}
    for bench in ("stdlib", "docstrings", "topics"):  # whole modules / topics are held out
        train = {r.group for r in records if r.benchmark == bench and r.split == "train"}
        held = {r.group for r in records if r.benchmark == bench and r.split == "eval"}
        assert held and not (train & held)
    train_prompts = {r.prompt for r in records if r.split == "train"}
    assert not any(r.prompt in train_prompts for r in records if r.split == "eval")


@pytest.mark.slow
def test_rebuild_is_cached(smoke_world):
    paths, _, _ = smoke_world
    before = (paths.drafter("dspark") / "model.safetensors").stat().st_mtime_ns
    result = CliRunner().invoke(cli, ["build-tiny", "--size", "smoke", "--data-dir", str(paths.root.parent),
                                      "--quiet", "--variants"])
    assert result.exit_code == 0, result.output
    assert (paths.drafter("dspark") / "model.safetensors").stat().st_mtime_ns == before


@pytest.mark.slow
def test_eval_writes_metrics_and_trace(smoke_world, tmp_path):
    paths, size, _ = smoke_world
    out = tmp_path / "eval"
    # no --size: the only world built under the data directory is the smoke one
    result = CliRunner().invoke(cli, ["eval", "--data-dir", str(paths.root.parent), "--quiet",
                                      "--drafters", "dspark,dflash,eagle3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    g = size.gamma
    for name in ("dspark", "dflash", "eagle3"):
        for dom in ("math", "code", "chat"):
            m = metrics["drafters"][name]["domains"][dom]
            assert 1.0 <= m["tau"] <= g + 1
            assert len(m["conditional_acceptance"]) == g
            surv = m["prefix_survival"]
            assert all(a >= b for a, b in itertools.pairwise(surv))
            assert abs(m["tau"] - 1 - sum(surv)) < 1e-9  # tau = 1 + sum of prefix survival
    dspark_math = metrics["drafters"]["dspark"]["domains"]["math"]
    assert len(dspark_math["ece_raw"]) == g and len(dspark_math["ece_calibrated"]) == g
    with open(out / "trace.csv") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0])
    assert header == (["domain", "benchmark", "drafter", "gamma", "accepted"] + [f"c_{j}" for j in range(1, g + 1)]
                      + [f"raw_{j}" for j in range(1, g + 1)])
    by = {name: [r for r in rows if r["drafter"] == name] for name in ("dspark", "dflash", "eagle3")}
    assert all(r["c_1"] and r["raw_1"] for r in by["dspark"])
    assert all(r["c_1"] == "" and r["raw_1"] == "" for r in by["dflash"] + by["eagle3"])
    assert all(0 <= int(r["accepted"]) <= g and int(r["gamma"]) == g for r in rows)
    taus = np.mean([int(r["accepted"]) + 1 for r in by["dspark"] if r["domain"] == "math"])
    assert abs(taus - dspark_math["tau"]) < 1e-9
    html = (out / "reliability_dspark.html").read_text()
    assert "plotly" in html.lower() and len(html) > 1_000_000 and "<script src=" not in html  # self-contained
    assert (out / "acceptance.html").is_file() and (out / "summary.csv").is_file()


@pytest.mark.slow
def test_user_errors_are_one_line_exit_2(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["eval", "--size", "smoke", "--data-dir", str(tmp_path), "--quiet"])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "target directory not found" in result.output
    result = runner.invoke(cli, ["build-tiny", "--size", "huge", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "--size: unknown world size 'huge'" in result.output
    result = runner.invoke(cli, ["eval", "--size", "smoke", "--drafter", str(tmp_path / "nope"),
                                 "--target", str(tmp_path)])
    assert result.exit_code == 2 and "config.json" in result.output


def test_size_to_use_finds_the_size_that_was_built(tmp_path):
    from dspark_runtime.world import size_to_use, world_paths

    with pytest.raises(UserError, match=r"--size: no tiny world is built under .*dspark build-tiny"):
        size_to_use(None, tmp_path)

    def manifest(size: str, finished: bool) -> None:
        path = world_paths(tmp_path, size).manifest
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"stages": {}, **({"total_seconds": 1.0} if finished else {})}))

    manifest("full", finished=False)  # an interrupted build does not count
    manifest("smoke", finished=True)
    assert size_to_use(None, tmp_path) == "smoke"
    manifest("full", finished=True)
    assert size_to_use(None, tmp_path) == "full"
    assert size_to_use("smoke", tmp_path) == "smoke"
    with pytest.raises(UserError, match="unknown world size 'huge'"):
        size_to_use("huge", tmp_path)


def test_world_sizes_are_consistent():
    for size in SIZES.values():
        assert max(size.target_layer_ids) <= size.target_layers - 2
        assert size.hidden_size == size.heads * size.head_dim


@pytest.mark.slow
def test_eval_of_explicit_checkpoint_directories(smoke_world, tmp_path):
    """The real-checkpoint route: a target directory and DeepSpec drafter directories given by path, dtype by flag."""
    paths, _, _ = smoke_world
    out = tmp_path / "explicit"
    result = CliRunner().invoke(cli, [
        "eval", "--size", "smoke", "--data-dir", str(paths.root.parent), "--quiet", "--target", str(paths.target),
        "--drafter", str(paths.drafter("dspark-rnn")), "--drafter", str(paths.drafter("eagle3")),
        "--dtype", "bfloat16", "--per-domain", "2", "--max-new", "8", "--out", str(out)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["drafters"]) == {"dspark-rnn", "eagle3"}
    assert metrics["settings"]["dtype"] == "bfloat16"
