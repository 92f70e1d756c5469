"""The profiler on the CPU with a tiny Qwen3: a sane table (positive, spread ordered, step time non-decreasing in B
within noise), its sidecar, skipped points, Ctrl-C, drafter and layer cuts."""

import itertools
import json

import numpy as np
import pytest

from hw_profile.errors import HwProfileError
from hw_profile.hardware.shapes import get_shape
from hw_profile.measure.profiler import ProfileConfig, combine_telemetry, point_memory_bytes, profile
from hw_profile.measure.telemetry import PointTelemetry
from hw_profile.tables.step_table import StepTable

pytest.importorskip("torch")  # the profiler module imports without it; measuring needs it


def _cfg(model, **kw):
    # one thread: on a CPU shared with other jobs, a second OpenMP thread mostly waits at barriers
    base = dict(model=str(model), requests=[1, 4, 16], tokens_per_request=[1, 4], contexts=[32, 256],
                dtype="fp32", warmup=2, repeats=7, threads=1)
    base.update(kw)
    return ProfileConfig(**base)


@pytest.mark.slow
def test_tiny_cpu_table_is_sane(tiny_config, tmp_path):
    out = tmp_path / "tiny.csv"
    lines = []
    # three passes pool each point's repeats over the run, so a burst of other work hits every point alike
    result = profile(_cfg(tiny_config, passes=3, repeats=3), out, progress=False, log=lines.append)
    assert not result.interrupted
    # one line says why, nothing crashes (beside warnings about this shared machine's load, tests/hw_profile/test_load.py)
    lines = [line for line in lines if not line.startswith("warning: machine load")]
    assert len(lines) == 1 and lines[0].startswith("no NVML telemetry")
    table = StepTable.read(out)  # what was written reads back
    pts = table.points
    assert len(pts) == 12 and (pts["status"] == "ok").all()
    assert (pts["batch_tokens"] == pts["requests"] * (pts["batch_tokens"] // pts["requests"])).all()
    assert (pts["kv_tokens"] == pts["requests"] * pts["context"]).all()
    assert (pts["step_ms"] > 0).all() and (pts["repeats"] == 9).all()
    assert (pts["step_ms_p10"] <= pts["step_ms"]).all() and (pts["step_ms"] <= pts["step_ms_p90"]).all()
    assert pts["energy_j"].isna().all() and pts["power_w"].isna().all() and (~pts["throttled"].astype(bool)).all()
    # step time is non-decreasing in B within noise: no point is faster, beyond its measured spread, than a point
    # with fewer tokens (p90 of the bigger step >= p10 of the smaller), and 64 tokens take longer than 1
    for _, g in pts.groupby("context"):
        for (_, a), (_, b) in itertools.permutations(g.iterrows(), 2):
            if b["batch_tokens"] > a["batch_tokens"]:
                assert b["step_ms_p90"] >= a["step_ms_p10"], (a.to_dict(), b.to_dict())
        by_b = g.groupby("batch_tokens")["step_ms"].median()
        assert by_b.loc[64] > by_b.loc[1]
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["kind"] == "measured" and meta["device"] == "cpu" and meta["dtype"] == "fp32"
    assert meta["model_shape"]["layers"] == 2 and meta["model_shape"]["hidden"] == 256
    assert meta["implementation"]["model_class"] == "Qwen3ForCausalLM"
    assert "perf_counter" in meta["timer"] and meta["telemetry"]["telemetry"].startswith("no NVML")
    assert meta["points_ok"] == 12 and meta["points_skipped"] == 0
    assert {"date", "command", "torch", "torch_threads", "load_average_start", "grid"} <= set(meta)


def test_points_that_do_not_fit_are_skipped_and_recorded(tiny_config, tmp_path):
    shape = get_shape(str(tiny_config))
    big = point_memory_bytes(shape, "fp32", 16, 256, 4, 4)
    small = point_memory_bytes(shape, "fp32", 16, 256, 1, 1)
    limit_gb = (big + small) / 2 / 1024**3
    result = profile(_cfg(tiny_config, requests=[16], contexts=[256], memory_limit_gb=limit_gb), tmp_path / "m.csv",
                     progress=False, log=lambda s: None)
    status = result.table.points.set_index("batch_tokens")["status"]
    assert status.loc[16] == "ok"
    assert status.loc[64].startswith("skipped: needs ~")
    back = StepTable.read(tmp_path / "m.csv")
    assert len(back.points) == 2 and len(back.ok) == 1 and back.meta["points_skipped"] == 1


def test_ctrl_c_keeps_the_points_measured_so_far(tiny_config, tmp_path):
    seen = []

    def interrupt_after_three(row):
        seen.append(row)
        if len(seen) == 3:
            raise KeyboardInterrupt

    out = tmp_path / "cut.csv"
    result = profile(_cfg(tiny_config), out, progress=False, log=lambda s: None, on_point=interrupt_after_three)
    assert result.interrupted
    back = StepTable.read(out)
    assert len(back.ok) == 3 and back.meta["interrupted"] is True
    assert any("interrupted" in m for m in result.messages)


def test_drafter_and_layer_cut_are_recorded(tiny_config, tmp_path):
    cfg = _cfg(tiny_config, requests=[2], tokens_per_request=[4], contexts=[16], repeats=2, drafter_layers=1)
    meta = profile(cfg, tmp_path / "d.csv", progress=False, log=lambda s: None).table.meta
    assert meta["kind"] == "drafter" and meta["drafter_layers"] == 1
    assert meta["model_shape"]["layers"] == 1 and meta["target_shape"]["layers"] == 2
    cfg = _cfg(tiny_config, requests=[2], tokens_per_request=[1], contexts=[16], repeats=2, layers=1)
    meta = profile(cfg, tmp_path / "l.csv", progress=False, log=lambda s: None).table.meta
    assert meta["kind"] == "measured" and meta["layers_override"] == 1 and meta["model_shape"]["layers"] == 1


def test_passes_pool_the_repeats(tiny_config, tmp_path):
    cfg = _cfg(tiny_config, requests=[1, 2], tokens_per_request=[2], contexts=[16], repeats=3, passes=2)
    result = profile(cfg, tmp_path / "p.csv", progress=False, log=lambda s: None)
    assert (result.table.points["repeats"] == 6).all() and result.table.meta["passes"] == 2


def test_telemetry_of_several_passes_combines():
    a = PointTelemetry(sm_clock_mhz=1800, mem_clock_mhz=3200, power_w=400, temp_c=60, util_pct=90, reasons_mask=0,
                       energy_j=4.0, duration_s=1.0)
    b = PointTelemetry(sm_clock_mhz=1600, mem_clock_mhz=3200, power_w=700, temp_c=75, util_pct=100,
                       reasons_mask=0x4, energy_j=14.0, duration_s=2.0)
    cols = combine_telemetry([(a, 10), (b, 20)])
    assert cols["sm_clock_mhz"] == 1700 and cols["temp_c"] == 75
    assert cols["power_w"] == pytest.approx((400 * 1 + 700 * 2) / 3)  # averaged over time
    assert cols["energy_j"] == pytest.approx(18.0 / 30)  # joules per step over both windows
    assert cols["throttled"] is True and cols["throttle_reasons"] == "sw_power_cap"
    assert np.isnan(combine_telemetry([(PointTelemetry(), 5), (PointTelemetry(), 5)])["energy_j"])


def test_user_mistakes_name_the_flag(tiny_config, tmp_path):
    with pytest.raises(HwProfileError, match="--tokens-per-request"):
        profile(_cfg(tiny_config, tokens_per_request=[0]), tmp_path / "x.csv", progress=False)
    with pytest.raises(HwProfileError, match="--model"):
        profile(_cfg("no-such-model"), tmp_path / "x.csv", progress=False)
    with pytest.raises(HwProfileError, match="--layers N"):
        profile(_cfg("deepseek-v3"), tmp_path / "x.csv", progress=False)  # 671B parameters do not fit here
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.gpu
def test_cuda_profile_uses_events_and_telemetry(tiny_config, tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    cfg = _cfg(tiny_config, device="cuda", dtype="bf16", repeats=20, min_time_s=0.2, threads=None)
    result = profile(cfg, tmp_path / "g.csv", progress=False, log=lambda s: None)
    meta = result.table.meta
    assert "CUDA events" in meta["timer"]
    pts = result.table.ok
    assert (pts["step_ms"] > 0).all()
    if meta["telemetry"]["telemetry"] == "nvml":
        assert np.isfinite(pts["sm_clock_mhz"]).all() and np.isfinite(pts["energy_j"]).all()


TINY_DEEPSEEK = {  # DeepSeek-V3's architecture (MLA + routed/shared experts, first layer dense) at toy width
    "model_type": "deepseek_v3", "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "n_shared_experts": 1,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "kv_lora_rank": 32,
    "q_lora_rank": 48, "qk_rope_head_dim": 16, "v_head_dim": 32, "qk_nope_head_dim": 32, "vocab_size": 1024,
    "n_group": 1, "topk_group": 1,
}
TINY_GEMMA3 = {
    "model_type": "gemma3_text", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1024, "sliding_window": 16,
    "sliding_window_pattern": 3, "query_pre_attn_scalar": 32, "tie_word_embeddings": True,
}


@pytest.mark.parametrize("config, moe", [(TINY_DEEPSEEK, True), (TINY_GEMMA3, False)])
def test_moe_mla_and_sliding_window_models_profile(config, moe, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    cfg = _cfg(path, requests=[2], tokens_per_request=[1, 4], contexts=[8, 40], repeats=2, warmup=1)
    result = profile(cfg, tmp_path / "m.csv", progress=False, log=lambda s: None)
    assert (result.table.points["status"] == "ok").all() and (result.table.points["step_ms"] > 0).all()
    meta = result.table.meta
    assert ("experts_implementation" in meta["implementation"]) == moe
    assert meta["model_shape"]["family"] == config["model_type"]
    drafter = profile(_cfg(path, requests=[2], tokens_per_request=[4], contexts=[8], repeats=1, warmup=1,
                           drafter_layers=1), tmp_path / "d.csv", progress=False, log=lambda s: None)
    # a drafter layer is built like the target's: an MoE target's keeps its experts, and the profiler builds it
    assert drafter.table.meta["model_shape"].get("experts", 0) == meta["model_shape"].get("experts", 0)
    assert ("experts_implementation" in drafter.table.meta["implementation"]) == moe


@pytest.mark.heavy
@pytest.mark.parametrize("signame, code, word", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_a_stop_keeps_the_points(tiny_config, tmp_path, signame, code, word):
    """A real Ctrl-C (SIGINT) or a scheduler's SIGTERM (what `timeout` sends) to the CLI mid-run: exit code 130 or
    143, the table on disk holds the measured points and a whole sidecar (its timer and elapsed time too)."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    out = tmp_path / "sig.csv"
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "hw_profile.cli", "sps", "--model", str(tiny_config), "--dtype", "fp32",
         "--requests", "1..64", "--tokens-per-request", "1,2,4,8", "--context", "16,64,256", "--repeats", "50",
         "--threads", "1", "--quiet", "--out", str(out)],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(repo)},
        # a shell without job control starts background commands with SIGINT ignored, and the child would inherit
        # that: give it the default disposition, as a terminal's Ctrl-C target has
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline and not (out.is_file() and len(out.read_text().splitlines()) >= 3):
        time.sleep(0.2)
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert word in err and "Traceback" not in err
    table = StepTable.read(out)
    assert len(table.ok) >= 2 and table.meta["interrupted"] is True
    assert table.meta["timer"].startswith("time.perf_counter") and table.meta["elapsed_s"] > 0


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_progress_says_points_done_of_all_and_the_time_left_at_the_timed_pace():
    import io

    from hw_profile.measure.progress import PointProgress, duration

    assert [duration(s) for s in (45, 72, 168, 7500)] == ["45s", "1m12s", "2m48s", "2h05m"]
    clock, out = Clock(), io.StringIO()
    bar = PointProgress(120, "qwen3-8b", out, every_s=30.0, clock=clock)
    for _ in range(36):  # 36 points timed at 2 s each
        clock.t += 2.0
        bar.update()
    # a line at most every 30 s: at 30, 60 s; 84 points left at 2 s each = 168 s
    assert out.getvalue().splitlines() == ["sps qwen3-8b: 15/120 points, 30s elapsed, about 3m30s left",
                                           "sps qwen3-8b: 30/120 points, 1m00s elapsed, about 3m00s left"]
    assert bar.line() == "sps qwen3-8b: 36/120 points, 1m12s elapsed, about 2m48s left"
    # 24 points skipped (too big for the memory) take no time: done, but not in the pace (2 s a timed point)
    bar.update(24, timed=False)
    assert bar.line() == "sps qwen3-8b: 60/120 points, 1m12s elapsed, about 2m00s left"
    clock.t += 50.0  # building the next point's cache, then timing it: charged to that point
    bar.update()
    assert bar.left_s() == pytest.approx(59 * 122 / 37)
    bar.close()
    assert out.getvalue().splitlines()[-1] == "sps qwen3-8b: 61/120 points, 2m02s elapsed, about 3m15s left"
    # several passes: named; nothing timed yet: no time left said; all done: none either
    passes = PointProgress(12, "tiny", io.StringIO(), clock=clock, per_pass=4)
    assert passes.line() == "sps tiny: 0/12 points (3 passes of 4), 0s elapsed"
    passes.update(12, timed=False)
    assert passes.line() == "sps tiny: 12/12 points (3 passes of 4), 0s elapsed"


def test_a_real_profile_reports_every_point_off_a_terminal(tiny_config, tmp_path):
    """The profiler on the CPU, its progress to a stream that is not a terminal and every point's line let through:
    one line per point, done counting up to all of them, the last without a time left."""
    import io
    import re

    out = io.StringIO()
    cfg = _cfg(tiny_config, requests=[1, 2], tokens_per_request=[1], contexts=[16], repeats=2, warmup=1, passes=2)
    result = profile(cfg, tmp_path / "p.csv", log=lambda s: None, progress_stream=out, progress_every_s=0.0)
    assert len(result.table.ok) == 2
    lines = out.getvalue().splitlines()
    done = [re.fullmatch(r"sps tiny-qwen3: (\d)/4 points \(2 passes of 2\), \d+s elapsed(, about \d+s left)?", line)
            for line in lines]
    assert all(done), lines
    assert [int(m.group(1)) for m in done] == [1, 2, 3, 4, 4]  # the last again at the end
    assert all(m.group(2) for m in done[:3]) and not done[3].group(2) and not done[4].group(2)
