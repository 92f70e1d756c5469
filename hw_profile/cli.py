"""``hw-profile``: estimate, measure, calibrate, compute, smooth and view step-time tables.

    hw-profile estimate --model qwen3-8b --gpu B200 --engine sglang --out b200-qwen3-8b.csv  # start here
    hw-profile sps --model qwen3-8b --device cuda --dtype bf16 --requests 1..1024 --tokens-per-request 1,2,4,8 \\
                   --context 512,4096 --out h200-qwen3-8b.csv
    hw-profile analytic --gpu H200 --model qwen3-8b [--gpus N] [--dtype bf16] --out TABLE.csv
    hw-profile fit TABLE.csv                     # writes TABLE.smooth.csv (+ .json) beside it
    hw-profile calibrate TELEMETRY.csv --tau 1.9 --verify-budget 2 --context 3000 --out TABLE.csv
    hw-profile show TABLE.csv [OTHER.csv] [--out view.html]  # default: TABLE.html beside TABLE
    hw-profile compare TABLE.csv OTHER.csv       # T(TABLE) / T(OTHER) at TABLE's points, per context and B
    hw-profile peaks --device cpu --dtype fp32 --out cpu.json   # achieved rates, a device file for `analytic`

User mistakes print one line naming the flag or file and exit with code 2; Ctrl-C during ``sps`` keeps the points
measured so far (exit code 130).
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
from dataclasses import replace
from pathlib import Path

import click
import numpy as np

from hw_profile.errors import HwProfileError

DTYPES = ["bf16", "fp16", "fp32"]


def parse_int_list(text: str, flag: str, minimum: int = 1) -> list[int]:
    """'1,2,4' or '1..1024' (powers of two from 1 to 1024) or a mix: '1,3,8..64'."""
    values: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if ".." in part:
                lo, hi = (int(x) for x in part.split("..", 1))
                if lo < 1 or hi < lo:
                    raise ValueError
                v = lo
                while v <= hi:
                    values.append(v)
                    v *= 2
            else:
                values.append(int(part))
        except ValueError:
            raise HwProfileError(
                f"{flag}: expected integers separated by commas, or A..B for the doubling sequence from A to B; "
                f"got {part!r}"
            ) from None
    if not values:
        raise HwProfileError(f"{flag}: expected at least one integer")
    low = [v for v in values if v < minimum]
    if low:
        raise HwProfileError(f"{flag}: expected integers >= {minimum}, got {low[0]}")
    return sorted(set(values))


def require_profile_extra(command: str, modules: tuple[str, ...] = ("torch", "transformers")) -> None:
    """The commands that time a torch model import torch and transformers lazily; a missing one is one line naming
    the extra that brings it, not a traceback from deep inside the profiler."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise HwProfileError(f"hw-profile {command} needs {module} ({exc.__class__.__name__}: {exc}); install "
                                 "the profile extra: pip install 'dspark-sim[profile]' (./run hw-profile "
                                 f"{command} does it)") from None


def parse_sizes(text: str) -> tuple[int, ...]:
    """``--capture-sizes``: a comma list of ascending positive integers, or one line saying what was expected."""
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise HwProfileError(f"--capture-sizes: expected a comma list of integers, got {text!r}") from None
    if not sizes or sizes[0] < 1 or list(sizes) != sorted(set(sizes)):
        raise HwProfileError(f"--capture-sizes: expected ascending distinct integers >= 1, got {text!r}")
    return sizes


def parse_drafter_configs(items: tuple[str, ...]) -> dict[str, str]:
    """``--drafter-config NAME=PATH`` (repeatable): each drafter's checkpoint config.json by drafter name, one line
    per mistake."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = (part.strip() for part in item.partition("="))
        if not sep or not name or not path:
            raise HwProfileError(f"--drafter-config: expected NAME=PATH (e.g. dspark=drafter/config.json), got "
                                 f"{item!r}")
        if name in out:
            raise HwProfileError(f"--drafter-config {name}: given twice")
        if not Path(path).is_file():
            raise HwProfileError(f"--drafter-config {name}: no such file: {path}")
        out[name] = path
    return out


def device_and_shape(gpu: str, model: str, gpus: int):
    """``--gpu``, ``--model`` and ``--gpus`` of the table-writing commands, each mistake one line."""
    from hw_profile.hardware.gpus import get_gpu
    from hw_profile.hardware.shapes import get_shape

    try:
        device = get_gpu(gpu)
    except KeyError as exc:
        raise HwProfileError(f"--gpu: {exc.args[0]}") from None
    try:
        shape = get_shape(model)
    except KeyError as exc:
        raise HwProfileError(f"--model: {exc.args[0]}") from None
    if gpus < 1:
        raise HwProfileError(f"--gpus: expected a positive integer, got {gpus}")
    return device, shape


EXPERT_DTYPES = ("auto", "fp4", "fp8", "w4a16")  # --expert-dtype of analytic and estimate
EXPERT_DTYPE_HELP = ("the routed experts' type; auto: the model's own (fp4 for DeepSeek-V4, at the fp8 rate); fp4: an "
                     "fp4 checkpoint of another model (NVFP4, MXFP4), priced as V4's; fp8: an fp8 checkpoint; w4a16: "
                     "fp4 weights in 16-bit arithmetic (Marlin, on parts without FP4 tensor cores)")


def with_expert_dtype(shape, expert_dtype: str):
    """``--expert-dtype`` applied to the target's shape (drafters built from it follow); one line for a dense model."""
    if expert_dtype == "auto":
        return shape
    if not shape.is_moe:
        raise HwProfileError(f"--expert-dtype: {shape.name} has no experts; leave --expert-dtype out")
    return replace(shape, expert_dtype=expert_dtype)


