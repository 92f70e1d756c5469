"""Measure a step-time table T(B, K) by timing real verification forwards (``hw-profile sps``).

For every context length c, request count R and tokens per request t (B = R x t new tokens, K = R x c KV tokens):
one forward of a real transformers model of the target's shape (random weights) over R sequences of t tokens that
attend to a KV cache of c tokens each. Per point:

1. memory check: a point whose KV cache and activations would not fit is skipped and recorded as
   ``skipped: needs ~X GiB, Y GiB free`` (on a GPU an out-of-memory error is caught and recorded the same way);
2. warm-up forwards (caches, allocator, kernel selection), then ``repeats`` timed forwards, more when
   ``min_time_s`` asks for a longer window (energy counters need one);
3. timing: on a GPU, CUDA events around each replay of a CUDA graph of the step (no launch gaps from Python; if
   the model cannot be captured the events time eager forwards, and the sidecar says so); on the CPU,
   ``time.perf_counter`` around each forward (CPU ops are synchronous);
4. the median is ``step_ms``, the 10th and 90th percentiles ``step_ms_p10``/``step_ms_p90``;
5. NVML telemetry over the timed window; a point whose window saw a throttling reason is measured again after a
   pause, at most ``throttle_retries`` times, and keeps ``throttled = True`` if it never ran clean;
6. on the CPU, the machine's load before the run and after every point, and the spread of the repeats
   (``hw_profile.measure.load``): recorded in the sidecar (``machine_load``), and a warning line when either is high.

A drafter (``drafter_layers``) with ``markov_rank`` > 0 is a DSpark drafter: after the grid its per-position
Markov and confidence heads are timed too (``hw_profile.measure.head_timing``), into the sidecar's ``sequential_head``.
While the grid runs, the points done of all and about how long is left go to stderr (``hw_profile.measure.progress``).

The table (CSV + JSON sidecar, ``hw_profile.tables.step_table``) is rewritten atomically after every point, so Ctrl-C (or a
crash) keeps every point measured so far; the sidecar then says ``interrupted``.

The machine's own settings are never changed: no clock locking, no power limits (NVML is only read).
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from hw_profile.errors import HwProfileError
from hw_profile.hardware.gpus import named_gpu
from hw_profile.hardware.shapes import ModelShape, drafter_shape, get_shape, read_config, with_layers
from hw_profile.kernels.roofline import stored_weight_bytes_per_gpu
from hw_profile.measure.load import LoadWatch, relative_spread
from hw_profile.measure.progress import NoProgress, PointProgress
from hw_profile.measure.telemetry import NvmlSampler, PointTelemetry
from hw_profile.tables.sidecar import memory_fields
from hw_profile.tables.step_table import StepTable, table_meta
from hw_profile.tables.table_set import TableSet

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
GIB = 1024**3


@dataclass
class ProfileConfig:
    model: str  # a built-in shape name or a config.json path
    requests: list[int]
    tokens_per_request: list[int]
    contexts: list[int]
    device: str = "cpu"
    dtype: str = "bf16"
    layers: int | None = None  # time the first N layers only (recorded in the sidecar)
    drafter_layers: int | None = None  # time a drafter of the target's width with N layers instead
    markov_rank: int = 0  # with drafter_layers: also time DSpark's rank-R Markov and confidence heads (0: no)
    warmup: int = 3
    repeats: int = 10  # timed forwards per point and pass
    passes: int = 1  # sweeps over the whole grid; a point's repeats from every pass are pooled (spreads the bursts
    #                  of other jobs on a shared machine over all points instead of a few neighbours)
    min_time_s: float = 0.0  # per point: raise the repeats until the timed window lasts this long
    max_repeats: int = 1000
    throttle_retries: int = 2
    throttle_pause_s: float = 5.0
    memory_limit_gb: float | None = None  # cap on one point's KV cache + activations
    threads: int | None = None  # CPU threads for torch (default: torch's own choice)
    cuda_graphs: bool = True
    attention: str = "sdpa"  # model_builder.ATTENTION
    seed: int = 0
    name: str | None = None
    note: str | None = None  # free text for the sidecar (e.g. "machine shared with other jobs")
    command: str | None = None  # the command line for the sidecar (default: sys.argv)

    def validate(self) -> None:
        for flag, values in (("--requests", self.requests), ("--tokens-per-request", self.tokens_per_request),
                             ("--context", self.contexts)):
            if not values:
                raise HwProfileError(f"{flag}: expected at least one value")
            bad = [v for v in values if v < (0 if flag == "--context" else 1)]
            if bad:
                raise HwProfileError(f"{flag}: expected {'non-negative' if flag == '--context' else 'positive'} "
                                     f"integers, got {bad[0]}")
        from hw_profile.measure.model_builder import ATTENTION

        if self.attention not in ATTENTION:
            raise HwProfileError(f"--attn: expected one of {', '.join(ATTENTION)}, got {self.attention!r}")
        if self.device not in ("cpu", "cuda"):
            raise HwProfileError(f"--device: expected cpu or cuda, got {self.device!r}")
        if self.dtype not in DTYPE_BYTES:
            raise HwProfileError(f"--dtype: expected one of {', '.join(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.passes < 1:
            raise HwProfileError(f"--passes: expected a positive integer, got {self.passes}")
        if self.markov_rank < 0:
            raise HwProfileError(f"--markov-rank: expected a rank >= 0, got {self.markov_rank}")
        if self.warmup < 0 or self.repeats < 1:
            raise HwProfileError(f"--warmup/--repeats: expected warmup >= 0 and repeats >= 1, got {self.warmup}, "
                                 f"{self.repeats}")


@dataclass
class ProfileResult:
    table: StepTable
    path: Path
    interrupted: bool = False
    messages: list[str] = field(default_factory=list)


def resolve_shape(cfg: ProfileConfig) -> tuple[ModelShape, ModelShape, dict | None]:
    """(the shape timed, the full target shape, the config.json dict when one was given)."""
    base = None
    try:
        target = get_shape(cfg.model)
    except KeyError as exc:
        raise HwProfileError(f"--model: {exc.args[0]}") from None
    if str(cfg.model).endswith(".json"):
        base = read_config(cfg.model)
    timed = target
    if cfg.drafter_layers is not None:
        if cfg.drafter_layers < 1:
            raise HwProfileError(f"--drafter-layers: expected a positive number of layers, got {cfg.drafter_layers}")
        timed = drafter_shape(target, cfg.drafter_layers)  # an MoE target's drafter keeps its MoE blocks
    elif cfg.layers is not None:
        timed = with_layers(target, cfg.layers)
    return timed, target, base


def point_memory_bytes(shape: ModelShape, dtype: str, requests: int, context: int, tokens: int,
                       max_tokens: int) -> float:
    """A generous estimate of one point's memory beyond the weights: the cache (all layers) and the largest
    transient of the forward (one layer's keys and values expanded to every head, attention scores, logits, MLP)."""
    nbytes = DTYPE_BYTES[dtype]
    cache = requests * (context + max_tokens) * shape.kv_bytes_per_token * nbytes / 2.0
    kv_len = context + tokens
    qk = shape.head_dim + shape.qk_rope_head_dim
    vdim = shape.v_head_dim or shape.head_dim
    expanded = requests * kv_len * shape.heads * (qk + vdim) * nbytes
    scores = requests * shape.heads * tokens * kv_len * 4.0
    rows = requests * tokens
    logits = rows * shape.vocab * (nbytes + 4.0)
    width = max(shape.intermediate, shape.expert_intermediate * max(shape.experts_per_token, 1))
    mlp = rows * width * nbytes * 4.0
    return 1.2 * (cache + expanded + scores + logits + mlp) + 64 * 1024**2


def available_memory_bytes(device: str) -> float:
    """What a new allocation can use now: CUDA free + the allocator's cached-but-unused memory; on the CPU, 70% of
    MemAvailable (the machine is shared; the OS kills rather than refuses when it runs out)."""
    if device == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info()
        return 0.9 * (free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return 0.7 * int(line.split()[1]) * 1024
    except OSError:
        pass
    return math.inf


def profile(cfg: ProfileConfig, out: str | Path, progress: bool = True, log: Callable[[str], None] = print,
            on_point: Callable[[dict], None] | None = None, nvml=None, progress_stream: TextIO | None = None,
            progress_every_s: float = 10.0) -> ProfileResult:
    """Measure the table and write it (CSV + sidecar) to ``out`` after every point. Returns the table; on Ctrl-C
    returns what was measured with ``interrupted`` set (the files already hold it). ``progress``: points done of
    all and the time left on ``progress_stream`` (stderr unless told), a bar on a terminal, else a line at most
    every ``progress_every_s`` seconds (hw_profile/measure/progress.py)."""
    cfg.validate()
    timed, target, base = resolve_shape(cfg)
    try:
        import torch
    except ImportError:
        raise HwProfileError("hw-profile sps needs torch: install dspark-sim[profile]") from None
    from hw_profile.measure import model_builder as mb

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise HwProfileError(f"--device cuda: torch {torch.__version__} sees no CUDA device")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(out)
    # on a CPU, other work on the machine slows and scatters the timings: look before, and after every point
    watch = LoadWatch.start(torch.get_num_threads()) if cfg.device == "cpu" else None
    messages = []

    def say(lines: list[str]) -> None:
        for line in lines:
            messages.append(line)
            log(line)

    if watch is not None:
        say(watch.warnings())

    weights = timed.total_params * DTYPE_BYTES[cfg.dtype]
    free = available_memory_bytes(cfg.device)
    if weights > free:
        raise HwProfileError(
            f"--model {cfg.model}: {timed.name} weights need {weights / GIB:.1f} GiB in {cfg.dtype}, the {cfg.device} "
            f"has {free / GIB:.1f} GiB usable; time fewer layers with --layers N"
        )

    sampler = NvmlSampler.open(cfg.device, index=_cuda_index(torch, cfg.device), pci_bus_id=_pci_bus_id(torch, cfg),
                               nvml=nvml)
    if not sampler.available:
        say([sampler.reason])

    max_positions = max(cfg.contexts) + max(cfg.tokens_per_request) + 16
    t0 = time.perf_counter()
    model = mb.build_model(timed, cfg.dtype, cfg.device, base=base, max_positions=max(max_positions, 4096),
                           seed=cfg.seed, attention=cfg.attention)
    build_s = time.perf_counter() - t0

    meta = _metadata(cfg, timed, target, model, sampler, torch, build_s)
    timer = _Timer(cfg, torch)
    tprs = sorted(set(cfg.tokens_per_request))
    plan = [(c, r) for c in sorted(set(cfg.contexts)) for r in sorted(set(cfg.requests))]
    records = {(c, r, t): _Record(requests=r, context=c, tokens=t) for c, r in plan for t in tprs}
    table = StepTable.from_points([], meta)
    interrupted = False
    bar = (PointProgress(len(records) * cfg.passes, timed.name, progress_stream, progress_every_s,
                         per_pass=len(records)) if progress else NoProgress())
    scope = contextlib.ExitStack()
    scope.enter_context(mb.force_sdpa_gqa(cfg.attention == "sdpa-gqa"))
    try:
        for _ in range(cfg.passes):
            for context, requests in plan:
                todo = [t for t in tprs if records[(context, requests, t)].status == "ok"]
                if not todo:
                    bar.update(len(tprs), timed=False)
                    continue
                # the cache is sized for the largest t that fits; need grows with t, so what fits is a prefix
                budget = _budget(cfg)
                fits = []
                for t in todo:
                    need = point_memory_bytes(timed, cfg.dtype, requests, context, t, t)
                    if need <= budget:
                        fits.append(t)
                    elif not records[(context, requests, t)].times:  # a point measured in an earlier pass stays
                        records[(context, requests, t)].status = (
                            f"skipped: needs ~{need / GIB:.2f} GiB, {budget / GIB:.2f} GiB usable")
                bar.update(len(tprs) - len(fits), timed=False)
                if not fits:
                    table = _write(records, meta, out)
                    continue
                try:
                    cache = mb.prepare_cache(model, requests, context, max(fits), seed=cfg.seed)
                except Exception as exc:
                    if not _is_oom(torch, exc):
                        raise
                    _free_cuda(torch, cfg.device)
                    for t in fits:
                        if not records[(context, requests, t)].times:
                            records[(context, requests, t)].status = "skipped: out of memory allocating the KV cache"
                    bar.update(len(fits), timed=False)
                    table = _write(records, meta, out)
                    continue
                for t in fits:
                    bar.set_postfix_str(f"c={context} R={requests} t={t}")
                    record = records[(context, requests, t)]
                    try:
                        _measure_point(cfg, timer, sampler, mb, model, cache, record)
                    except Exception as exc:
                        if not _is_oom(torch, exc):
                            raise
                        _free_cuda(torch, cfg.device)
                        if not record.times:
                            record.status = "skipped: out of memory in the forward"
                    table = _write(records, meta, out)
                    bar.update(1)
                    if watch is not None:
                        watch.sample()
                        say(watch.warnings())
                    if on_point is not None:
                        on_point(record.row())
                del cache
                _free_cuda(torch, cfg.device)
        if cfg.drafter_layers is not None and cfg.markov_rank:
            # a DSpark drafter also runs its Markov and confidence heads once per draft position
            from hw_profile.measure.head_timing import time_dspark_heads

            meta["sequential_head"] = time_dspark_heads(cfg.device, cfg.dtype, cfg.markov_rank, timed.vocab,
                                                        timed.hidden, cfg.requests, repeats=cfg.repeats,
                                                        warmup=cfg.warmup, seed=cfg.seed)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        scope.close()
        bar.close()
        meta["timer"] = timer.describe()
        meta["load_average_end"] = _loadavg()
        meta["elapsed_s"] = round(time.perf_counter() - t0, 1)
        remeasured = [r.remeasured() for r in records.values() if r.attempts_max > 1]
        if remeasured:
            meta["throttle_remeasured"] = remeasured
        if watch is not None:
            rows = [row for row in (r.row() for r in records.values()) if row is not None and row["status"] == "ok"]
            spread = relative_spread([r["step_ms_p10"] for r in rows], [r["step_ms_p90"] for r in rows],
                                     [r["step_ms"] for r in rows]) if rows else None
            meta["machine_load"] = watch.record(spread)
            say(watch.warnings(spread))
        if interrupted:
            meta["interrupted"] = True
            kept = sum(1 for r in records.values() if r.status == "ok" and r.times)
            messages.append(f"interrupted: {kept} points kept in {out}")
        table = _write(records, meta, out)
        sampler.close()
    return ProfileResult(table=table, path=out, interrupted=interrupted, messages=messages)


# -- one point ------------------------------------------------------------------------------------------------
@dataclass
class _Record:
    """Everything measured for one point, over all passes."""

    requests: int
    context: int
    tokens: int
    status: str = "ok"
    times: list = field(default_factory=list)
    telemetry: list = field(default_factory=list)  # (PointTelemetry, steps) per pass
    attempts_max: int = 0
    still_throttled: bool = False

    def row(self) -> dict | None:
        base = {"batch_tokens": self.requests * self.tokens, "kv_tokens": self.requests * self.context,
                "requests": self.requests, "context": self.context}
        if self.status != "ok":
            return {**base, "status": self.status, "step_ms": math.nan, "repeats": 0}
        if not self.times:
            return None  # not measured yet
        times = np.asarray(self.times, dtype=float)
        row = {**base, "status": "ok", "step_ms": float(np.median(times)),
               "step_ms_p10": float(np.percentile(times, 10)), "step_ms_p90": float(np.percentile(times, 90)),
               "repeats": len(times)}
        row.update(combine_telemetry(self.telemetry))
        return row

    def remeasured(self) -> dict:
        return {"requests": self.requests, "context": self.context, "tokens_per_request": self.tokens,
                "attempts": self.attempts_max, "still_throttled": self.still_throttled}


def combine_telemetry(windows: list[tuple[PointTelemetry, int]]) -> dict:
    """The telemetry columns of a point measured in several windows (passes): clocks as the median of the
    windows', power and utilisation averaged over time, the hottest temperature, every reason seen, energy summed
    over the steps that have it."""
    if not windows:
        return PointTelemetry().columns(steps=0)
    if len(windows) == 1:
        t, steps = windows[0]
        return t.columns(steps)
    cols = [t.columns(steps) for t, steps in windows]
    dur = np.array([t.duration_s for t, _ in windows])

    def timed_mean(key):
        v = np.array([c[key] for c in cols], dtype=float)
        ok = np.isfinite(v)
        return float(np.average(v[ok], weights=dur[ok] if dur[ok].sum() > 0 else None)) if ok.any() else math.nan

    energy = [(t.energy_j, steps) for t, steps in windows if np.isfinite(t.energy_j)]
    mask = 0
    for t, _ in windows:
        mask |= t.reasons_mask
    merged = PointTelemetry(reasons_mask=mask)
    temps = np.array([c["temp_c"] for c in cols], dtype=float)
    return {
        "throttled": merged.throttled,
        "throttle_reasons": merged.throttle_reasons,
        "sm_clock_mhz": float(np.nanmedian([c["sm_clock_mhz"] for c in cols])) if any(
            np.isfinite(c["sm_clock_mhz"]) for c in cols) else math.nan,
        "mem_clock_mhz": float(np.nanmedian([c["mem_clock_mhz"] for c in cols])) if any(
            np.isfinite(c["mem_clock_mhz"]) for c in cols) else math.nan,
        "power_w": timed_mean("power_w"),
        "temp_c": float(np.nanmax(temps)) if np.isfinite(temps).any() else math.nan,
        "util_pct": timed_mean("util_pct"),
        "energy_j": sum(e for e, _ in energy) / sum(n for _, n in energy) if energy else math.nan,
    }


def _measure_point(cfg, timer, sampler, mb, model, cache, record: _Record) -> None:
    """One pass over one point: warm up, time, re-measure while throttled (bounded); appends to the record."""
    step = mb.step_inputs(model, cache, record.requests, record.context, record.tokens, seed=cfg.seed)
    runner = timer.runner(step)
    try:
        estimate_ms = runner.warm(cfg.warmup)
        repeats = cfg.repeats
        if cfg.min_time_s > 0 and estimate_ms > 0:
            repeats = min(max(repeats, math.ceil(cfg.min_time_s * 1000.0 / estimate_ms)), cfg.max_repeats)
        for attempt in range(cfg.throttle_retries + 1):
            sampler.start()
            times = runner.time(repeats)
            telemetry = sampler.stop()
            if not telemetry.throttled or attempt == cfg.throttle_retries:
                break
            time.sleep(cfg.throttle_pause_s)  # let clocks and temperature recover, then measure again
    finally:
        runner.close()
    record.times.extend(times)
    record.telemetry.append((telemetry, len(times)))
    record.attempts_max = max(record.attempts_max, attempt + 1)
    record.still_throttled = record.still_throttled or telemetry.throttled


class _Timer:
    """Picks the clock: CUDA events (around CUDA-graph replays when the model can be captured) or perf_counter."""

    def __init__(self, cfg: ProfileConfig, torch):
        self.cfg = cfg
        self.torch = torch
        self.graphs = cfg.device == "cuda" and cfg.cuda_graphs
        self.graph_error: str | None = None

    def runner(self, step):
        if self.cfg.device == "cuda":
            return _CudaRunner(step, self.torch, self)
        return _CpuRunner(step, self.torch)

    def describe(self) -> str:
        if self.cfg.device != "cuda":
            return "time.perf_counter around each forward (CPU ops are synchronous)"
        if self.graphs:
            return "CUDA events around each CUDA-graph replay of the step"
        if self.graph_error:
            return f"CUDA events around eager forwards (CUDA graph capture failed: {self.graph_error})"
        return "CUDA events around eager forwards (CUDA graphs disabled)"


class _CpuRunner:
    def __init__(self, step, torch):
        self.step, self.torch = step, torch

    def warm(self, n: int) -> float:
        times = self.time(max(n, 1))
        return float(np.median(times))

    def time(self, n: int) -> list[float]:
        out = []
        with self.torch.inference_mode():
            for _ in range(n):
                t0 = time.perf_counter()
                self.step.forward()
                out.append((time.perf_counter() - t0) * 1e3)
        return out

    def close(self) -> None:
        pass


class _CudaRunner:
    def __init__(self, step, torch, timer: _Timer):
        self.step, self.torch, self.timer = step, torch, timer
        self.graph = None

    def warm(self, n: int) -> float:
        torch = self.torch
        with torch.inference_mode():
            # warm-up on a side stream, as CUDA-graph capture requires
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(max(n, 1)):
                    self.step.forward()
            torch.cuda.current_stream().wait_stream(stream)
            torch.cuda.synchronize()
            if self.timer.graphs:
                try:
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        self.step.forward()
                    self.graph = graph
                except Exception as exc:  # capture can fail on host syncs inside the model: fall back to eager
                    self.timer.graphs = False
                    self.timer.graph_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                    torch.cuda.synchronize()
                    self.step.forward()  # also puts the cache position back
        return float(np.median(self.time(max(n, 1))))

    def time(self, n: int) -> list[float]:
        with self.torch.inference_mode():
            return cuda_event_times(self.torch, self.graph.replay if self.graph is not None else self.step.forward, n)

    def close(self) -> None:
        self.graph = None


def cuda_event_times(torch, run: Callable[[], object], n: int) -> list[float]:
    """ms of each of ``n`` calls of ``run`` between CUDA events, issued back to back: a host slower than the GPU
    leaves gaps between the kernels, and they count."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


# -- bookkeeping ----------------------------------------------------------------------------------------------
def _budget(cfg: ProfileConfig) -> float:
    budget = available_memory_bytes(cfg.device)
    if cfg.memory_limit_gb is not None:
        budget = min(budget, cfg.memory_limit_gb * GIB)
    return budget


def _write(records: dict, meta: dict, out: Path) -> StepTable:
    rows = [row for row in (r.row() for r in records.values()) if row is not None]
    meta["points_ok"] = sum(r["status"] == "ok" for r in rows)
    meta["points_skipped"] = sum(r["status"] != "ok" for r in rows)
    table = StepTable.from_points(rows, dict(meta))
    if rows:  # after every point, so a stopped run resumes from what it wrote
        TableSet(table).write(out)
    return table


def _metadata(cfg: ProfileConfig, timed: ModelShape, target: ModelShape, model, sampler, torch, build_s) -> dict:
    from hw_profile.measure.model_builder import implementation_info

    if cfg.device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        sheet = named_gpu(props.name)
        device = {"device": props.name, "device_memory_gb": round(props.total_memory / 1e9, 1),
                  "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                  "gpu": sheet.to_dict() if sheet else None}  # the datasheet the table checks' bound reads
    else:
        device = {"device": "cpu", "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(),
                  "torch_threads": torch.get_num_threads()}
    memory_gb = device.pop("device_memory_gb", None)  # recorded with the memory facts it sizes the pool with
    telemetry = sampler.device_info()
    kind = "drafter" if cfg.drafter_layers is not None else "measured"
    meta = table_meta(
        name=cfg.name,
        kind=kind,
        **device,
        driver=telemetry.get("driver"),
        torch=torch.__version__,
        dtype=cfg.dtype,
        model=str(cfg.model),
        model_shape=timed.to_dict(),
        target_shape=target.to_dict() if target != timed else None,
        # the whole target's weights and cache (a profile of some layers still sizes the pool of all of them)
        **memory_fields(target, cfg.dtype, head_split=1, gpus=1,
                        weight_bytes_per_gpu=stored_weight_bytes_per_gpu(target, cfg.dtype, 1),
                        device_memory_gb=memory_gb),
        layers_override=cfg.layers if cfg.drafter_layers is None else None,
        drafter_layers=cfg.drafter_layers,
        implementation={**implementation_info(model, moe=timed.is_moe),
                        **({"sdpa_force_gqa": True} if cfg.attention == "sdpa-gqa" else {})},
        grid={"requests": sorted(set(cfg.requests)), "tokens_per_request": sorted(set(cfg.tokens_per_request)),
              "contexts": sorted(set(cfg.contexts))},
        warmup=cfg.warmup,
        repeats=cfg.repeats,
        passes=cfg.passes if cfg.passes > 1 else None,
        min_time_s=cfg.min_time_s or None,
        throttle_retries=cfg.throttle_retries if sampler.available else None,
        telemetry=telemetry,
        cache="transformers StaticCache of context + max tokens-per-request slots, random contents",
        memory_limit_gb=cfg.memory_limit_gb,
        model_build_s=round(build_s, 2),
        platform=platform.platform(),
        load_average_start=_loadavg(),
        note=cfg.note,
    )
    if cfg.command:
        meta["command"] = cfg.command
    return meta


def _is_oom(torch, exc: BaseException) -> bool:
    """CUDA's out-of-memory error, or the CPU allocator's refusal (the OS may also just kill the process, which is
    why points are checked against available memory first)."""
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    if isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)


def _free_cuda(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()


def _cuda_index(torch, device: str) -> int:
    return torch.cuda.current_device() if device == "cuda" else 0


def _pci_bus_id(torch, cfg: ProfileConfig) -> str | None:
    if cfg.device != "cuda":
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    bus = getattr(props, "pci_bus_id", None)
    domain = getattr(props, "pci_domain_id", 0)
    device = getattr(props, "pci_device_id", None)
    if bus is None or device is None:
        return None
    return f"{domain:08x}:{bus:02x}:{device:02x}.0"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None

