"""Real checkpoints in the loop: a live run whose target is a transformers directory written with
``save_pretrained`` (a randomly initialised tiny Qwen3), whose drafter is a DeepSpec-format checkpoint (with its
confidence head and calibration) and whose prompts come from a JSONL file -- lossless at temperature 0, bad
paths one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from dspark_runtime.build import drafter_config
from dspark_runtime.checkpoints import save_drafter
from dspark_runtime.drafters import build_drafter
from dspark_runtime.live.checkpoints import read_prompts
from dspark_runtime.rollouts import encode_prompts
from dspark_runtime.target import load_target, save_target
from dspark_runtime.world import SIZES
from simulator.core.invariants import check_invariants
from tests.dspark_runtime.conftest import randomize
from tests.dspark_runtime.test_live import _one_line_error, greedy, run, simulate

H200 = Path(__file__).resolve().parents[2] / "scenarios" / "hardware" / "h200-qwen3-8b-bf16.csv"
PROMPTS = [("math", "arith", "What is 17 plus 25?"), ("math", "word", "Tom has 3 apples and buys 4 more."),
           ("code", "stdlib", "def add(a, b):"), ("code", "stdlib", "Sort a list in Python."),
           ("chat", "topics", "Tell me about rivers."), ("chat", "topics", "Why is the sky blue?")]


@pytest.fixture(scope="module")
def checkpoints(smoke_world, tmp_path_factory):
    """A random tiny Qwen3 (save_pretrained, the smoke world's tokenizer), a random DeepSpec-format DSpark drafter
    for it, and a prompts file."""
    from transformers import AutoModelForCausalLM

    paths, _, _ = smoke_world
    root = tmp_path_factory.mktemp("checkpoints")
    smoke_target, tokenizer = load_target(paths.target)
    cfg = smoke_target.config
    torch.manual_seed(7)
    target = randomize(AutoModelForCausalLM.from_config(cfg), seed=7, std=0.2)
    save_target(target, paths.target / "tokenizer.json", root / "target")
    dcfg = drafter_config("dspark", SIZES["smoke"], cfg, tokenizer.mask_token_id)
    drafter = randomize(build_drafter(dcfg), seed=8, std=0.2)
    save_drafter(drafter, root / "drafter", calibration={"temperatures": [1.5] * dcfg.block_size})
    with (root / "prompts.jsonl").open("w") as f:
        for domain, bench, text in PROMPTS:
            f.write(json.dumps({"prompt": text, "domain": domain, "benchmark": bench}) + "\n")
    return root, dcfg.block_size


def scenario(tmp_path: Path, acceptance: dict, gamma: int, name: str = "ckpt", **over) -> Path:
    doc = {
        "hardware": {"table": str(H200)},
        "engine": {"max_running": 4, "max_batch_tokens": 2048, "kv_capacity_tokens": 160},
        "acceptance": {"source": "live", "temperature": 0.0, "options": {"keep_outputs": True}, **acceptance},
        "drafter": {"name": "dspark", "gamma": gamma},
        "systems": ["dspark"],
        "workload": {"mix": {"math": 1, "code": 1, "chat": 1}, "prompt": 32,
                     "output": {"dist": "uniform", "low": 4, "high": 16}},
        "frontier": {"concurrency": [5]},
        "run": {"duration_s": 0.25, "warmup_s": 0.01},
        **over,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.heavy
def test_temperature_zero_with_checkpoints_is_the_targets_greedy_decoding(checkpoints, tmp_path):
    root, gamma = checkpoints
    acc = {"target": str(root / "target"), "drafter_checkpoint": str(root / "drafter"),
           "prompts": str(root / "prompts.jsonl")}
    _, sim = run(scenario(tmp_path, acc, gamma))
    check_invariants(sim)
    src = sim.source
    assert src.meta["runtime"] == str(root / "target") and src.world.drafter is not None
    assert src.calibrated and np.allclose(src.world.temperatures, 1.5)  # the checkpoint's calibration was read
    target, tokenizer = load_target(root / "target")
    req = sim.requests.frame()
    done = [rid for rid in src.outputs if not np.isnan(req["finish"][rid])]
    assert len(done) >= 5 and sim.preemptions > 0  # a 160-token cache for 5 users forces recomputes
    prompts = [src.prompt_of(rid) for rid in done]
    encoded = {tuple(t) for t in encode_prompts(tokenizer, read_prompts(root / "prompts.jsonl", "test"))}
    assert all(tuple(p) in encoded for p in prompts)  # the file's prompts, framed as the tiny world's are
    want = greedy(target, prompts, 16, tokenizer.eos_token_id)
    for rid, ref in zip(done, want, strict=True):
        got = src.outputs[rid]
        assert got == ref[: len(got)], f"request {rid}: {got} != greedy {ref}"
        assert len(got) == req["generated"][rid]


@pytest.mark.heavy
def test_bad_checkpoint_paths_are_one_line(checkpoints, tmp_path):
    root, gamma = checkpoints
    good = {"target": str(root / "target"), "drafter_checkpoint": str(root / "drafter"),
            "prompts": str(root / "prompts.jsonl")}
    missing = scenario(tmp_path, {**good, "prompts": str(tmp_path / "none.jsonl")}, gamma, "missing")
    _one_line_error(simulate("check", str(missing)), "prompts", "none.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"prompt": "hi", "domain": "math"}\n{"prompt": 3}\n')
    bad = scenario(tmp_path, {**good, "prompts": str(tmp_path / "bad.jsonl")}, gamma, "bad")
    _one_line_error(simulate("check", str(bad)), "bad.jsonl: line 2", "prompt")
    alone = scenario(tmp_path, {"prompts": good["prompts"]}, gamma, "alone")
    _one_line_error(simulate("check", str(alone)), "target")
    mix = scenario(tmp_path, good, gamma, "mix", workload={"mix": {"poetry": 1}, "prompt": 32, "output": 8})
    _one_line_error(simulate("check", str(mix)), "poetry", "math")