class _Commands(click.Group):
    """Lists the commands in ``COMMAND_ORDER`` (``estimate`` first), any other after them, not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.commands, key=lambda name: (COMMAND_ORDER.index(name) if name in COMMAND_ORDER
                                                       else len(COMMAND_ORDER), name))


# how --help lists them: the command to start from, then measuring and fitting, then the tools around tables
COMMAND_ORDER = ("estimate", "sps", "calibrate", "analytic", "fit", "show", "compare", "peaks")


@click.group(cls=_Commands,
             help="Step-time tables T(B, K): estimated for hardware you do not have (estimate: start here), measured "
                  "on this machine (sps), fitted to a deployment's telemetry (calibrate), a roofline bound "
                  "(analytic), smoothed (fit), viewed (show, compare); peaks measures a device file.")
def cli() -> None:
    pass


@cli.command(help="Measure T(B, K) by timing real verification forwards of a target- or drafter-shaped model.")
@click.option("--model", required=True, help="built-in shape (qwen3-0.6b, qwen3-4b, qwen3-8b, qwen3-14b, "
              "gemma4-12b, deepseek-v3; deepseek-v4-flash/pro for `analytic` only) or a transformers config.json")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--dtype", type=click.Choice(DTYPES), default=None,
              help="[default: fp32 on cpu (CPUs lack fast bf16 matmuls), bf16 on cuda]")
@click.option("--requests", "requests_", default="1,2,4,8,16", show_default=True,
              help="request counts R: a comma list, or A..B for powers of two")
@click.option("--tokens-per-request", default="1,2,4,8", show_default=True, help="new tokens per request t")
@click.option("--context", default="512", show_default=True, help="context lengths (KV tokens per request)")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="TABLE.csv (sidecar TABLE.json beside it)")
@click.option("--layers", type=int, default=None, help="time only the first N layers (recorded in the sidecar)")
@click.option("--drafter-layers", type=int, default=None,
              help="time a drafter instead: N layers built like the target's, plus its LM head")
@click.option("--markov-rank", type=int, default=256, show_default=True,
              help="with --drafter-layers: also time DSpark's rank-R Markov head and confidence head per draft "
              "position, recorded as the table's sequential_head (charged to the dspark drafter only; 0: none)")
@click.option("--warmup", type=int, default=3, show_default=True)
@click.option("--repeats", type=int, default=10, show_default=True, help="timed forwards per point and pass")
@click.option("--passes", type=int, default=1, show_default=True,
              help="sweep the grid this many times and pool each point's repeats (shared machines)")
@click.option("--min-time", "min_time_s", type=float, default=0.0, show_default=True,
              help="seconds: raise the repeats of a point until its timed window lasts this long")
@click.option("--throttle-retries", type=int, default=2, show_default=True,
              help="re-measure a throttled point at most this many times")
@click.option("--memory-limit-gb", type=float, default=None, help="skip points whose KV + activations exceed this")
@click.option("--threads", type=int, default=None, help="CPU threads for torch")
@click.option("--no-cuda-graphs", is_flag=True, help="time eager forwards on a GPU")
@click.option("--attn", "attention", type=click.Choice(["sdpa", "sdpa-gqa", "eager", "flash_attention_2",
              "flash_attention_3", "flex_attention"]), default="sdpa", show_default=True,
              help="transformers attention kernel (see docs/hw-profile.md)")
@click.option("--name", default=None, help="label for the table (sidecar and views)")
@click.option("--note", default=None, help="free text for the sidecar, e.g. about other load on the machine")
@click.option("--quiet", is_flag=True, help="no progress (points done of all and the time left: a bar on a "
              "terminal, else a line every 10 s on stderr)")
@click.pass_obj
def sps(obj, model, device, dtype, requests_, tokens_per_request, context, out, layers, drafter_layers, markov_rank,
        warmup, repeats, passes, min_time_s, throttle_retries, memory_limit_gb, threads, no_cuda_graphs, attention,
        name, note, quiet) -> None:
    from hw_profile.measure.profiler import ProfileConfig, profile

    require_profile_extra("sps")
    if layers is not None and drafter_layers is not None:
        raise HwProfileError("--layers and --drafter-layers: give one or the other")
    cfg = ProfileConfig(
        model=model,
        device=device,
        dtype=dtype or ("fp32" if device == "cpu" else "bf16"),
        requests=parse_int_list(requests_, "--requests"),
        tokens_per_request=parse_int_list(tokens_per_request, "--tokens-per-request"),
        contexts=parse_int_list(context, "--context", minimum=0),
        layers=layers,
        drafter_layers=drafter_layers,
        markov_rank=markov_rank if drafter_layers is not None else 0,
        warmup=warmup,
        repeats=repeats,
        passes=passes,
        min_time_s=min_time_s,
        throttle_retries=throttle_retries,
        memory_limit_gb=memory_limit_gb,
        threads=threads,
        cuda_graphs=not no_cuda_graphs,
        attention=attention,
        name=name,
        note=note,
        command=(obj or {}).get("command"),
    )
    # a scheduler's or `timeout`'s SIGTERM stops a profile as Ctrl-C does: the points and a whole sidecar are kept
    terminated = []

    def stop(signum, frame):
        terminated.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        result = profile(cfg, out, progress=not quiet, log=lambda line: click.echo(line, err=True))
    finally:
        signal.signal(signal.SIGTERM, previous)
    ok = int((result.table.points["status"] == "ok").sum()) if len(result.table.points) else 0
    skipped = len(result.table.points) - ok
    if result.interrupted:
        click.echo(f"hw-profile: {'terminated' if terminated else 'interrupted'}; {ok} points kept in "
                   f"{result.path}", err=True)
        sys.exit(128 + signal.SIGTERM if terminated else 130)
    click.echo(f"{result.path}: {ok} points measured, {skipped} skipped")


@cli.command(help="Write an analytic (roofline) table for a named GPU and model shape.")
@click.option("--gpu", required=True, help="A100, H100, H200, H800, H20, H20-141G, B200, B300, GB300, MI300X, MI355X "
              "(hw_profile/hardware/gpus.py), or a device .json file")
@click.option("--model", required=True, help="built-in shape or a transformers config.json")
@click.option("--gpus", type=int, default=1, show_default=True, help="GPUs per replica (tensor parallel)")
@click.option("--ep", type=int, default=None, help="expert-parallel groups for an MoE model (default: --gpus)")
@click.option("--dtype", type=click.Choice([*DTYPES, "fp8"]), default="bf16", show_default=True)
@click.option("--drafter-layers", type=int, default=None,
              help="a drafter: N layers built like the model's, its launch overhead scaled by N / the model's layers")
@click.option("--markov-rank", type=int, default=256, show_default=True,
              help="with --drafter-layers: DSpark's sequential Markov head rank, recorded with its confidence head "
              "as the table's sequential_head (charged to the dspark drafter only; 0: none)")
@click.option("--expert-dtype", type=click.Choice(EXPERT_DTYPES), default="auto", show_default=True,
              help=EXPERT_DTYPE_HELP)
@click.option("--max-batch-tokens", type=int, default=16384, show_default=True)
@click.option("--max-kv-tokens", type=int, default=4_194_304, show_default=True)
@click.option("--comp-eff", type=float, default=None, help="achieved fraction of peak FLOPs (default 0.6)")
@click.option("--mem-eff", type=float, default=None, help="achieved fraction of peak bandwidth (default 0.8)")
@click.option("--launch-ms", type=float, default=None, help="fixed per-step overhead in ms (default 0.15)")
@click.option("--name", default=None)
@click.option("--out", required=True, type=click.Path(dir_okay=False))
@click.pass_obj
def analytic(obj, gpu, model, gpus, ep, dtype, drafter_layers, markov_rank, expert_dtype, max_batch_tokens,
             max_kv_tokens, comp_eff, mem_eff, launch_ms, name, out) -> None:
    from dataclasses import replace

    from hw_profile.hardware.shapes import drafter_attention_window, drafter_shape
    from hw_profile.kernels.roofline import (
        RooflineParams,
        analytic_table,
        default_b_axis,
        default_k_axis,
        drafter_params,
        markov_head_costs,
    )

    device, shape = device_and_shape(gpu, model, gpus)
    shape = with_expert_dtype(shape, expert_dtype)
    if ep is not None and (ep < 1 or gpus % ep):
        raise HwProfileError(f"--ep: expected a divisor of --gpus ({gpus}), got {ep}")
    target = shape
    if drafter_layers is not None:
        if drafter_layers < 1:
            raise HwProfileError(f"--drafter-layers: expected a positive number of layers, got {drafter_layers}")
        shape = drafter_shape(shape, drafter_layers)
    if markov_rank < 0:
        raise HwProfileError(f"--markov-rank: expected a rank >= 0, got {markov_rank}")
    params = RooflineParams()
    for flag, key, value in (("--comp-eff", "comp_eff", comp_eff), ("--mem-eff", "mem_eff", mem_eff),
                             ("--launch-ms", "launch_ms", launch_ms)):
        if value is not None:
            if value < 0 or (key != "launch_ms" and not 0 < value <= 1):
                raise HwProfileError(f"{flag}: expected {'a fraction in (0, 1]' if key != 'launch_ms' else 'ms >= 0'}"
                                     f", got {value}")
            params = replace(params, **{key: value})
    if drafter_layers is not None:
        params = drafter_params(params, drafter_layers, target.layers)
    table = analytic_table(shape, device, dtype=dtype, gpus=gpus, params=params, name=name, ep=ep,
                           b_axis=default_b_axis(max_batch_tokens), k_axis=default_k_axis(max_kv_tokens))
    from hw_profile.kernels.roofline import stored_weight_bytes

    weights_gb = stored_weight_bytes(shape, dtype) / 1e9
    if drafter_layers is not None:
        table.meta["drafter_of"] = {"model": target.name, "layers": target.layers}
        if drafter_attention_window(target):
            table.meta["attention_window"] = drafter_attention_window(target)
        if markov_rank:
            table.meta["sequential_head"] = markov_head_costs(device, markov_rank, target.vocab, dtype, params,
                                                              hidden=target.hidden)
    if obj and obj.get("command"):
        table.meta["command"] = obj["command"]
    if weights_gb > device.memory_gb * gpus:
        table.meta["fits_in_memory"] = False
        click.echo(f"hw-profile: note: {shape.name} weights ({weights_gb:.0f} GB in {dtype}) exceed {gpus} x "
                   f"{device.memory_gb:g} GB; the table is the roofline regardless", err=True)
    from hw_profile.tables.table_set import TableSet

    path = TableSet(table).write(out)[-1]
    b1 = table.grid.step_ms(1, 0)
    click.echo(f"{path}: {len(table.points)} points; T(B=1, K=0) = {b1:.3f} ms")
    click.echo(f"hw-profile: note: {table.meta['caveat']['text']}", err=True)


@cli.command(help="Estimate step-time tables (target and drafters) for a model, GPU, parallelism and serving engine "
             "nobody measured: measured kernels where the kernel database covers them, else a kernel-level "
             "roofline, plus the engine's own costs.")
@click.option("--model", required=True, help="built-in shape (qwen3-8b, deepseek-v3, deepseek-v4-flash, "
              "deepseek-v4-pro, ...) or a transformers config.json")
@click.option("--gpu", required=True, help="H100, H200, H800, H20, B200, B300, ..., or a device .json file")
@click.option("--gpus", type=int, default=1, show_default=True, help="GPUs per deployment (TP, or DP x EP ranks)")
@click.option("--ep", type=int, default=None, help="expert-parallel size for an MoE model (default: --gpus)")
@click.option("--engine", type=click.Choice(["vllm", "sglang", "trtllm"]), default="vllm", show_default=True)
@click.option("--dtype", type=click.Choice([*DTYPES, "fp8"]), default=None,
              help="[default: fp8 for DeepSeek models, bf16 otherwise]")
@click.option("--kv-dtype", type=click.Choice(["auto", "bf16", "fp8"]), default="auto", show_default=True,
              help="the KV cache's type; auto: the model's own (fp8 for DeepSeek-V4), else bf16 as the engines' "
                   "default (--kv-cache-dtype auto)")
@click.option("--expert-dtype", type=click.Choice(EXPERT_DTYPES), default="auto", show_default=True,
              help=EXPERT_DTYPE_HELP)
@click.option("--parallel", type=click.Choice(["auto", "tp", "dp"]), default="auto", show_default=True,
              help="dp: data-parallel attention with EP, one table row per GPU (DeepSeek-style decode); "
                   "auto picks dp for MLA/V4 MoE models when --ep equals --gpus")
@click.option("--drafters", default="mtp,dspark", show_default=True, help="drafter tables to write beside the "
              "target's (comma list of mtp, dspark, eagle3, dflash; empty for none)")
@click.option("--drafter-config", "drafter_configs", multiple=True, metavar="NAME=PATH",
              help="a drafter checkpoint's own config.json (repeatable), e.g. dspark=draft/config.json: its layers "
              "instead of the built-in ones (docs/hw-profile.md)")
@click.option("--kernels", type=click.Choice(["auto", "db", "roofline"]), default="auto", show_default=True,
              help="db: require the kernel database (pip install 'dspark-sim[kernels]'); roofline: never use it")
@click.option("--sibling", default=None, help="for a GPU the kernel database lacks: a GPU it covers (same engine) "
              "whose measured kernels' excess over their roofline this GPU's roofline takes, e.g. --gpu H20 "
              "--sibling H200 (docs/hw-profile.md)")
@click.option("--cost", "costs", multiple=True, help="an engine cost term NAME=VALUE (repeatable; see "
              "docs/hw-profile.md), e.g. step_fixed_ms=3 or moe_imbalance=1.1")
@click.option("--capture-sizes", default=None, help="the CUDA-graph sizes the engine captures, a comma list "
              "(tokens for vllm, requests for sglang and trtllm) [default: the engine's own list, docs/hw-profile.md]")
@click.option("--max-batch-tokens", type=int, default=16384, show_default=True)
@click.option("--max-kv-tokens", type=int, default=4_194_304, show_default=True)
@click.option("--name", default=None, help="label of the tables (default: the file stem)")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="DIR/NAME.csv: the target's table; "
              "drafters' tables NAME.drafter-<drafter>.csv beside it")
@click.option("--notes", "show_notes", is_flag=True, help="print how the table was priced (the sidecar's notes)")
@click.pass_obj
def estimate(obj, model, gpu, gpus, ep, engine, dtype, kv_dtype, expert_dtype, parallel, drafters, drafter_configs,
             kernels, sibling, costs, capture_sizes, max_batch_tokens, max_kv_tokens, name, out, show_notes) -> None:
    from hw_profile.estimate.engine_costs import engine_defaults, with_overrides
    from hw_profile.estimate.estimate import Deployment, default_parallel, layout_note, write_estimate_set
    from hw_profile.hardware.gpus import get_gpu
    from hw_profile.hardware.shapes import read_config
    from hw_profile.kernels.roofline import default_b_axis, default_k_axis

    device, shape = device_and_shape(gpu, model, gpus)
    # the drafters' shapes are built from the target's, so their caches and experts follow it
    if kv_dtype != "auto":
        shape = replace(shape, kv_dtype=kv_dtype)
    shape = with_expert_dtype(shape, expert_dtype)
    if ep is None:
        ep = gpus if shape.is_moe else 1
    if ep < 1 or gpus % ep:
        raise HwProfileError(f"--ep: expected a divisor of --gpus ({gpus}), got {ep}")
    if not shape.is_moe and ep > 1:
        raise HwProfileError(f"--ep: {shape.name} has no experts; leave --ep out")
    if dtype is None:
        dtype = shape.checkpoint_dtype
    mode = default_parallel(shape, gpus, ep) if parallel == "auto" else parallel
    if mode == "dp" and not shape.is_moe:
        raise HwProfileError("--parallel dp: data-parallel attention with expert parallelism needs an MoE model")
    for flag, value in (("--max-batch-tokens", max_batch_tokens), ("--max-kv-tokens", max_kv_tokens)):
        if value < 1:
            raise HwProfileError(f"{flag}: expected a positive integer, got {value}")
    names = [d.strip() for d in drafters.split(",") if d.strip()]
    drafter_paths = parse_drafter_configs(drafter_configs)
    cost_terms = with_overrides(engine_defaults(engine), list(costs))
    if capture_sizes is not None:
        cost_terms = replace(cost_terms, capture_sizes=parse_sizes(capture_sizes))
    dep = Deployment(gpu=device, gpus=gpus, ep=ep, dtype=dtype, parallel=mode, engine=engine, costs=cost_terms)
    meta = {"command": obj["command"]} if obj and obj.get("command") else {}
    if name:
        meta["label"] = name
    if drafter_paths:
        meta["drafter_configs"] = drafter_paths
    try:
        sibling_gpu = get_gpu(sibling) if sibling else None
    except KeyError as exc:
        raise HwProfileError(f"--sibling: {exc.args[0]}") from None
    written = write_estimate_set(shape, dep, out, names, kernels=kernels, meta=meta,
                                 b_axis=default_b_axis(max_batch_tokens), k_axis=default_k_axis(max_kv_tokens),
                                 sibling=sibling_gpu,
                                 drafter_configs={n: read_config(p) for n, p in drafter_paths.items()})
    from hw_profile.tables.sidecar import SpeculativeMode
    from hw_profile.tables.step_table import StepTable

    for path in written:  # read back as a scenario will read them; the target's table comes last
        table = StepTable.read(path)
        grid = table.grid
        inside = table.meta.get("inside_share", 0.0)
        click.echo(f"{path}: T(1, 0) = {grid.step_ms(1, 0):.3f} ms, T(256, 256 x 4096) = "
                   f"{grid.step_ms(256, 256 * 4096):.2f} ms; kernels: {'; '.join(table.meta.get('sources', []))}"
                   f" ({inside:.0%} of points inside measured data)")
    click.echo(f"hw-profile: {layout_note(dep)}", err=True)
    # what to expect comes first and alone; how it was priced is in the sidecar for whoever asks
    expected = table.meta["expected_error"]
    click.echo(f"hw-profile: expected accuracy: {expected['summary']}; to do better: {expected['narrow_it']}",
               err=True)
    notes = table.meta.get("notes", [])
    # advice asks the user to decide something (an extra to install, another expert dtype): always shown; the
    # other notes explain how the table was priced and wait behind --notes
    asks = table.meta.get("advice", [])
    for note in notes if show_notes else asks:
        click.echo(f"hw-profile: note: {note}", err=True)
    if not show_notes and len(notes) > len(asks):
        click.echo(f"hw-profile: {len(notes) - len(asks)} more note(s) on how it was priced are in "
                   f"{written[-1].with_suffix('.json')} (notes; --notes prints them)", err=True)
    if names:  # what a speculative system of these tables runs differently, as the sidecar records it
        click.echo(f"hw-profile: speculative mode: {SpeculativeMode.from_meta(table.meta, str(path)).words}", err=True)


@cli.command(help="Fit a step-time table T(B, K) to telemetry of a deployed system, or calibrate an estimate "
             "(--prior) on one to three measured points (see docs/hw-profile.md).")
@click.argument("telemetry", type=click.Path(), required=False)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="TABLE.csv (sidecar TABLE.json beside it)")
@click.option("--prior", type=click.Path(dir_okay=False), default=None,
              help="an estimated table (hw-profile estimate): fit only what one to three points identify")
@click.option("--point", "points", multiple=True,
              help="with --prior: a measured step B,K,MS (batch tokens, KV tokens, ms); repeatable, up to 3")
@click.option("--tau", type=float, default=None, help="mean emitted tokens per request-step of the system in service")
@click.option("--verify-budget", type=float, default=None, help="mean verified tokens per request-step (MTP-1: 2)")
@click.option("--context", type=float, default=None, help="mean KV tokens per running request")
@click.option("--gpus-per-replica", type=int, default=1, show_default=True,
              help="GPUs stepping together on one batch (1 for a data-parallel rank)")
@click.option("--system", default=None, help="runs.csv: the system (policy column) to read")
@click.option("--where", multiple=True, help="CSV: keep rows with COLUMN=VALUE (repeatable)")
@click.option("--step-from", type=click.Choice(["tpot", "throughput"]), default="tpot", show_default=True,
              help="vLLM results: step time from mean TPOT or from output throughput")
@click.option("--kv-ns-per-token", type=float, default=None,
              help="per-KV-token cost (ns) to use instead of fitting it")
@click.option("--draft-layers", type=float, default=0.0, show_default=True,
              help="the deployed drafter's layers (one token per request per step), removed from the target's cost")
@click.option("--layers", type=int, default=0, help="the target's layers (with --draft-layers)")
@click.option("--draft-window", type=int, default=0, help="KV tokens per request the deployed drafter reads (0: all)")
@click.option("--form", type=click.Choice(["auto", "linear", "isotonic"]), default="auto", show_default=True)
@click.option("--max-batch-tokens", type=int, default=None, help="the table's largest B (default: 4x observed, >= 16384)")
@click.option("--name", default=None)
@click.pass_obj
def calibrate(obj, telemetry, out, prior, points, tau, verify_budget, context, gpus_per_replica, system, where,
              step_from, kv_ns_per_token, draft_layers, layers, draft_window, form, max_batch_tokens, name) -> None:
    from hw_profile.calibrate.calibrate import DraftShare, calibrated_table, fit
    from hw_profile.calibrate.observations import Assumptions, read_telemetry

    if points and not prior:
        raise HwProfileError("--point: give --prior, the estimated table the points calibrate")
    if telemetry is None and not points:
        raise HwProfileError("expected a TELEMETRY file, or --prior TABLE with --point B,K,MS")

    for flag, value in (("--tau", tau), ("--verify-budget", verify_budget)):
        if value is not None and value < 1:
            raise HwProfileError(f"{flag}: expected a number >= 1 (tokens per request-step), got {value}")
    if context is not None and context < 0:
        raise HwProfileError(f"--context: expected KV tokens >= 0, got {context}")
    if kv_ns_per_token is not None and kv_ns_per_token < 0:
        raise HwProfileError(f"--kv-ns-per-token: expected ns >= 0, got {kv_ns_per_token}")
    if draft_layers < 0 or draft_window < 0 or (draft_layers and layers < 1):
        raise HwProfileError("--draft-layers: expected layers >= 0, with --layers (the target's layers) >= 1")
    filters = {}
    for item in where:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise HwProfileError(f"--where: expected COLUMN=VALUE, got {item!r}")
        filters[key] = value
    assume = Assumptions(tau=tau, verify_budget=verify_budget, context=context, gpus_per_replica=gpus_per_replica,
                         step_from=step_from)
    if prior:
        _calibrate_prior(obj, prior, telemetry, points, assume, system, filters, out, name)
        return
    obs, inputs = read_telemetry(telemetry, assume, system=system, where=filters)
    for note in inputs.get("skipped", []):
        click.echo(f"hw-profile: note: {note}", err=True)
    inputs.update({"where": filters or None, "assumed": {k: v for k, v in (("tau", tau), (
        "verify_budget", verify_budget), ("context", context), ("gpus_per_replica", gpus_per_replica)) if v}})
    cal = fit(obs, kv_ns_per_token=kv_ns_per_token, draft=DraftShare(draft_layers, layers, draft_window), form=form)
    table = calibrated_table(cal, name=name, inputs=inputs, max_batch_tokens=max_batch_tokens)
    if obj and obj.get("command"):
        table.meta["command"] = obj["command"]
    from hw_profile.tables.table_set import TableSet

    path = TableSet(table).write(out)[-1]
    s = cal.summary()
    p, e = s["parameters"], s["stderr"]
    click.echo(f"{path}: {len(obs)} observations, {cal.form} fit: {p['fixed_ms']:.3f} ms (+-{e['fixed_ms']:.3f}) "
               f"+ {p['us_per_token']:.2f} us/token (+-{e['us_per_token']:.2f}) + {p['ns_per_kv_token']:.3f} "
               f"ns/KV token; residuals rms {s['residuals_pct']['rms']:.2f}%, max {s['residuals_pct']['max_abs']:.2f}%")
    for note in cal.notes:
        click.echo(f"hw-profile: note: {note}", err=True)


def _parse_point(text: str) -> tuple[float, float, float]:
    try:
        b, k, ms = (float(x) for x in text.split(","))
    except ValueError:
        raise HwProfileError(f"--point: expected B,K,MS (batch tokens, KV tokens, step ms), got {text!r}") from None
    return b, k, ms


def _prior_host_ms(meta: dict) -> float:
    """The per-step host cost an estimate's sidecar priced (0 for a table that records no engine costs)."""
    from hw_profile.estimate.engine_costs import EngineCosts

    recorded = meta.get("engine_costs")
    if not isinstance(recorded, dict):
        return 0.0
    try:
        return EngineCosts.from_dict(recorded).host_ms
    except (TypeError, HwProfileError):
        return 0.0


