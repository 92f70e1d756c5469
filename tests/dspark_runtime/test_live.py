"""Hardware in the loop on the smoke world: the live source drives the engine with real drafting and verification.

- lossless end to end: at temperature 0 every request's tokens are the target's own greedy decoding of its prompt
  (with the dspark policy, several concurrent requests, and recompute preemptions forced by a small KV cache); at
  temperature 1 the emitted tokens follow the target's law (chi-square against the exact marginals);
- the engine's token counts equal the real sequences' lengths (EOS ends a request);
- record -> replay -> fit: a live run's recorded trace replayed by ``source: trace`` and the profile fitted to it
  agree with the live run on tau per domain and throughput per GPU (within 5%);
- ``clock: live`` charges measured time and writes a readable step-time table;
- bad input: one line, exit code 2.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from dspark_runtime.chi_square import goodness_of_fit
from simulator.core.invariants import check_invariants
from simulator.inputs.config import load_scenario
from simulator.inputs.systems import resolve_systems
from simulator.runs.run import LoadPoint, RunSpec, run_one

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "scenarios" / "hardware" / "h200-qwen3-8b-bf16.csv"


def live_scenario(tmp_path: Path, world_root: Path, name: str = "live", **over) -> Path:
    doc = {
        "hardware": {"table": str(H200)},
        "engine": {"max_running": 8, "max_batch_tokens": 2048},
        "acceptance": {"source": "live", "runtime": str(world_root), "temperature": 0.0},
        "systems": ["dspark"],
        "workload": {"mix": {"math": 1, "code": 1, "chat": 1}, "prompt": 32, "output": {"dist": "uniform", "low": 4, "high": 20}},
        "frontier": {"concurrency": [6]},
        "run": {"duration_s": 0.25, "warmup_s": 0.01},
    }
    for key, value in over.items():
        node = doc
        *path, last = key.split(".")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run(path: Path, system: int = 0, records: Path | None = None, seed: int = 0):
    scn = load_scenario(path)
    spec = RunSpec(resolve_systems(scn)[system], LoadPoint(scn.model.frontier.concurrency[0]), seed, False)
    return run_one(scn, spec, records)


def greedy(target, prompts: list[list[int]], steps: int, eos: int) -> list[list[int]]:
    """The target's own greedy continuation of each prompt, one token at a time (no cache, no batching)."""
    out = []
    for p in prompts:
        seq = list(p)
        for _ in range(steps):
            with torch.no_grad():
                nxt = int(target(torch.tensor([seq])).logits[0, -1].argmax())
            seq.append(nxt)
            if nxt == eos:
                break
        out.append(seq[len(p):])
    return out


@pytest.mark.heavy
@pytest.mark.parametrize("prefill", ["colocated", "disaggregated"])
def test_temperature_zero_is_the_targets_greedy_decoding_with_preemptions(smoke_world, smoke_models, tmp_path,
                                                                          prefill):
    paths, _, _ = smoke_world
    target, _, tokenizer = smoke_models
    # a KV cache of 200 tokens for 6 users of 32 + up to 20 tokens (+ 8 lookahead) forces recompute preemptions;
    # disaggregated, some are evicted before their first decode here (the pool emitted their first token)
    path = live_scenario(tmp_path, paths.root, **{"engine.kv_capacity_tokens": 200, "engine.prefill": prefill,
                                                  "acceptance.options": {"keep_outputs": True}})
    _, sim = run(path, records=tmp_path / "rec")  # recording: the whole-block forward runs too, untimed
    check_invariants(sim)
    src = sim.source
    assert (tmp_path / "rec" / "live__dspark__closed-6__seed0.trace.csv").is_file()
    # drafts were verified every step (the smoke drafter rarely matches the smoke target's argmax, so the
    # corrections are what this checks here; the temperature-1 test below checks accepted drafts)
    # (the whole run's count: runs.csv counts only the measurement window's requests)
    assert sim.preemptions > 0 and sim.steps.frame()["verified"].sum() > 0
    req = sim.requests.frame()
    done = [rid for rid in src.outputs if not np.isnan(req["finish"][rid])]
    assert len(done) >= 6
    prompts = [src.prompt_of(rid) for rid in done]
    want = greedy(target, prompts, 20, tokenizer.eos_token_id)
    for rid, ref in zip(done, want, strict=True):
        got = src.outputs[rid]
        assert got == ref[: len(got)], f"request {rid}: {got} != greedy {ref}"
        assert len(got) == req["generated"][rid]  # the engine counted exactly the real tokens
        ended_at_eos = got[-1] == tokenizer.eos_token_id
        assert ended_at_eos or len(got) == req["output"][rid]


