"""Public serving measurements, each predicted by the step-level roofline, the kernels alone, the estimate (kernels +
engine costs) and the estimate calibrated leave-one-out: the table of docs/sim-to-real.md.

    python benchmarks/sim_to_real.py [--markdown]

Each measurement is a decode operating point: output tokens/s per GPU at R running requests per table row (a
replica under tensor parallelism, a GPU under data-parallel attention), with the mean context and the speculation
it ran (tau emitted tokens and a verification budget per request-step). A table predicts it as

    tok/s/GPU = R x tau / (T(R x budget, R x context) + (budget - 1) x drafter(R, R x context)) / GPUs per row

(an MTP chain drafts budget - 1 tokens, one forward each).

Calibrated (leave-one-out): the estimate fitted (``hw-profile calibrate --prior``) on the two points of the same
deployment nearest the one predicted in concurrency (as a planner calibrates near the load they plan for), never on
the point itself; "-" where the deployment has no two
other points. Nothing here is fitted to the measurement it predicts.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hw_profile.calibrate.prior_fit import fit_on_prior
from hw_profile.errors import HwProfileError
from hw_profile.estimate.dp_ep import DpEpParams
from hw_profile.estimate.dp_ep import step_time_ms as dp_ep_step_ms
from hw_profile.estimate.engine_costs import NIC_GB_S, engine_defaults
from hw_profile.estimate.estimate import (
    Deployment,
    drafter_costs,
    drafter_shapes,
    estimate_points,
    exchange_ms,
    kernel_source,
    kernel_times,
    kernel_twin,
    routed_part,
)
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import get_shape
from hw_profile.kernels.roofline import step_time_ms as roofline_step_ms
from hw_profile.tables.step_table import StepTable

ROOT = Path(__file__).resolve().parents[1]
FIG8 = ROOT / "scenarios" / "reference" / "paper_fig7_fig8_mtp1.csv"


@dataclass(frozen=True)
class Measurement:
    key: str
    source: str
    model: str
    gpu: str
    gpus: int
    ep: int
    engine: str
    parallel: str
    requests: float  # running requests per table row
    context: float  # mean KV tokens per running request
    tau: float
    budget: float
    measured: float  # output tok/s per GPU
    group: str  # points of one deployment (for leave-one-out calibration)
    dtype: str = "fp8"
    overlap: str = "two-batch"  # the expert-parallel deployments here overlap communication with a second micro-batch
    moe_imbalance: float | str = "auto"  # 1.0 where the source forced perfectly balanced routing
    kv_dtype: str = ""  # "fp8" where the deployment chose an fp8 KV cache; "" = the model's own, else bf16
    expert_dtype: str = ""  # the routed experts' type where the deployment sets it (--expert-dtype); "" = the model's
    nic_gb_s: float = NIC_GB_S  # line rate per GPU an exchange across nodes moves its volume at
    overlap_schedule: bool = True  # False where the engine ran without its overlap scheduler (SGLang speculating before spec v2)


def measurements() -> list[Measurement]:
    out = [
        # DeepSeek's open-infra week, day 6 (2025-03-01): V3/R1 decode on H800, EP144 with DP attention, MTP on;
        # 14.8k output tok/s per 8-GPU node at 20-22 tok/s per user -> R = 1,850 / 21 per GPU. Context is not
        # published: ASSUMED 4,000 tokens (input:output 608B:168B a day, 56% cache hits).
        Measurement("deepseek-day6", "DeepSeek open-infra day 6: V3/R1 decode, H800, EP144", "deepseek-v3", "H800",
                    144, 144, "sglang", "dp", 1850.0 / 21.0, 4000.0, 1.875, 2.0, 1850.0, "deepseek-day6"),
        # SGLang's large-scale EP post (LMSYS, 2025-05-05): V3 on 12 x 8 H100, decode EP72 with DP attention, no
        # MTP, 2,000-token inputs: 22.3k output tok/s per node, ITL about 100 ms -> R = 2,788 x 0.1 per GPU.
        Measurement("sglang-h100-ep72", "SGLang large-scale EP: V3 decode, H100, EP72, 2k inputs", "deepseek-v3",
                    "H100", 72, 72, "sglang", "dp", 22300.0 / 8 * 0.1, 2100.0, 1.0, 1.0, 22300.0 / 8,
                    "sglang-h100-ep72"),
    ]
    out += infersim_points()
    out += cookbook_points()
    out += ant_h20_points()
    out += [mtp_blog_point()]
    out += fig8_points()
    return out


def mtp_blog_point(requests: float = 2.0, tau: float = 1.0, budget: float = 1.0,
                   overlap_schedule: bool = True) -> Measurement:
    """SGLang's MTP post (LMSYS blog 2025-07-17, case study 1; its decode command in sglang issue 7998): DeepSeek-V3
    decode on two nodes of 8 H200, data-parallel attention over 16 with EP16 (DeepEP low-latency, no two-batch
    overlap), bf16 cache, 2 requests per rank, 65,536-token inputs and 4,096-token outputs (mean context ASSUMED
    67,584, mid-output). Without MTP and with SGLang's overlap scheduler (the engine costs' default): 60.4 tok/s per
    rank."""
    return Measurement("mtp-blog-h200-ep16", "SGLang MTP post: V3 decode, H200, EP16, 2 req/GPU, 64k inputs",
                       "deepseek-v3", "H200", 16, 16, "sglang", "dp", requests, 65536.0 + 4096.0 / 2, tau, budget,
                       60.4, "mtp-blog-h200-ep16", overlap="none", overlap_schedule=overlap_schedule)


def ant_h20_points() -> list[Measurement]:
    """DeepSeek-R1 decode on H20-96G under SGLang 0.5.2 (Ant Group with the SGLang team, LMSYS blog 2025-09-26).
    Each figure is the median throughput of 100 logged decode batches at one batch size per GPU: data-parallel
    attention over 16 GPUs on two nodes with EP16 (DeepEP low-latency), fp8 MLA cache, MTP with one draft step (two
    tokens verified, accepted length 1.8-1.9: tau 1.85) unless said, 4,096-token inputs and 1,536-token outputs
    (mean context ASSUMED 4,864, mid-output).
    - They run SGLang's single-batch overlap (dispatch under the shared experts, combine under the down GEMM):
      ``overlap=single-batch``. (Predicted first without it, as ``none``, before the estimate had that mode.)
    - SGLang 0.5.2 turns its overlap scheduler off whenever it speculates with EAGLE or MTP (its ``server_args``):
      ``overlap_schedule=false``. (Predicted first with it on, the engine costs' default, before they had the term.)
    - Each node has four 400 Gb/s NICs for eight GPUs (25 GB/s a GPU), and the post puts about half the EP16
      exchange on NVLink (a quarter at EP32). So the NICs carry the rest: for the whole volume, an effective 50 GB/s
      per GPU at EP16 and 33 at EP32."""
    def point(requests: float, measured: float, ep: int = 16, tau: float = 1.85, budget: float = 2.0,
              what: str = "") -> Measurement:
        return Measurement(f"ant-h20-ep{ep}-bs{requests:g}",
                           f"SGLang on H20 (Ant Group): R1 decode, EP{ep}, {requests:g} req/GPU{what}", "deepseek-v3",
                           "H20", ep, ep, "sglang", "dp", requests, 4096.0 + 1536.0 / 2, tau, budget, measured,
                           f"ant-h20-ep{ep}", overlap="single-batch", kv_dtype="fp8",
                           nic_gb_s=25.0 / (1.0 - 8.0 / ep), overlap_schedule=False)

    return [
        point(1, 43.0),
        point(8, 278.0),
        # their lowest-latency tier: two draft steps, three tokens verified, accepted length 2.4-2.7
        point(12, 423.0, tau=2.55, budget=3.0, what=", 2 draft steps"),
        point(32, 675.0),
        point(48, 714.0),
        # the same at EP32 over four nodes, from their comparison of EP sizes
        point(8, 293.0, ep=32),
        point(32, 585.0, ep=32),
    ]


def cookbook_points() -> list[Measurement]:
    """Single-stream decode on one 8-GPU B200 node under SGLang 0.5.8 with each model's cookbook settings (a public
    sweep by B. Hamm, 2026-02-16, gist 78563d0d): time per output token at concurrency 1 over random 1,000-token
    inputs and outputs (mean context ASSUMED 1,500). Tensor parallel over 8, experts split by it (SGLang's default)."""
    def point(key: str, source: str, model: str, tpot_ms: float, dtype: str) -> Measurement:
        return Measurement(key, source, model, "B200", 8, 1, "sglang", "tp", 1.0, 1500.0, 1.0, 1.0,
                           1000.0 / tpot_ms / 8, key, dtype=dtype, overlap="none")

    return [
        point("cookbook-qwen3-235b", "SGLang cookbook sweep: Qwen3-235B-A22B bf16, 8 B200 TP8, one stream",
              "qwen3-235b-a22b", 6.70, "bf16"),
        # the sweep labels it BF16, but 1T parameters in bf16 exceed 8 x 183 GB: the released fp8 checkpoint
        point("cookbook-kimi-k2", "SGLang cookbook sweep: Kimi-K2 fp8, 8 B200 TP8, one stream", "kimi-k2", 7.54,
              "fp8"),
    ]


def infersim_points() -> list[Measurement]:
    """The measured ("actual") decode throughputs in InferSim's README (alibaba/InferSim, 2025-09), at the operating
    points of its examples, which reproduce its simulated figures (2,675, 2,581, 2,632 tok/s/GPU) at these batches."""
    return [
        # DeepSeek's published decode profile (deepseek-ai/profile-data), as InferSim reads it: V3 on H800, EP128
        # over 16 nodes, DP attention, two micro-batches of 64 requests per GPU, 4K prompts (InferSim's example:
        # 4,096 in + 1,786 out, mean context 4,989), routing forced perfectly balanced for the profile. No MTP.
        Measurement("profile-h800-ep128", "DeepSeek decode profile (via InferSim): V3, H800, EP128", "deepseek-v3",
                    "H800", 128, 128, "sglang", "dp", 128.0, 4096.0 + 1786.0 / 2, 1.0, 1.0, 2324.0,
                    "profile-h800-ep128", moe_imbalance=1.0),
        # SGLang, measured by InferSim's authors: Qwen3-8B-FP8 on one H20, 64 requests of 4,096 in + 2,048 out
        # (mean context 5,120). The KV cache is the engine's default, bf16.
        Measurement("infersim-qwen3-8b-h20", "InferSim's SGLang run: Qwen3-8B fp8, one H20, batch 64", "qwen3-8b",
                    "H20", 1, 1, "sglang", "tp", 64.0, 5120.0, 1.0, 1.0, 2682.0, "infersim-qwen3-8b-h20",
                    overlap="none"),
        # The same for Qwen3-30B-A3B in bf16 on four H20: 100 requests per GPU, data-parallel attention with the
        # experts over the four (as InferSim prices it; the SGLang flags are not published), same lengths.
        Measurement("infersim-qwen3-30b-h20", "InferSim's SGLang run: Qwen3-30B-A3B bf16, 4 H20, 100 req/GPU",
                    "qwen3-30b-a3b", "H20", 4, 4, "sglang", "dp", 100.0, 5120.0, 1.0, 1.0, 2749.0,
                    "infersim-qwen3-30b-h20", dtype="bf16", overlap="none"),
    ]


def fig8_points() -> list[Measurement]:
    """The DSpark paper's Figure 8 MTP-1 lines (V4 in production): throughput per GPU against concurrency per GPU.
    Deployment ASSUMED as the project's calibrated paper tables assume it: H800, one GPU a DP rank, EP64, fp8 with
    fp4 experts, tau 1.875, budget 2, mean context 4,700."""
    import pandas as pd

    df = pd.read_csv(FIG8)
    df = df[(df["figure"] == "fig8") & (df["system"] == "mtp-1")]
    out = []
    for model, frame in df.groupby("model"):
        frame = frame.sort_values("x")
        for c in (8, 32, 64, 128, 192):
            x = frame["x"].to_numpy(float)
            y = float(np.interp(c, x, frame["y"].to_numpy(float)))
            out.append(Measurement(f"paper-{model}-c{c}", f"DSpark paper Fig. 8, {model} MTP-1 at {c} req/GPU",
                                   f"deepseek-{model}", "H800", 64, 64, "sglang", "dp", float(c), 4700.0, 1.875,
                                   2.0, y, f"paper-{model}"))
    return out


def deployment(m: Measurement) -> Deployment:
    return Deployment(gpu=get_gpu(m.gpu), gpus=m.gpus, ep=m.ep, dtype=m.dtype, parallel=m.parallel, engine=m.engine,
                      costs=replace(engine_defaults(m.engine), overlap=m.overlap, moe_imbalance=m.moe_imbalance,
                                    verify_tokens_per_request=max(1.0, m.budget), nic_gb_s=m.nic_gb_s,
                                    overlap_schedule=m.overlap_schedule))


def model_shape(m: Measurement):
    """The model's shape with the deployment's KV cache and experts' types (``hw-profile estimate --kv-dtype``,
    ``--expert-dtype``)."""
    shape = get_shape(m.model)
    if m.kv_dtype:
        shape = replace(shape, kv_dtype=m.kv_dtype)
    return replace(shape, expert_dtype=m.expert_dtype) if m.expert_dtype else shape


def per_gpu(m: Measurement, step_ms: float) -> float:
    rows_gpus = 1 if m.parallel == "dp" else m.gpus
    return m.requests * m.tau / (step_ms * 1e-3) / rows_gpus


def draft_ms(m: Measurement, kernels: str, sibling=None) -> float:
    """The MTP chain's forwards in one step: budget - 1 drafted tokens, one forward each."""
    if m.budget <= 1:
        return 0.0
    mtp, entry = drafter_shapes(model_shape(m), ["mtp"])["mtp"]
    dep = deployment(m)
    window = entry.get("attention_window")
    k = m.requests * (min(m.context, window) if window else m.context)
    one = estimate_points(mtp, dep, np.array([m.requests]), np.array([k]), kernels=kernels,
                          costs=drafter_costs(dep.costs), sibling=sibling).ms[0]
    return float(one) * (round(m.budget) - 1)


def predict_roofline(m: Measurement) -> float:
    shape = model_shape(m)
    b, k = m.requests * m.budget, m.requests * m.context
    if m.parallel == "dp":
        ms, _ = dp_ep_step_ms(shape, get_gpu(m.gpu), b, k, dtype=m.dtype, params=DpEpParams(ep=m.ep))
    else:
        ms, _ = roofline_step_ms(shape, get_gpu(m.gpu), b, k, dtype=m.dtype, gpus=m.gpus, ep=m.ep)
    return per_gpu(m, float(ms))


def predict_kernels(m: Measurement) -> float | None:
    """The kernel database alone (no engine costs), where it covers the GPU and engine or its twin
    (``kernel_twin``)."""
    dep = deployment(m)
    twin = kernel_twin(dep.gpu, dep.engine)
    dep = dep if twin is None else replace(dep, gpu=twin)
    db = kernel_source("auto", dep.gpu, dep.engine)
    if db is None:
        return None
    shape = model_shape(m)
    b = np.array([m.requests * m.budget])
    try:
        kt = kernel_times(db, shape, dep, b, np.array([m.requests]), np.array([m.context]))
    except HwProfileError:  # a model or layout the database lacks: no prediction
        return None
    return per_gpu(m, float(np.asarray(kt.ms)[0]))


def target_ms(m: Measurement, kernels: str = "auto", sibling=None) -> float:
    """The estimate's target step at the measurement's operating point (no drafter)."""
    est = estimate_points(model_shape(m), deployment(m), np.array([m.requests * m.budget]),
                          np.array([m.requests * m.context]), kernels=kernels, sibling=sibling)
    return float(est.ms[0])


def estimate_step(m: Measurement, kernels: str = "auto", sibling=None) -> float:
    return target_ms(m, kernels, sibling) + draft_ms(m, kernels, sibling)


def prior_table(m: Measurement) -> StepTable:
    from hw_profile.estimate.estimate import estimate_table

    b_axis = np.unique(np.round(np.geomspace(1, 4096, 40)).astype(int))
    k_axis = np.unique(np.concatenate([[0], np.round(np.geomspace(1024, 4_000_000, 30)).astype(int)]))
    return estimate_table(model_shape(m), deployment(m), m.key, b_axis=b_axis, k_axis=k_axis)


def predict_calibrated(m: Measurement, group: list[Measurement]) -> float | str | None:
    """The estimate calibrated on the two other points of ``m``'s deployment nearest in concurrency; None where it
    has no two others, "no fit" where ``calibrate --prior`` refuses them (none of the points here)."""
    others = sorted((g for g in group if g.key != m.key), key=lambda g: abs(math.log(g.requests / m.requests)))
    if len(others) < 2:
        return None
    return calibrated_on(m, others[:2])


def calibrated_on(m: Measurement, fit_on: list[Measurement]) -> float | str:
    """``m`` predicted by the estimate calibrated (``calibrate --prior``) on the points ``fit_on``; "no fit" where
    calibration refuses them."""
    prior = prior_table(m)
    b = [g.requests * g.budget for g in fit_on]
    k = [g.requests * g.context for g in fit_on]
    ms = [g.requests * g.tau / g.measured * 1e3 / (1 if g.parallel == "dp" else g.gpus) - draft_ms(g, "auto")
          for g in fit_on]
    try:
        fit = fit_on_prior(prior, b, k, ms)
    except HwProfileError:
        return "no fit"
    grid = replace(prior.grid, graphs=None)  # as the fit reads it: stairs are padding, not a cost it scales
    bm, km = m.requests * m.budget, m.requests * m.context
    base = grid.step_ms(1, 0)
    at_b = grid.step_ms(bm, 0)
    step = base + fit.f_ms + fit.s * (at_b - base) + fit.c * (grid.step_ms(bm, km) - at_b)
    return per_gpu(m, step + draft_ms(m, "auto"))


def one_point_calibration() -> list[list[str]]:
    """The points whose deployment has exactly one other point, each predicted by the estimate calibrated on that
    one: not in the headline's calibrated column (leave-one-out there fits two points)."""
    ms = measurements()
    out = []
    for m in ms:
        others = [g for g in ms if g.group == m.group and g.key != m.key]
        if len(others) == 1:
            out.append([m.source, tok_s(m.measured), others[0].source.split(", ")[-1],
                        fmt(calibrated_on(m, others), m.measured)])
    return out


@dataclass(frozen=True)
class SpecComparison:
    """Speculative decoding against none on one deployment: the measured speed-up of decoding at its operating
    point (``point``: tau and budget with speculation; no throughput is published, so its ``measured`` is 0)."""

    point: Measurement
    measured: float  # speed-up (with / without)
    baseline_overlap_schedule: bool = False  # whether the run without speculation had the overlap scheduler


def spec_comparisons() -> list[SpecComparison]:
    # SGLang's DeepSeek-V3 MTP (docs, early 2025): decoding 1.8x faster at batch 1 and 1.5x at batch 32 on H200
    # TP8. Its recommended setting drafts 3 steps and verifies 4 tokens; the accepted length is not in that line:
    # ASSUMED tau 2.5 (the MTP module's ~0.85 first-token acceptance decaying over reused steps). Context ASSUMED
    # 1,000 tokens (short benchmark prompts). SGLang then ran EAGLE/MTP without its overlap scheduler (its
    # server_args turned it off); the run without MTP ASSUMED with it, the default.
    def point(key: str, source: str, requests: float) -> Measurement:
        return Measurement(key, source, "deepseek-v3", "H200", 8, 1, "sglang", "tp", requests, 1000.0, tau=2.5,
                           budget=4.0, measured=0.0, group=key, overlap="none", overlap_schedule=False)

    # SGLang's MTP post (case study 1, as ``mtp_blog_point``): with MTP and without the overlap scheduler (MTP did
    # not support it then), against neither: 81.5 tok/s per rank with 3 tokens verified (accepted length 2.18) and
    # 82.0 with 4 (2.44), against 51.0 (also without it).
    # Case study 2: 12 decode nodes of 8 H200 (EP96, data-parallel attention), 128 requests per rank, 2,000-token
    # inputs and 100-token outputs (context ASSUMED 2,050), MTP with one draft step against neither (both without
    # the overlap scheduler, as the post says of its baseline): +14.2%. Its
    # accepted length is not published: ASSUMED 1.8, the low end of the 1.8-1.9 Ant Group report for the same
    # setting on R1; two-batch overlap ASSUMED on, as in SGLang's EP72 post.
    wide = Measurement("mtp-blog-h200-ep96", "SGLang MTP post: V3, H200, EP96, 128 req/GPU, MTP 2 tokens",
                       "deepseek-v3", "H200", 96, 96, "sglang", "dp", 128.0, 2050.0, tau=1.8, budget=2.0,
                       measured=0.0, group="mtp-blog-h200-ep96", overlap_schedule=False)
    return [
        SpecComparison(point("sglang-mtp-bs1", "SGLang DeepSeek-V3 MTP, H200 TP8, batch 1", 1.0), 1.8, True),
        SpecComparison(point("sglang-mtp-bs32", "SGLang DeepSeek-V3 MTP, H200 TP8, batch 32", 32.0), 1.5, True),
        SpecComparison(replace(mtp_blog_point(tau=2.18, budget=3.0, overlap_schedule=False), measured=0.0,
                               source="SGLang MTP post: V3, H200, EP16, 2 req/GPU, MTP 3 tokens"), 81.5 / 51.0),
        SpecComparison(replace(mtp_blog_point(tau=2.44, budget=4.0, overlap_schedule=False), measured=0.0,
                               source="SGLang MTP post: V3, H200, EP16, 2 req/GPU, MTP 4 tokens"), 82.0 / 51.0),
        SpecComparison(wide, 1.142),
    ]


def predict_speedup(c: SpecComparison) -> float:
    """Decoding speed with speculation over without, from the estimate's tables."""
    spec = c.point
    plain_ms = target_ms(replace(spec, tau=1.0, budget=1.0, overlap_schedule=c.baseline_overlap_schedule))
    spec_ms = target_ms(spec) + draft_ms(spec, "auto")
    return (spec.tau / spec_ms) / (1.0 / plain_ms)


def ep_comparisons(table: list[dict]) -> list[list[str]]:
    """The Ant Group post's comparison of EP sizes on H20: EP32 over EP16 at the same requests per GPU, measured and
    as the estimate has it (from the rows above)."""
    by_key = {r["key"]: r for r in table}
    out = []
    for requests in (8, 32):
        wide, narrow = by_key[f"ant-h20-ep32-bs{requests}"], by_key[f"ant-h20-ep16-bs{requests}"]
        measured, pred = wide["measured"] / narrow["measured"], wide["estimate"] / narrow["estimate"]
        out.append([f"SGLang on H20 (Ant Group): R1 decode, EP32 over EP16 at {requests} req/GPU", f"{measured:.2f}x",
                    f"{pred:.2f}x", "right" if (pred > 1) == (measured > 1) else "WRONG"])
    return out


def rows() -> list[dict]:
    ms = measurements()
    groups: dict[str, list[Measurement]] = {}
    for m in ms:
        groups.setdefault(m.group, []).append(m)
    out = []
    for m in ms:
        est = per_gpu(m, estimate_step(m))
        out.append({"key": m.key, "source": m.source, "measured": m.measured,
                    "roofline": predict_roofline(m), "kernels": predict_kernels(m), "estimate": est,
                    "calibrated": predict_calibrated(m, groups[m.group])})
    return out


def overlap_sensitivity() -> list[list[str]]:
    """The two-batch rows again with the whole exchange paid and no split (``overlap=none``): not a prediction (the
    published deployments split), but it shows what the split costs and hides at each load."""
    out = []
    for m in measurements():
        if m.overlap != "two-batch":
            continue
        split, whole = (per_gpu(x, estimate_step(x)) for x in (m, replace(m, overlap="none")))
        out.append([m.source, tok_s(m.measured), fmt(split, m.measured), fmt(whole, m.measured)])
    return out


def exchange_against_experts() -> list[list[str]]:
    """Per step of the Fig. 8 rows under their assumed deployment: the whole expert-parallel exchange and the routed
    experts' compute, the two the DeepSeek-V4 report compares (it finds a MoE layer's communication shorter than its
    computation in its own deployment)."""
    out = []
    for m in fig8_points():
        shape = model_shape(m)
        dep = deployment(m)
        b = np.array([m.requests * m.budget])
        est = estimate_points(shape, dep, b, np.array([m.requests * m.context]))
        routed = routed_part(est.parts)[0]
        out.append([m.source, f"{exchange_ms(shape, dep, b)[0]:.1f}", f"{routed:.1f}",
                    f"{m.requests * m.tau / m.measured * 1e3:.1f}"])
    return out


def expert_type_sensitivity() -> list[list[str]]:
    """The Fig. 8 rows with V4's routed experts in fp8 (``--expert-dtype fp8``: DeepGEMM's Hopper Mega MoE runs FP8 x
    FP8) against the assumption made before (fp4 weights at the fp8 rate), both on the roofline, as the headline
    rows are (the database has no fp4 experts on Hopper): not a prediction."""
    out = []
    for m in fig8_points():
        fp8 = replace(m, expert_dtype="fp8")
        out.append([m.source, tok_s(m.measured), fmt(per_gpu(m, estimate_step(m, "roofline")), m.measured),
                    fmt(per_gpu(m, estimate_step(fp8, "roofline")), m.measured)])
    return out


SIBLING = "H200"  # the covered GPU of the Hopper generation the uncovered H800 and H20 rows borrow from


def sibling_sensitivity(table: list[dict]) -> list[list[str]]:
    """Every row of ``table`` (``rows()``) on a GPU the kernel database lacks, with ``--sibling H200`` (its roofline
    plus what the H200's measured kernels take beyond their own roofline), where the H200 has data for the model:
    not a prediction in the headline (the option was built after these rows were seen)."""
    from hw_profile.hardware.gpus import get_gpu
    from hw_profile.kernels.database import covers

    sibling = get_gpu(SIBLING)
    by_key = {m.key: m for m in measurements()}
    out = []
    for row in table:
        m = by_key[row["key"]]
        if covers(m.gpu, m.engine):
            continue
        est = estimate_points(model_shape(m), deployment(m), np.array([m.requests * m.budget]),
                              np.array([m.requests * m.context]), sibling=sibling)
        transferred = (per_gpu(m, float(est.ms[0]) + draft_ms(m, "auto", sibling))
                       if est.source[0] == "roofline+sibling" else "no H200 data")
        out.append([m.source, tok_s(m.measured), fmt(row["estimate"], m.measured), fmt(transferred, m.measured)])
    return out


def parts_by_source(m: Measurement) -> list[list[str]]:
    """One row's step (ms) part by part, from the roofline and from the measured kernels: where the two sources
    disagree. Not a prediction (the row is in the main table); it says which part a roofline misses."""
    dep, shape = deployment(m), model_shape(m)
    b, k = np.array([m.requests * m.budget]), np.array([m.requests * m.context])
    roof, kern = (estimate_points(shape, dep, b, k, kernels=src) for src in ("roofline", "auto"))
    families = [("dense GEMMs", ("gemm",)), ("attention", ("attention",)), ("routed experts", ("moe",)),
                ("expert-parallel exchange", ("a2a",)), ("LM head", ("lm_head",)),
                ("engine (fixed, sampling)", ("fixed", "sampling"))]

    def total(parts, keys):
        return sum(float(np.ravel(parts.get(key, 0.0))[0]) for key in keys)

    out = [[name, f"{total(roof.parts, keys):.1f}", f"{total(kern.parts, keys):.1f}"] for name, keys in families]
    out.append(["step", f"{roof.ms[0]:.1f}", f"{kern.ms[0]:.1f}"])
    return out


def tok_s(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def fmt(pred: float | str | None, measured: float) -> str:
    if pred is None:
        return "-"
    if isinstance(pred, str):
        return pred
    return f"{tok_s(pred)} ({(pred / measured - 1) * 100:+.0f}%)"


def print_table(head: list[str], lines: list[list[str]], markdown: bool) -> None:
    """A markdown table (for docs/sim-to-real.md), or aligned columns for the terminal."""
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for line in lines:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    for line in [head, *lines]:
        print("  ".join(x.rjust(w) if i else x.ljust(w) for i, (x, w) in enumerate(zip(line, widths, strict=True))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="print the markdown table of docs/sim-to-real.md")
    args = ap.parse_args()
    table = rows()
    head = ["measurement", "measured tok/s/GPU", "roofline", "kernels", "kernels + engine", "calibrated (LOO)"]
    lines = []
    for r in table:
        lines.append([r["source"], tok_s(r["measured"]), fmt(r["roofline"], r["measured"]),
                      fmt(r["kernels"], r["measured"]), fmt(r["estimate"], r["measured"]),
                      fmt(r["calibrated"], r["measured"])])
    print_table(head, lines, args.markdown)
    print()
    head2 = ["comparison", "measured speed-up", "kernels + engine", "sign"]
    lines2 = []
    for c in spec_comparisons():
        pred = predict_speedup(c)
        right = (pred > 1) == (c.measured > 1)
        lines2.append([c.point.source, f"{c.measured:.2f}x", f"{pred:.2f}x", "right" if right else "WRONG"])
    print_table(head2, lines2, args.markdown)
    print()
    print_table(head2, ep_comparisons(table), args.markdown)
    print()
    for column, name in (("estimate", "kernels + engine"), ("roofline", "roofline"), ("calibrated", "calibrated")):
        errs = [abs(r[column] / r["measured"] - 1) for r in table if isinstance(r[column], float)]
        print(f"{name}: median |error| {np.median(errs) * 100:.0f}%, max {max(errs) * 100:.0f}%, "
              f"within 30%: {sum(e <= 0.3 for e in errs)} of {len(errs)}")
    print()
    print("Sensitivity, not predictions: the two-batch rows with no split (the whole exchange paid, weights read "
          "once):")
    print()
    print_table(["measurement", "measured tok/s/GPU", "two-batch (as published)", "no split"],
                overlap_sensitivity(), args.markdown)
    print()
    print("The Fig. 8 rows' assumed deployment, per step (ms): the expert-parallel exchange against the routed "
          "experts:")
    print()
    print_table(["measurement", "exchange", "routed experts", "measured step"], exchange_against_experts(),
                args.markdown)
    print()
    print("The Fig. 8 rows with V4's routed experts in fp8, as DeepGEMM runs them on Hopper:")
    print()
    print_table(["measurement", "measured tok/s/GPU", "fp4 at the fp8 rate (as assumed)", "fp8 experts"],
                expert_type_sensitivity(), args.markdown)
    print()
    print("Calibrated on one point, the other of the same deployment:")
    print()
    print_table(["measurement", "measured tok/s/GPU", "calibrated on", "calibrated"], one_point_calibration(),
                args.markdown)
    print()
    print(f"The rows on GPUs the kernel database lacks, with --sibling {SIBLING} (built after these rows were seen):")
    print()
    print_table(["measurement", "measured tok/s/GPU", "kernels + engine", f"--sibling {SIBLING}"],
                sibling_sensitivity(table), args.markdown)
    print()
    h200 = mtp_blog_point()
    print(f"Where the roofline and the measured kernels part for {h200.source} (ms a step; measured step "
          f"{h200.requests * h200.tau / h200.measured * 1e3:.1f}):")
    print()
    print_table(["part", "roofline", "measured kernels"], parts_by_source(h200), args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