def _calibrate_prior(obj, prior_path, telemetry, points, assume, system, filters, out, name) -> None:
    """An estimate calibrated on 1-3 points: the target's table and its drafters' tables written beside ``out``."""
    from hw_profile.calibrate.observations import read_telemetry
    from hw_profile.calibrate.prior_fit import apply_fit, fit_on_prior
    from hw_profile.tables.step_table import TableError
    from hw_profile.tables.table_set import TableSet

    try:
        prior_set = TableSet.read(prior_path)
    except TableError as exc:
        raise HwProfileError(f"--prior: {exc}") from None
    prior = prior_set.target
    if telemetry is not None:
        obs, inputs = read_telemetry(telemetry, assume, system=system, where=filters)
        for note in inputs.get("skipped", []):
            click.echo(f"hw-profile: note: {note}", err=True)
        rows = [(float(r.batch_tokens), float(r.kv_tokens), float(r.step_ms)) for r in obs.itertuples()]
    else:
        rows = []
    rows += [_parse_point(p) for p in points]
    b, k, ms = (list(x) for x in zip(*rows, strict=True))
    result = fit_on_prior(prior, b, k, ms)
    out = Path(out)
    extra = {"calibration": {"points": [{"batch_tokens": x, "kv_tokens": y, "step_ms": z} for x, y, z in rows],
                             "fitted": result.fitted, "per_step_ms_added": result.f_ms, "per_token_scale": result.s,
                             "per_kv_token_scale": result.c, "residuals_pct": result.residuals_pct,
                             "notes": result.notes}}
    if obj and obj.get("command"):
        extra["command"] = obj["command"]
    # the drafters' tables take the fit's scales, not the per-step cost: that belongs to the target's step
    drafters = {drafter: replace(d, table=apply_fit(d.table, result, with_fixed=False,
                                                    name=f"{out.stem}.drafter-{drafter}", meta=extra))
                for drafter, d in prior_set.drafters.items()}
    path = TableSet(apply_fit(prior, result, name=name or out.stem, meta=extra), drafters).write(out)[-1]
    fixed = _prior_host_ms(prior.meta)
    click.echo(f"{path}: calibrated {result.terms_in_words()} on {len(rows)} point(s); the table now passes "
               f"through them within {', '.join(f'{r:+.2f}%' for r in result.residuals_pct)}")
    for line in result.moved(fixed):
        click.echo(f"  {line}")
    for note in result.notes:
        click.echo(f"hw-profile: note: {note}", err=True)
    for line in result.far_from_prior():
        click.echo(f"hw-profile: warning: {line}", err=True)