@pytest.mark.heavy
def test_disaggregated_a_first_token_at_eos_ends_the_request_with_that_token_alone(smoke_world, smoke_models,
                                                                                      tmp_path):
    """The pool's first token is sampled when the pool finishes: an end token there ends the request with one
    token, and every request's count is its real length. The end token is set (``eos_token_id``) to the token the
    smoke target most often emits first at temperature 0, so that the case happens (the colocated and
    disaggregated greedy test above checks requests that decode on)."""
    from collections import Counter

    from dspark_runtime.live.world import load_world

    paths, _, _ = smoke_world
    target, _, _ = smoke_models
    world = load_world(str(paths.root), "dspark", "cpu", "float32")
    prompts = [t for key in ("math", "code", "chat") for _, t in world.prompts[key]]
    firsts = Counter(g[0] for g in greedy(target, prompts, 1, -1))
    eos, count = firsts.most_common(1)[0]
    assert count > 0  # (on the smoke world every prompt's greedy first token is the same one)
    path = live_scenario(tmp_path, paths.root, **{"engine.prefill": "disaggregated",
                                                  "acceptance.options": {"keep_outputs": True, "eos_token_id": eos}})
    _, sim = run(path)
    check_invariants(sim)
    src, req = sim.source, sim.requests.frame()
    done = [rid for rid in src.outputs if not np.isnan(req["finish"][rid])]
    want = greedy(target, [src.prompt_of(rid) for rid in done], 20, eos)
    one = 0
    for rid, ref in zip(done, want, strict=True):
        got = src.outputs[rid]
        assert got == ref[: len(got)], f"request {rid}: {got} != greedy {ref}"
        assert len(got) == req["generated"][rid] == req["output"][rid] or got[-1] != eos
        one += got == [eos]
    assert one >= 1 and all(req["generated"][rid] == len(src.outputs[rid]) for rid in done)