@cli.command(help="Write TABLE.smooth.csv: the table made monotone non-decreasing in B and K.")
@click.argument("table", type=click.Path(dir_okay=False))
@click.option("--out", default=None, type=click.Path(dir_okay=False), help="default: TABLE.smooth.csv beside TABLE")
@click.pass_obj
def fit(obj, table, out) -> None:
    from hw_profile.tables.fit import fit_file

    smooth, path = fit_file(table, out, command=(obj or {}).get("command"))
    info = smooth.meta["smoothed"]
    click.echo(f"{path}: {info['cells']} cells ({info['measured_cells']} measured), measured points moved by "
               f"{info['mean_change_pct_measured']:.2f}% on average, {info['max_change_pct_measured']:.2f}% at most")


@cli.command(help="Write a self-contained HTML view: SPS(B) per context, and TABLE against OTHER.")
@click.argument("table", type=click.Path(dir_okay=False))
@click.argument("other", required=False, type=click.Path(dir_okay=False))
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="default: TABLE.html beside TABLE (TABLE.vs.OTHER.html with OTHER)")
def show(table, other, out) -> None:
    from hw_profile.tables.checks import table_warnings
    from hw_profile.tables.step_table import StepTable
    from hw_profile.view.show import write_view

    tables = [StepTable.read(table)] + ([StepTable.read(other)] if other else [])
    for t in tables:  # a view of a table that breaks an invariant says so, as simulate check does
        for line in table_warnings(t, str(t.path)):
            click.echo(f"warning: {line}", err=True)
    if out is None:
        out = Path(table).with_name(Path(table).stem + (f".vs.{Path(other).stem}" if other else "") + ".html")
    path = write_view(tables, out)
    click.echo(f"{path}: written")


@cli.command(help="Check a table set against the table invariants T-1 ... T-4 (docs/hw-profile.md): step time that "
             "falls as work grows, a busy or throttled measurement, points faster than the table's own roofline "
             "bound. Exit 1 when any is broken.")
@click.argument("table", type=click.Path(dir_okay=False))
def check(table) -> None:
    from hw_profile.tables.checks import set_warnings
    from hw_profile.tables.table_set import TableSet

    tables = TableSet.read(table)
    lines = set_warnings(tables, table)
    for line in lines:
        click.echo(f"warning: {line}", err=True)
    named = f" and {len(tables.drafters)} drafter table(s)" if tables.drafters else ""
    facts = tables.facts
    click.echo(f"{table}{named}: {'ok' if not lines else f'{len(lines)} invariant(s) broken'} "
               f"({facts.provenance.words}; schema {facts.schema_version})")
    if lines:
        sys.exit(1)


@cli.command(help="Rewrite the sidecars of tables written before the typed contract at its schema version, with "
             "the facts their writers priced recorded as fields (weights, KV bytes, activation peak, datasheet); "
             "the step times are not touched.")
@click.argument("tables", nargs=-1, required=True, type=click.Path(dir_okay=False))
def upgrade(tables) -> None:
    from atomic_files import atomic_write_text
    from hw_profile.tables.sidecar import SCHEMA_VERSION
    from hw_profile.tables.sidecar import upgrade as upgraded
    from hw_profile.tables.step_table import read_sidecar_json, sidecar_path

    for table in tables:
        side = sidecar_path(table)
        meta = read_sidecar_json(side)
        if meta.get("schema_version") == SCHEMA_VERSION:
            click.echo(f"{side}: at schema {SCHEMA_VERSION} already")
            continue
        atomic_write_text(side, json.dumps(upgraded(meta), indent=2, sort_keys=True) + "\n")
        click.echo(f"{side}: upgraded to schema {SCHEMA_VERSION}")