def exact_marginals(target, prompt: list[int], vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """P(token 2) and P(token 3) of the target's sampling at temperature 1, enumerated exactly."""
    with torch.no_grad():
        p1 = torch.softmax(target(torch.tensor([prompt])).logits[0, -1].double(), -1)
        seqs = torch.tensor([[*prompt, t] for t in range(vocab)])
        p2_given = torch.softmax(target(seqs).logits[:, -1].double(), -1)  # (t1, t2)
        joint12 = p1[:, None] * p2_given
        p3 = torch.zeros(vocab, dtype=torch.float64)
        for t1 in torch.nonzero(p1 > 1e-6).flatten().tolist():  # the support of token 1, batched over token 2
            seqs = torch.tensor([[*prompt, t1, t2] for t2 in range(vocab)])
            p3 += (joint12[t1][:, None] * torch.softmax(target(seqs).logits[:, -1].double(), -1)).sum(0)
    return joint12.sum(0).numpy(), p3.numpy()


@pytest.mark.heavy
def test_temperature_one_tokens_follow_the_target(smoke_world, smoke_models, tmp_path):
    paths, _, _ = smoke_world
    target, _, _ = smoke_models
    # every request: the same math prompt, three tokens (a prefill token, then one step verifying up to one
    # draft token and a correction or bonus): tokens 2 and 3 come from rejection sampling under the dspark policy
    path = live_scenario(tmp_path, paths.root, **{
        "acceptance.temperature": 1.0, "acceptance.options": {"keep_outputs": True, "prompts_per_entry": 1},
        "workload.mix": {"math": 1}, "workload.output": 3, "frontier.concurrency": [16],
        "run.duration_s": 3.0})
    row, sim = run(path)
    src = sim.source
    outs = [o for o in src.outputs.values() if len(o) == 3]
    assert len(outs) > 1500
    prompt = src.pools[0][0][1]
    vocab = target.config.vocab_size
    p2, p3 = exact_marginals(target, prompt, vocab)
    tok2 = np.bincount([o[1] for o in outs], minlength=vocab)
    tok3 = np.bincount([o[2] for o in outs], minlength=vocab)
    assert goodness_of_fit(tok2, p2) > 1e-3
    assert goodness_of_fit(tok3, p3) > 1e-3
    assert row["tau"] > 1.0  # drafts were accepted: the test is not plain decoding


def _tau(row: dict, key: str) -> float:
    return float(row["tau_by_mix"][key])


@pytest.mark.heavy
def test_live_trace_and_fitted_profile_agree(smoke_world, tmp_path):
    """One scenario under live, under its own recorded trace, and under the profile fitted to that trace."""
    from simulator.core.acceptance.trace_fit import fit_profile_file

    paths, _, _ = smoke_world
    # ignore_eos: replays do not know where a real sequence ends, so every run keeps its drawn lengths
    over = {"acceptance.temperature": 1.0, "acceptance.ignore_eos": True, "frontier.concurrency": [8], "run.duration_s": 2.0,
            "run.warmup_s": 0.2, "workload.output": 64, "workload.prompt": 64, "engine.max_running": 8}
    live_path = live_scenario(tmp_path, paths.root, "live", systems=["static-3"], **over)
    rec = tmp_path / "rec"
    live_row, _ = run(live_path, records=rec)
    traces = sorted(rec.glob("*.trace.csv"))
    assert len(traces) == 1
    trace_path = live_scenario(tmp_path, paths.root, "trace", systems=["static-3"], **over,
                               acceptance={"source": "trace", "trace": str(traces[0])})
    trace_row, _ = run(trace_path, seed=1)
    fit_profile_file(traces[0], tmp_path / "fitted.yaml")
    prof_path = live_scenario(tmp_path, paths.root, "profile", systems=["static-3"], **over,
                              acceptance={"source": "profile", "profile": str(tmp_path / "fitted.yaml")})
    prof_row, _ = run(prof_path, seed=2)
    assert_agrees_with_live(live_row, trace_row, prof_row)


def assert_agrees_with_live(live_row, *others):
    """Every domain's tau and the throughput of each replay within 5% of live's."""
    for other in others:
        for key in ("math", "code", "chat"):
            assert _tau(other, key) == pytest.approx(_tau(live_row, key), rel=0.05)
        assert other["throughput_per_gpu"] == pytest.approx(live_row["throughput_per_gpu"], rel=0.05)


def _finished(sim) -> pd.DataFrame:
    req = pd.DataFrame(sim.requests.frame())
    return req[req["finish"].notna()]


@pytest.mark.heavy
def test_with_eos_the_trace_records_where_requests_ended_and_replays_end_them_there(smoke_world, tmp_path):
    """EOS on: the trace's ``output``/``eos`` are the live request log's; a replay of the same scenario and seed
    ends every recorded request exactly where live ended it; trace and fitted-profile replays agree with live."""
    from simulator.core.acceptance.trace_fit import fit_profile_file

    paths, _, _ = smoke_world
    over = {"acceptance.temperature": 1.0, "frontier.concurrency": [8], "run.duration_s": 2.0, "run.warmup_s": 0.2,
            "workload.output": {"dist": "uniform", "low": 8, "high": 160}, "workload.prompt": 64,
            "engine.max_running": 8}
    live_path = live_scenario(tmp_path, paths.root, "live", systems=["static-3"], **over)
    rec = tmp_path / "rec"
    live_row, live_sim = run(live_path, records=rec)
    trace = next(rec.glob("*.trace.csv"))
    ends = pd.read_csv(trace).drop_duplicates("request").set_index("request")
    live = _finished(live_sim)
    common = ends.index.intersection(live.index)
    assert len(common) > 20 and ends.loc[common, "eos"].sum() >= 3  # requests did end at their end token
    assert (ends.loc[common, "output"] == live.loc[common, "output"]).all()
    trace_path = live_scenario(tmp_path, paths.root, "trace", systems=["static-3"], **over,
                               acceptance={"source": "trace", "trace": str(trace)})
    trace_row, trace_sim = run(trace_path, seed=0)
    replay = _finished(trace_sim)
    both = common.intersection(replay.index)
    assert len(both) > 20
    assert (replay.loc[both, "output"] == live.loc[both, "output"]).all()
    fitted = fit_profile_file(trace, tmp_path / "fitted.yaml")
    assert set(fitted["ends"]) == {"math", "code", "chat"}
    prof_path = live_scenario(tmp_path, paths.root, "profile", systems=["static-3"], **over,
                              acceptance={"source": "profile", "profile": str(tmp_path / "fitted.yaml")})
    prof_row, _ = run(prof_path, seed=0)
    assert_agrees_with_live(live_row, trace_row, prof_row)


@pytest.mark.slow
def test_live_clock_charges_measured_time_and_writes_a_table(smoke_world, tmp_path):
    import pandas as pd

    from hw_profile.tables.step_table import StepTable
    from simulator.outputs.live_tables import write_live_tables

    paths, _, _ = smoke_world
    # under the live clock a simulated second is a second of real forwards: long enough for several steps on a
    # busy machine
    path = live_scenario(tmp_path, paths.root, systems=["ar", "static-3"],
                         **{"hardware.clock": "live", "run.duration_s": 4.0, "run.warmup_s": 0.5})
    rows = []
    for system in (0, 1):
        row, sim = run(path, system)
        steps = sim.steps.frame()
        # the clock is the measured forwards: no table lookup gives these step times
        assert row["clock"] == "live" and row["acceptance_source"] == "live"
        assert (steps["step_ms"] > 0).all() and len(steps["step_ms"]) > 2
        rows.append(row)
    written = write_live_tables(tmp_path / "out", pd.DataFrame(rows))
    assert len(written) == 2
    for table_path in written:
        table = StepTable.read(table_path)
        assert table.meta["kind"] == "live" and table.grid.step_ms(8, 100) > 0
    spec_table = StepTable.read(written[1])
    assert "dspark" in spec_table.meta["drafter_tables"]


def simulate(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-c", "from simulator.cli import main; main()", *args],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})}, timeout=300)


def _one_line_error(res: subprocess.CompletedProcess, *words: str) -> None:
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.heavy
def test_bad_input_is_one_line(smoke_world, tmp_path):
    paths, _, _ = smoke_world
    missing = live_scenario(tmp_path, tmp_path / "no-world", "missing")
    _one_line_error(simulate("check", str(missing)), "runtime", "build-tiny")
    cuda = live_scenario(tmp_path, paths.root, "cuda", **{"acceptance.device": "cuda"})
    if not torch.cuda.is_available():
        _one_line_error(simulate("check", str(cuda)), "device", "CUDA")
    # torch absent: a stand-in torch package that cannot be imported shadows the real one
    fake = tmp_path / "no-torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    ok = live_scenario(tmp_path, paths.root, "ok")
    import os

    pythonpath = os.pathsep.join([str(fake.parent), str(ROOT)])
    _one_line_error(simulate("check", str(ok), env={"PYTHONPATH": pythonpath}), "runtime extra")
    profile = live_scenario(tmp_path, paths.root, "table-live", **{"hardware.clock": "live"},
                            acceptance={"source": "profile"})
    _one_line_error(simulate("check", str(profile)), "hardware.clock")


@pytest.mark.slow
@pytest.mark.parametrize("module", ["transformers", "tokenizers", "safetensors"])
def test_a_missing_runtime_dependency_is_one_line(module, tmp_path):
    """torch present, another runtime module absent (a stand-in package that cannot be imported shadows it): the
    shipped live scenario fails its check with one line naming the module and the extra, before any world is
    touched."""
    import os

    fake = tmp_path / "missing" / module
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"raise ImportError(\"No module named '{module}'\")\n")
    pythonpath = os.pathsep.join([str(fake.parent), str(ROOT)])
    res = simulate("check", str(ROOT / "scenarios" / "hil-tiny.yaml"), env={"PYTHONPATH": pythonpath})
    _one_line_error(res, module, "runtime extra", "dspark-sim[runtime]")


def test_the_live_modules_are_those_of_the_runtime_extra():
    """The one-line error tells the user to install the runtime extra: every module it checks must be in it."""
    import re
    import tomllib

    from dspark_runtime.live import NEEDS

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["runtime"]
    names = {re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0] for req in extra}
    assert set(NEEDS) <= names, set(NEEDS) - names