@cli.command(help="Print T(TABLE) / T(OTHER) at TABLE's own points: per context, the median ratio at each B.")
@click.argument("table", type=click.Path(dir_okay=False))
@click.argument("other", type=click.Path(dir_okay=False))
@click.option("--csv", "csv_out", default=None, type=click.Path(dir_okay=False), help="also write every point's ratio")
def compare(table, other, csv_out) -> None:
    from atomic_files import atomic_write
    from hw_profile.tables.step_table import StepTable
    from hw_profile.view.compare import ratio_frame, summary_lines

    first, second = StepTable.read(table), StepTable.read(other)
    frame = ratio_frame(first, second)
    for line in summary_lines(frame, first.label(), second.label()):
        click.echo(line)
    for t in (first, second):
        caveat = t.facts.provenance.caveat
        if caveat is not None:
            click.echo(f"  {t.label()} is {caveat['kind']}: {caveat['text']}")
    if csv_out:
        atomic_write(csv_out, lambda tmp: frame.to_csv(tmp, index=False, float_format="%.6g"))


@cli.command(help="Measure the achieved matmul rate and weight-streaming bandwidth; write a device file.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--dtype", type=click.Choice(DTYPES), default="fp32", show_default=True)
@click.option("--threads", type=int, default=None, help="CPU threads for torch (use the table's)")
@click.option("--out", required=True, type=click.Path(dir_okay=False))
def peaks(device, dtype, threads, out) -> None:
    from atomic_files import atomic_write_text
    from hw_profile.measure.peaks import measure_peaks

    require_profile_extra("peaks", ("torch",))
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise HwProfileError(f"--device cuda: torch {torch.__version__} sees no CUDA device")
    if threads:
        torch.set_num_threads(threads)
    result = measure_peaks(device, dtype)
    atomic_write_text(out, json.dumps(result, indent=2) + "\n")
    click.echo(f"{out}: {result['bf16_tflops'] * 1e3:.1f} GFLOP/s matmul, {result['hbm_tb_s'] * 1e3:.2f} GB/s "
               f"streaming ({dtype})")


def main(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes become one line on stderr and exit code 2."""
    np.seterr(all="ignore")
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        # the sidecars record this command line, however the entry point was reached
        cli.main(args=args, prog_name="hw-profile", standalone_mode=False,
                 obj={"command": shlex.join(["hw-profile", *args])})
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("hw-profile: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"hw-profile: {exc.format_message()}", err=True)
        sys.exit(2)
    except HwProfileError as exc:
        click.echo(f"hw-profile: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
