"""``hw-profile estimate``: step-time tables for a (model, GPU, parallelism, serving engine) nobody here measured.

A step is priced as its kernels plus what the engine adds around them (``hw_profile.estimate.engine_costs``):

    T(B, K) = kernels(B, K) + step_fixed + eager launches (B past the captured graphs) + sampling (B x vocab)

The kernels come from the best source available, recorded per point in the table's ``source`` column:

- ``kernels``: the measured kernel database of NVIDIA's aiconfigurator-core (``hw_profile.kernels.database``, the
  optional extra ``dspark-sim[kernels]``), for the GPUs and engines it covers; ``inside`` says whether every
  kernel lookup of the point lay inside measured data;
- ``roofline``: a kernel-level roofline otherwise (H20, AMD parts, a model the database lacks). Unlike the
  step-level roofline of ``hw-profile analytic`` (one max over the whole step's bytes and FLOPs, a speed bound), each
  kernel family here is bound by its own resource and the families add, as kernels run one after another: the
  dense GEMMs (attention projections, dense and shared MLPs, router, LM head), the routed experts (weights of the
  experts the step touches; FLOPs scaled by the busiest expert-parallel rank's load), attention (KV reads once per
  request; compute for every verified token over its request's context), and communication (tensor-parallel
  all-reduces, or expert-parallel dispatch and combine), each part named as the measured kernels name the same
  family (``hw_profile.kernels.families``). Each launch also pays the fixed latency measured kernels
  show above their roofline at one token (``KERNEL_FLOOR_US``, from ``tools.kernel_floors``);
- ``kernels:<twin>``: for a GPU the database lacks whose datasheet a covered GPU shares (``kernel_twin``: the
  H800 is an H100 with a slower NVLink), that GPU's measured kernels, communication priced on this GPU's links;
- ``roofline+sibling``: asked for with ``--sibling GPU``, for a GPU the database lacks: that roofline (without the
  fixed latencies) plus, family by family, what a covered sibling's measured kernels take beyond the sibling's own
  roofline at the same point (``sibling_parts``).

Under SGLang with data-parallel attention the database also prices the routed experts with DeepEP's expert kernel
and the expert-parallel exchange with DeepEP's measured low-latency dispatch and combine, where it has the group's
node count (``hw_profile.kernels.ops.moe_times``, ``exchange_times``).

Parallelism: ``tp`` splits attention and dense weights over the replica's GPUs (routed experts over ``ep`` groups
inside it) and the table describes the replica; ``dp`` is DeepSeek-style decode, every GPU a data-parallel
attention rank holding the dense weights and E/ep routed experts, and the table describes one GPU (a scenario's
replica is then one GPU, ``gpus_per_replica: 1``, and ``replicas`` counts ranks). MLA and compressed-attention
caches are replicated over tensor-parallel ranks (one latent per token), so under ``tp`` every GPU reads all of it:
this is why DeepSeek-style deployments use ``dp``, the default for those models when ep > 1.

Each table's sidecar records the engine costs used, the sources, the notes of the kernel reader, a
``prefill_cost`` block (the attention of prompt chunks per (token, token attended) pair; their GEMMs are T's at
the step's total tokens), ``kind: estimate`` and, on the target's table, ``drafter_tables`` naming the
drafters' tables written beside it, so a scenario needs only ``hardware.table``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hw_profile.errors import HwProfileError
from hw_profile.estimate.accuracy import DECODE_WITHIN_30, estimate_expected_error
from hw_profile.estimate.dp_ep import stored_bytes_per_gpu, weight_parts_per_gpu
from hw_profile.estimate.engine_costs import (
    CAPTURE_COUNTS,
    EngineCosts,
    a2a_floor_us,
    a2a_latency_us,
    capture_sizes,
    imbalance_factor,
    launches_ms,
    sampling_ms,
    scheduler_ms_for,
    speculative_mode,
    two_batch_min_tokens,
)
from hw_profile.hardware.dtypes import kv_cache_bytes
from hw_profile.hardware.gpus import GPU, GPUS
from hw_profile.hardware.moe import routed_weight_params
from hw_profile.hardware.shapes import (
    COMPRESSED_SPARSE,
    DSA,
    LINEAR_HYBRIDS,
    ModelShape,
    dense_gemms,
    drafter_attention_window,
    drafter_config_fields,
    drafter_from_config,
    drafter_shape,
)
from hw_profile.kernels.families import (
    A2A,
    ATTENTION,
    COMM,
    EAGER,
    FIXED,
    GEMM,
    LAYERLESS,
    LM_HEAD,
    MHC,
    MOE,
    SAMPLING,
)
from hw_profile.kernels.roofline import (
    DTYPE_BYTES,
    RooflineParams,
    allreduce_s,
    default_b_axis,
    default_k_axis,
    expert_bytes,
    expert_compute_dtype,
    link_gb_s,
    markov_head_costs,
    stored_weight_bytes_per_gpu,
)
from hw_profile.tables.cuda_graphs import CudaGraphs
from hw_profile.tables.sidecar import SPECULATIVE_MODE, memory_fields
from hw_profile.tables.step_table import StepTable, VerifyAttention, table_meta
from hw_profile.tables.table_set import DrafterTable, TableSet

if TYPE_CHECKING:  # the kernel database's reader is imported only where it is used
    from hw_profile.kernels.database import KernelTimes
    from hw_profile.kernels.source import KernelSource

MARKOV_RANK = 256  # DSpark's Markov head (paper 5.1)
DSPARK_LAYERS_MOE = 3  # DSpark's V4 drafter: three MoE layers with a 128-token window (paper 5.1)
DSPARK_LAYERS_DENSE = 5  # the dense drafter the project's Qwen3 tables use
DFLASH_LAYERS = 5  # z-lab's DFlash drafters of Qwen3-4B and -8B: five dense layers, the target's head
DFLASH_FUSED = 5  # the target layers whose states DFlash fuses (its configs' dflash_config.target_layer_ids)
EAGLE3_FUSED = 3  # EAGLE-3 fuses a low, a middle and a high layer's states
EAGLE3_LAYERS = 1  # EAGLE-3: one dense decoder layer ...
EAGLE3_DRAFT_VOCAB = 32_000  # ... and its own head over a reduced draft vocabulary (SpecForge's default)
ESTIMATE_DRAFTERS = ("mtp", "dspark", "eagle3", "dflash")  # what --drafters knows
A2A_BYTES_PER_VALUE = 3.0  # fp8 dispatch + bf16 combine, per hidden value and expert copy
# What a measured kernel costs above its roofline at one token (us): a GEMM, one layer's decode attention, one
# layer's fused MoE; for DeepSeek-V4, one layer's attention module and its hyper-connection mixing; for DeepSeek
# sparse attention (DeepSeek-V3.2, GLM-5.2), one layer's attention module, projections inside. Medians from
# the kernel database over the GPUs it covers (``tools.kernel_floors``, which recomputes them); the
# kernel-level roofline adds them per launch, so that at low load it prices what kernels really take on GPUs the
# database lacks.
KERNEL_FLOOR_US = {GEMM: 4.3, ATTENTION: 11.1, MOE: 24.4, "v4_attention": 54.8, MHC: 26.8, "dsa_attention": 76.5}
# Inside one NVLink domain (``GPU.nvlink_domain``: an HGX board of 8, an NVL72 rack) the exchange runs over NVLink:
# its achieved bandwidth (RooflineParams.nvlink_gb_s, scaled to the part) and a latency floor of tens of
# microseconds per layer (NVSHMEM/IPC puts with no NIC in the path), taken as this many us for dispatch + combine.
# A group larger than the domain is priced as across nodes (PCIe-only parts: see ``GPU.nvlink_domain``).
A2A_NVLINK_US = 60.0


@dataclass(frozen=True)
class Deployment:
    gpu: GPU
    gpus: int = 1
    ep: int = 1
    dtype: str = "bf16"
    parallel: str = "tp"  # tp | dp (see the module docstring)
    engine: str = "vllm"
    costs: EngineCosts = field(default_factory=EngineCosts)
    roofline: RooflineParams = field(default_factory=RooflineParams)

    def __post_init__(self):
        # the host work an overlap scheduler hides depends on the layout (``engine_costs.scheduler_ms_for``)
        object.__setattr__(self, "costs", scheduler_ms_for(self.costs, self.parallel == "dp"))

    @property
    def table_gpus(self) -> int:
        """GPUs one table row describes: the replica under tp, one rank under dp."""
        return 1 if self.parallel == "dp" else self.gpus

    @property
    def head_split(self) -> int:
        """Ways the dense part and the attention heads are split: the tensor-parallel GPUs, 1 under dp."""
        return self.gpus if self.parallel == "tp" else 1

    @property
    def bandwidth(self) -> float:
        """Memory bandwidth one GPU achieves, bytes/s."""
        return self.gpu.hbm_tb_s * 1e12 * self.roofline.mem_eff

    def peak(self, dtype: str) -> float:
        """Arithmetic one GPU achieves in ``dtype``, FLOP/s."""
        return self.gpu.peak_tflops(dtype) * 1e12 * self.roofline.comp_eff


def default_parallel(shape: ModelShape, gpus: int, ep: int) -> str:
    """Data-parallel attention for a latent-cache MoE model over pure expert parallelism (DeepSeek's and SGLang's
    layout: tensor parallelism would copy the cache on every rank), else tensor parallel. A linear hybrid's latent
    cache is a small part of its attention, whose per-head weights and states tensor parallelism splits
    (Kimi-K3's linear layers hold 30B parameters: each data-parallel rank would hold them all)."""
    dp_layout = shape.latent_kv and shape.attention_kind not in LINEAR_HYBRIDS
    return "dp" if shape.is_moe and dp_layout and ep > 1 and ep == gpus else "tp"


def _bound(bytes_: np.ndarray, flops: np.ndarray, dep: Deployment, dtype: str) -> np.ndarray:
    """ms of one kernel family bound by the slower of its reads and its arithmetic on one GPU."""
    return np.maximum(bytes_ / dep.bandwidth, flops / dep.peak(dtype)) * 1e3


@dataclass(frozen=True)
class AttentionWork:
    """Attention's work on one GPU: bytes read per KV token (once per request), FLOPs per (query token x KV token),
    bytes read per query token and per request (a Gated DeltaNet request's states), and the type it computes in
    (its cache's: a bf16 cache runs bf16 kernels whatever the weights' dtype)."""
    per_kv: float
    per_query_kv: float
    per_query: float
    per_request: float
    dtype: str


def attention_work(shape: ModelShape, dep: Deployment) -> AttentionWork:
    g = dep.head_split
    # a latent cache is one copy on every tp rank; per-head caches split with the KV heads (``kv_heads_per_rank``)
    read_split = 1 if shape.latent_kv else shape.kv_heads / shape.kv_heads_per_rank(g)
    # a linear hybrid's per-token and per-request reads are its states, split with the heads whatever its cache
    state_split = g if shape.attention_kind in LINEAR_HYBRIDS else read_split
    kv_scale = kv_cache_bytes(shape, dep.dtype) / 2.0
    return AttentionWork(shape.kv_read_bytes_per_token * kv_scale / read_split, shape.attn_flops_per_kv_token / g,
                         shape.attn_read_bytes_per_query_token * kv_scale / state_split,
                         shape.attn_read_bytes_per_request * kv_scale / state_split,
                         "bf16" if kv_scale == 1.0 else dep.dtype)


def verify_attention(shape: ModelShape, dep: Deployment, costs: EngineCosts) -> VerifyAttention:
    """How a table prices verification's attention (``hw_profile.tables.step_table.VerifyAttention``), from the kernel-level
    roofline's attention terms: ns per KV token read, ns per (query token x KV token) computed, at the tokens per
    request the table assumes (``verify_tokens_per_request``)."""
    work = attention_work(shape, dep)
    return VerifyAttention(costs.verify_tokens_per_request, work.per_kv / dep.bandwidth * 1e9,
                           work.per_query_kv / dep.peak(work.dtype) * 1e9,
                           source="kernel-level roofline of the attention (hw_profile.estimate.estimate.attention_work)",
                           ns_per_request=work.per_request / dep.bandwidth * 1e9,
                           window=float(shape.sliding_window) if shape.windowed_layers else 0.0,
                           windowed_share=shape.windowed_share)


def attention_queries(b: np.ndarray, costs: EngineCosts) -> np.ndarray:
    """Query tokens per request the table assumes (see ``verify_tokens_per_request``): q, or B when B < q."""
    return np.minimum(b, costs.verify_tokens_per_request)


def kernel_floor_ms(shape: ModelShape) -> dict[str, float]:
    """Per family, the fixed latency of a step's kernels (``KERNEL_FLOOR_US`` per launch), ms. The same on every
    tensor-parallel GPU: each launches every kernel."""
    gemms = sum(layers for *_, layers in dense_gemms(shape))
    us = KERNEL_FLOOR_US
    # a V4 or DSA layer's attention is one module, its projections inside; a V4 layer's residual stream is mixed (mHC)
    attention = {COMPRESSED_SPARSE: us["v4_attention"], DSA: us["dsa_attention"]}.get(shape.attention_kind,
                                                                                       us[ATTENTION])
    # the roofline prices no mixing of its own: its floor is booked with the dense GEMMs (``ROOFLINE_HOLDS``)
    mixing = shape.layers * us[MHC] if shape.hyper_connections else 0.0
    return {GEMM: (gemms * us[GEMM] + mixing) * 1e-3, LM_HEAD: (us[GEMM] if shape.lm_head else 0.0) * 1e-3,
            MOE: shape.moe_layers * us[MOE] * 1e-3, ATTENTION: shape.layers * attention * 1e-3}


def roofline_parts(shape: ModelShape, dep: Deployment, b: np.ndarray, k: np.ndarray,
                   floors: bool = True) -> dict[str, np.ndarray]:
    """Kernel time (ms) per family for B tokens over K KV tokens on one GPU of the deployment: each family bound by
    its own resource, plus its kernels' fixed latency (``kernel_floor_ms``; ``floors=False`` leaves it out)."""
    b = np.asarray(b, dtype=float)
    k = np.asarray(k, dtype=float)
    wb = DTYPE_BYTES[dep.dtype]
    g = dep.head_split
    parts: dict[str, np.ndarray] = {}
    layer_params = shape.dense_params_per_gpu(g) - shape.head_params / g  # per GPU: DSA's indexer whole on each
    parts[GEMM] = _bound(np.full_like(b, layer_params * wb), 2.0 * layer_params * b, dep, dep.dtype)
    parts[LM_HEAD] = _bound(np.full_like(b, shape.head_params * wb / g), 2.0 * shape.head_params * b / g, dep,
                            dep.dtype)
    if shape.is_moe:
        k_exp, ep = shape.experts_per_token, dep.ep
        eb = expert_bytes(shape, dep.dtype)
        if dep.parallel == "dp":
            group_tokens = b * ep  # every rank runs a batch like this one
            routed_bytes = weight_parts_per_gpu(shape, b, ep)[1] * eb
            routed_flops = 2.0 * shape.moe_layers * k_exp * shape.expert_params * b
            imb = imbalance_factor(group_tokens * k_exp, ep, dep.costs)
        else:
            routed_bytes = routed_weight_params(shape, b, gpus=dep.gpus, ep=ep) * eb
            routed_flops = 2.0 * shape.moe_layers * k_exp * shape.expert_params * b / dep.gpus
            imb = imbalance_factor(b * k_exp, ep, dep.costs)
        parts[MOE] = _bound(routed_bytes, routed_flops * imb, dep, expert_compute_dtype(shape, dep.dtype))
    work = attention_work(shape, dep)
    queries = attention_queries(b, dep.costs)
    requests = b / queries
    attended = shape.attended_kv(k, requests)  # windowed layers read their window of each request at most
    attn_bytes = attended * work.per_kv + b * work.per_query + requests * work.per_request
    attn_flops = work.per_query_kv * attended * queries + shape.attn_flops_per_query_token * b / g
    parts[ATTENTION] = _bound(attn_bytes, attn_flops, dep, work.dtype)
    if floors:
        for family, ms in kernel_floor_ms(shape).items():
            if family in parts:
                parts[family] = parts[family] + ms
    # tensor-parallel all-reduces; the expert-parallel exchange of ``dp`` is added by ``with_exchange``
    parts[COMM] = (np.zeros_like(b) if dep.parallel == "dp" else
                   allreduce_s(shape, dep.gpu, b, dep.dtype, dep.gpus, dep.roofline) * 1e3)
    return parts


def exchange_ms(shape: ModelShape, dep: Deployment, b: np.ndarray) -> np.ndarray:
    """One expert-parallel dispatch and combine of ``b`` tokens per rank in every MoE layer, ms per step."""
    b = np.asarray(b, dtype=float)
    volume = b * shape.expert_width * A2A_BYTES_PER_VALUE * shape.experts_per_token * (dep.ep - 1) / dep.ep
    if dep.ep <= dep.gpu.nvlink_domain:
        lat_us = dep.costs.a2a_us_per_layer if dep.costs.a2a_us_per_layer is not None else A2A_NVLINK_US
        # the latency is a floor; past it the exchange is bound by its volume over NVLink
        per_layer = np.maximum(lat_us * 1e-3, volume / (link_gb_s(dep.gpu, dep.roofline) * 1e9) * 1e3)
    else:
        # over RDMA: a fixed latency plus the volume at the NIC's line rate (``engine_costs.a2a_latency_us``), never
        # below what DeepEP measures for a handful of tokens across that many nodes (``engine_costs.a2a_floor_us``)
        per_layer = np.maximum(a2a_floor_us(dep.ep, dep.costs) * 1e-3,
                               a2a_latency_us(dep.ep, dep.costs) * 1e-3 + volume / (dep.costs.nic_gb_s * 1e9) * 1e3)
    return shape.moe_layers * per_layer


def routed_part(parts: dict[str, np.ndarray]) -> np.ndarray | float:
    """The routed experts' part of a step's parts, whichever source priced them; 0 for a dense model."""
    return parts.get(MOE, 0.0)


def dispatch_and_combine(exchange: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An exchange's two halves by their bytes: dispatch a third (fp8 out), combine two thirds (bf16 back)."""
    return exchange / 3.0, exchange * 2.0 / 3.0


def two_batch_ms(half: dict[str, np.ndarray], exchange_half: np.ndarray) -> np.ndarray:
    """The layers of a step split into two micro-batches, each with the kernel parts ``half`` and one exchange of
    ``exchange_half``, laid out as DeepSeek's decode profile and SGLang's two-batch-overlap decode strategy run them:
    a micro-batch's dispatch runs under the other's attention projections and its own shared experts (the dense
    GEMMs), its combine under the other's core attention, and its routed experts between the two,
    exposed (they need the dispatched tokens and feed the combine) (``dispatch_and_combine``)."""
    routed = routed_part(half)
    attention = half[ATTENTION]
    dense = sum(v for key, v in half.items() if key not in (*LAYERLESS, MOE, ATTENTION))
    dispatch, combine = dispatch_and_combine(exchange_half)
    return 2.0 * (np.maximum(dispatch, dense) + routed + np.maximum(combine, attention))


def fused_moe_ms(routed: np.ndarray, exchange: np.ndarray, waves: float) -> np.ndarray:
    """One MoE layer as a fused kernel runs it (DeepGEMM's Mega MoE): dispatch, the routed experts and combine
    pipelined over ``waves`` waves of experts, so while one wave computes the next one's tokens arrive and the
    last one's results leave. A pipeline of three stages over n waves takes one wave of each stage plus n - 1
    waves of the slowest: (d + r + c) / n + (n - 1) / n x max(d, r, c), dispatch d and combine c by the exchange's
    bytes (``dispatch_and_combine``). One wave is the unfused layer; many tend to the slowest stage alone."""
    dispatch, combine = dispatch_and_combine(exchange)
    slowest = np.maximum(np.maximum(dispatch, routed), combine)
    return (dispatch + routed + combine) / waves + (waves - 1.0) / waves * slowest


def shared_experts_ms(shape: ModelShape, dep: Deployment, b: np.ndarray) -> np.ndarray:
    """The shared experts of every MoE layer on one GPU at ``b`` tokens, ms: bound by their weights' reads or their
    arithmetic, split like the dense part (over tensor-parallel GPUs; whole on each data-parallel rank)."""
    params = shape.moe_layers * shape.shared_experts * shape.shared_expert_params / dep.head_split
    b = np.asarray(b, dtype=float)
    return _bound(np.full_like(b, params * DTYPE_BYTES[dep.dtype]), 2.0 * params * b, dep, dep.dtype)


def single_batch_ms(exchange: np.ndarray, routed: np.ndarray, shared: np.ndarray) -> np.ndarray:
    """What one batch's exchange leaves exposed when each MoE layer overlaps it with its own kernels (SGLang's
    single-batch overlap): the dispatch under the shared experts, the combine under the routed experts' down
    projection (a third of their work), which hands it tokens block by block (``dispatch_and_combine``). The rest of
    each is paid."""
    dispatch, combine = dispatch_and_combine(exchange)
    return np.maximum(dispatch - shared, 0.0) + np.maximum(combine - routed / 3.0, 0.0)


def with_exchange(shape: ModelShape, dep: Deployment, b: np.ndarray, k: np.ndarray, parts: dict[str, np.ndarray],
                  parts_at, exchange_at=None, shared_at=None) -> dict[str, np.ndarray]:
    """``parts`` plus ``a2a``: what the expert-parallel exchange of a ``dp`` deployment adds to the step, by
    ``costs.overlap``. ``none``: the whole exchange. ``two-batch``: what two micro-batches (``two_batch_ms``, from
    ``parts_at(b / 2, k / 2)``) cost beyond the layers' kernels at the whole batch: the exposed exchange and the
    second read of the weights, from the engine's threshold up (``engine_costs.two_batch_min_tokens``); smaller
    steps run as one batch and pay the whole exchange. ``single-batch``: what the layers' own shared experts and
    down projections leave of the exchange (``single_batch_ms``; the shared experts at ``shared_at(tokens)``, as
    measured, else by their roofline). ``fused``:
    what the fused layer (``fused_moe_ms``) costs beyond its routed experts, inside one NVLink domain only.
    ``exchange_at(tokens per rank)``: the exchange's ms per step as measured; the estimate's own
    (``exchange_ms``) by default."""
    if dep.parallel != "dp" or not shape.is_moe or dep.ep <= 1:
        return parts
    if exchange_at is None:
        def exchange_at(tokens):
            return exchange_ms(shape, dep, tokens)
    whole = exchange_at(b)
    if dep.costs.overlap == "fused":
        if dep.ep > dep.gpu.nvlink_domain:
            raise HwProfileError(f"--cost overlap=fused: the fused MoE kernel moves tokens over NVLink, so the "
                                 f"expert-parallel group must fit one NVLink domain ({dep.gpu.nvlink_domain} "
                                 f"{dep.gpu.name} GPUs); got --ep {dep.ep}. Use overlap=two-batch, single-batch "
                                 "or none")
        routed = routed_part(parts)
        whole = fused_moe_ms(routed, whole, dep.costs.fused_waves) - routed
    elif dep.costs.overlap == "single-batch":
        shared = shared_experts_ms(shape, dep, b) if shared_at is None else shared_at(b)
        whole = single_batch_ms(whole, routed_part(parts), shared)
    elif dep.costs.overlap == "two-batch":
        layers = sum(v for key, v in parts.items() if key not in LAYERLESS)
        splits = b >= two_batch_min_tokens(dep.costs)
        # points that cannot be split are looked up whole (a kernel lookup needs a token) and their result unused
        half_b, half_k = np.where(splits, b / 2.0, b), np.where(splits, k / 2.0, k)
        split = two_batch_ms(parts_at(half_b, half_k), exchange_at(half_b))
        # never negative: a kernel is never cheaper per token at half the batch (clamped against interpolation)
        whole = np.where(splits, np.maximum(split - layers, 0.0), whole)
    return {**parts, A2A: whole}


def cuda_graphs(shape: ModelShape, dep: Deployment, costs: EngineCosts) -> CudaGraphs:
    """The engine's captured CUDA graphs for a table of ``shape`` (the sidecar's ``cuda_graphs`` block): its capture
    list, what it counts, and the least an eager step takes, its launches plus the host's cost."""
    sizes = capture_sizes(costs, dep.gpu.memory_gb)
    counts = CAPTURE_COUNTS.get(costs.engine, "tokens")
    floor = launches_ms(shape.layers, shape.moe_layers, costs) + costs.host_ms
    where = "set (--capture-sizes)" if costs.capture_sizes is not None else "the engine's default capture list"
    return CudaGraphs(sizes, counts, floor, f"{costs.engine}: {where} up to {sizes[-1]} {counts}; eager floor "
                      f"{floor:.3g} ms = launches ({costs.launch_us:g} us per kernel) + host cost")


def engine_parts(shape: ModelShape, dep: Deployment, b: np.ndarray, costs: EngineCosts,
                 kernels: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the engine adds to the step's ``kernels`` (ms per family): its host cost, sampling, and the launches of
    a step past the captured CUDA graphs (``cuda_graphs``). An eager step's launches are issued by the host while
    the GPU runs the kernels already launched, so the step takes the longer of the two, never less than the eager
    floor: a 600-token prompt chunk's compute-bound kernels hide them, a one-request decode outside the captured
    sizes is all launches. The ``eager`` part is what the floor adds; a written table leaves it to the lookup's
    rule (``hw_profile.tables.step_table``), which prices the same."""
    b = np.asarray(b, dtype=float)
    fixed = np.full_like(b, costs.host_ms)
    sampling = sampling_ms(b, shape.vocab if shape.lm_head else 0, dep.bandwidth, costs)
    graphs = cuda_graphs(shape, dep, costs)
    graph_ms = sum(kernels.values()) + fixed + sampling
    eager = (b > graphs.largest) & (graph_ms < graphs.eager_floor_ms)
    return {FIXED: fixed, EAGER: np.where(eager, graphs.eager_floor_ms - graph_ms, 0.0), SAMPLING: sampling}


class Advice(str):
    """A note that asks the user to decide something (install an extra, pick another expert dtype): the sidecar
    lists these under ``advice`` too, and ``hw-profile estimate`` always prints them."""


@dataclass
class Estimate:
    ms: np.ndarray
    parts: dict[str, np.ndarray]
    source: np.ndarray  # per point: "kernels", "kernels:<twin>", "roofline" or "roofline+sibling"
    inside: np.ndarray  # per point: every kernel lookup inside measured data (always False for the roofline)
    sources: list[str]
    notes: list[str]


def kernel_source(kernels: str, gpu: GPU, engine: str) -> KernelSource | None:
    """The kernel database when it should be used, else None (roofline). ``kernels``: auto | db | roofline.
    ``db`` insists: one line naming the extra to install, or what the database covers."""
    if kernels == "roofline":
        return None
    from hw_profile.kernels import database as kernel_db
    from hw_profile.kernels.source import MeasuredKernels

    if kernels == "db":
        kernel_db.system_of(gpu.name, engine)
        return MeasuredKernels()
    return MeasuredKernels() if kernel_db.covers(gpu.name, engine) else None


def kernel_twin(gpu: GPU, engine: str) -> GPU | None:
    """A GPU the kernel database covers under ``engine`` with this one's datasheet (the same tensor rates in every
    type and the same memory bandwidth), for one it lacks; else None. The H800 is the H100's die with its NVLink cut
    to 400 GB/s: the H100's measured kernels are its kernels, its links are its own."""
    if kernel_source("auto", gpu, engine) is not None:
        return None
    from hw_profile.kernels import database as kernel_db

    def rates(g: GPU) -> tuple:
        return g.bf16_tflops, g.fp8_tflops, g.fp4_tflops, g.hbm_tb_s

    for other in GPUS.values():
        if other.name != gpu.name and rates(other) == rates(gpu) and kernel_db.covers(other.name, engine):
            return other
    return None


def estimate_points(shape: ModelShape, dep: Deployment, b: np.ndarray, k: np.ndarray, kernels: str = "auto",
                    costs: EngineCosts | None = None, sibling: GPU | None = None,
                    source: KernelSource | None = None) -> Estimate:
    """Step times (ms) at points (B, K) on one table-GPU of ``dep``, with each part and its source. ``sibling``: a
    GPU the kernel database covers, whose measured kernels' excess over their roofline this GPU's roofline takes
    (``sibling_parts``), for a GPU the database lacks. Without one, a GPU the database lacks takes its twin's
    measured kernels (``kernel_twin``) the same way, which for a twin is the twin's measured kernels exactly.
    ``source``: measured kernels from this ``KernelSource`` instead of the one ``kernel_source`` picks (no twin
    then); its errors fall back to the roofline as the database's do."""
    b = np.asarray(b, dtype=float)
    k = np.asarray(k, dtype=float)
    costs = dep.costs if costs is None else costs
    notes: list[str] = []
    twin = (kernel_twin(dep.gpu, dep.engine) if sibling is None and source is None and kernels != "roofline"
            else None)
    if sibling is not None or twin is not None:
        found = _sibling_estimate(shape, dep, b, k, costs, sibling or twin, kernels, notes, twin=twin is not None)
        if found is not None:
            return found
        if twin is not None and kernels == "db":  # measured kernels insisted on: why the twin's did not serve
            raise HwProfileError(notes[-1].replace("; roofline instead", ""))
    db = kernel_source(kernels, dep.gpu, dep.engine) if source is None else source
    if db is None and kernels == "auto" and not _kernel_package():
        notes.append(Advice("measured kernels need the optional extra: pip install 'dspark-sim[kernels]'"))
    if db is not None:
        try:
            kt = _kernel_lookup(db, shape, dep, b, k)
        except HwProfileError as exc:
            if kernels == "db":
                raise
            kt = None
            notes.append(f"kernel database not used for {shape.name}: {exc}; roofline instead")
        if kt is not None:
            exchange = _measured_exchange(db, shape, dep, b)
            parts = with_exchange(shape, dep, b, k, dict(kt.parts),
                                  lambda bb, kk: dict(_kernel_lookup(db, shape, dep, bb, kk).parts),
                                  None if exchange is None else exchange[1],
                                  lambda bb: _measured_shared_experts(db, shape, dep, bb))
            if A2A in parts and exchange is not None:
                notes.append(f"{exchange[0].notes[0]}; overlap={dep.costs.overlap}")
            elif A2A in parts:
                notes.append("expert-parallel dispatch/combine priced by the estimate (DeepEP's figures across "
                             f"nodes, NVLink inside one domain; overlap={dep.costs.overlap}), not the kernel database")
            parts.update(engine_parts(shape, dep, b, costs, parts))
            ms = sum(parts.values())
            return Estimate(ms, parts, np.full(b.shape, "kernels", dtype=object), np.asarray(kt.inside, bool),
                            [kt.source], [*kt.notes, *notes])
    parts = with_exchange(shape, dep, b, k, roofline_parts(shape, dep, b, k),
                          lambda bb, kk: roofline_parts(shape, dep, bb, kk))
    parts.update(engine_parts(shape, dep, b, costs, parts))
    ms = sum(parts.values())
    if shape.expert_dtype == "fp4" and not dep.gpu.fp4_tflops:
        notes.append(Advice(f"{dep.gpu.name} has no FP4 tensor cores: the fp4 routed experts are priced as fp4 "
                            "weights at the fp8 rate (an FP8 x FP4 kernel); engines there often run an fp8 "
                            "checkpoint instead (--expert-dtype fp8) or the fp4 one in 16-bit arithmetic (Marlin: "
                            "--expert-dtype w4a16)"))
    notes.append("kernels from a kernel-level roofline (no measured kernel data for this GPU/engine/model), each "
                 "launch paying the fixed latency measured kernels show on the GPUs the database covers (us: "
                 + ", ".join(f"{name} {us}" for name, us in KERNEL_FLOOR_US.items()) + ")"
                 + ("; measured on NVIDIA parts and borrowed for this AMD part" if dep.gpu.vendor == "amd" else ""))
    return Estimate(ms, parts, np.full(b.shape, "roofline", dtype=object), np.zeros(b.shape, bool),
                    [f"roofline: {dep.gpu.name} datasheet, comp_eff {dep.roofline.comp_eff}, "
                     f"mem_eff {dep.roofline.mem_eff}"], notes)


# roofline family -> the measured families it holds, where not just its own: the roofline books V4's mixing with
# the dense GEMMs (``kernel_floor_ms``)
ROOFLINE_HOLDS = {GEMM: (GEMM, MHC)}


def sibling_parts(shape: ModelShape, dep: Deployment, sibling: GPU, db: KernelSource, b: np.ndarray,
                  k: np.ndarray) -> tuple[dict[str, np.ndarray], KernelTimes]:
    """Kernel parts of ``dep`` on a GPU the database lacks, transferred from a ``sibling`` it covers: per family,
    this GPU's roofline plus what the sibling's measured kernels take beyond the sibling's own roofline at the same
    point (neither roofline with ``kernel_floor_ms``, which the measured excess already holds), never below zero.
    What a kernel loses to launch latency, small tiles or a slow implementation is carried as time; what the two
    GPUs' datasheets differ in stays the roofline's. Also the sibling's ``KernelTimes`` (its source, coverage)."""
    ref = replace(dep, gpu=sibling)
    kt = _kernel_lookup(db, shape, ref, b, k)
    measured = kt.parts
    theirs = roofline_parts(shape, ref, b, k, floors=False)
    parts = roofline_parts(shape, dep, b, k, floors=False)
    for family in list(parts):
        excess = sum(measured.get(key, 0.0) for key in ROOFLINE_HOLDS.get(family, (family,))) - theirs[family]
        parts[family] = np.maximum(parts[family] + excess, 0.0)
    return parts, kt


def _sibling_estimate(shape: ModelShape, dep: Deployment, b: np.ndarray, k: np.ndarray, costs: EngineCosts,
                      sibling: GPU, kernels: str, notes: list[str], twin: bool = False) -> Estimate | None:
    """``estimate_points`` by ``sibling_parts``; None (and a note) where the sibling has no data for this model.
    ``twin``: the sibling is this GPU's twin (``kernel_twin``), found, not asked for."""
    if sibling.name.upper() == dep.gpu.name.upper():
        raise HwProfileError(f"--sibling: {sibling.name} is the GPU being estimated; name another GPU")
    if kernels == "roofline":
        raise HwProfileError("--sibling transfers measured kernels; it cannot go with --kernels roofline")
    if kernel_source("auto", dep.gpu, dep.engine) is not None:  # None without the extra, too
        raise HwProfileError(f"--sibling: the kernel database covers {dep.gpu.name} under {dep.engine}, so its own "
                             "measured kernels price it; --sibling is for GPUs the database lacks")
    db = kernel_source("db", sibling, dep.engine)  # one line naming the extra, or what the database covers
    try:
        parts, kt = sibling_parts(shape, dep, sibling, db, b, k)
    except HwProfileError as exc:
        how = f"{sibling.name}'s measured kernels (its twin)" if twin else f"--sibling {sibling.name}"
        notes.append(f"{how} not used for {shape.name}: {exc}; roofline instead")
        return None
    parts = with_exchange(shape, dep, b, k, parts, lambda bb, kk: sibling_parts(shape, dep, sibling, db, bb, kk)[0])
    parts.update(engine_parts(shape, dep, b, costs, parts))
    if twin:
        notes.append(f"kernels: {sibling.name}'s measured kernels; {dep.gpu.name} has its datasheet (tensor rates, "
                     f"memory bandwidth) and the database lacks it. Communication is priced on {dep.gpu.name}'s own "
                     "links (the estimate's exchange; all-reduces by its NVLink roofline plus what "
                     f"{sibling.name}'s measured ones take beyond their own)")
        return Estimate(sum(parts.values()), parts, np.full(b.shape, f"kernels:{sibling.name}", dtype=object),
                        np.asarray(kt.inside, bool), [f"{kt.source} ({dep.gpu.name} as its twin {sibling.name})"],
                        [*notes, *kt.notes])
    notes.append(f"kernels: {dep.gpu.name}'s roofline plus, family by family, what {sibling.name}'s measured kernels "
                 f"take beyond {sibling.name}'s own roofline at each point (--sibling {sibling.name}): a transfer "
                 "from a covered GPU, not a measurement of this one")
    return Estimate(sum(parts.values()), parts, np.full(b.shape, "roofline+sibling", dtype=object),
                    np.zeros(b.shape, bool), [f"roofline: {dep.gpu.name} datasheet + {kt.source} beyond "
                                              f"{sibling.name}'s roofline"], [*notes, *kt.notes])


def _kernel_lookup(db: KernelSource, shape: ModelShape, dep: Deployment, b: np.ndarray, k: np.ndarray):
    # never more requests than tokens: a fractional batch (278.75 tokens) must not round up past itself
    requests = np.minimum(np.maximum(1.0, np.round(b / dep.costs.verify_tokens_per_request)), np.maximum(b, 1.0))
    return kernel_times(db, shape, dep, b, requests, k / requests)


def _measured_shared_experts(db: KernelSource, shape: ModelShape, dep: Deployment, b: np.ndarray) -> np.ndarray:
    """The rank's shared experts (every MoE layer's) from the kernel database's GEMMs, ms; what a single-batch
    layer hides its dispatch under."""
    from hw_profile.kernels.ops import SHARED_EXPERT_GEMMS

    return db.gemm_times(shape, dep.gpu.name, dep.engine, dep.dtype, dep.head_split, b, SHARED_EXPERT_GEMMS).ms


def _measured_exchange(db: KernelSource, shape: ModelShape, dep: Deployment, b: np.ndarray):
    """The exchange as the database measured it for this deployment: its ``KernelTimes`` at ``b`` and a
    ``tokens -> ms`` lookup for ``with_exchange`` (which asks for ``b`` itself first: answered from the former); or
    None. Measured for SGLang's data-parallel attention over DeepEP, where the database has the group's node count.
    A planner's own ``a2a_us_per_layer`` keeps the estimate's exchange (their fabric, not the database's)."""
    if (dep.parallel != "dp" or not shape.is_moe or dep.ep <= 1 or dep.engine != "sglang"
            or dep.costs.a2a_us_per_layer is not None):
        return None

    def at(tokens):
        return db.exchange_times(shape, dep.gpu.name, dep.engine, dep.ep, tokens)

    here = at(b)
    return None if here is None else (here, lambda tokens: here.ms if tokens is b else at(tokens).ms)


def kernel_times(db: KernelSource, shape: ModelShape, dep: Deployment, b, requests, context):
    """Kernel times of one table-GPU. Under ``dp`` a rank runs attention and the dense part alone on its own
    requests (the database's one-GPU step) and its share of the expert-parallel group's MoE, whose tokens are every
    rank's: the MoE part from the group's kernel (SGLang's DeepEP expert kernel where measured) at ep x the tokens.
    Under expert parallelism the routed experts are looked up at their tokens x the busiest rank's load over the
    mean (``imbalance_factor``): the group as loaded as its busiest rank, which the others wait for. Like the
    roofline's, that load costs time where the kernel computes and none where it only reads the experts' weights
    (a time multiplied by it would charge a weight-bound kernel too)."""
    b = np.asarray(b, dtype=float)
    dp = dep.parallel == "dp" and shape.is_moe and dep.ep > 1
    ep = dep.ep if shape.is_moe else 1  # a dense drafter of an expert-parallel target has no experts to spread
    own = (db.step_times(shape, dep.gpu.name, dep.engine, dep.dtype, 1, 1, b, requests, context) if dp else
           db.step_times(shape, dep.gpu.name, dep.engine, dep.dtype, dep.table_gpus, ep, b, requests, context))
    if not shape.is_moe or dep.ep <= 1:
        return own
    group_tokens = b * (dep.ep if dp else 1)
    busiest = imbalance_factor(group_tokens * shape.experts_per_token, dep.ep, dep.costs)
    group = db.moe_times(shape, dep.gpu.name, dep.engine, dep.dtype, dep.ep, group_tokens * busiest,
                         wide_ep=dp and dep.engine == "sglang", gpus=dep.ep if dp else dep.table_gpus)
    parts = {key: v for key, v in own.parts.items() if key != MOE}
    parts[MOE] = group.parts[MOE]
    note = (f"data-parallel attention: attention, dense GEMMs and head from the one-GPU step at the rank's own "
            f"tokens; routed experts from the {dep.ep}-GPU expert-parallel group at {dep.ep}x the tokens, at its "
            "busiest rank's load" if dp else
            f"routed experts (ep {dep.ep}) looked up at the busiest expert-parallel rank's load")
    # the step's own MoE line (under dp: every expert on one GPU) gives way to the group's
    own_notes = [n for n in own.notes if not n.startswith("Routed experts:")]
    return replace(own, ms=sum(parts.values()), parts=parts, inside=np.asarray(own.inside) & np.asarray(group.inside),
                   notes=[*own_notes, *(n for n in group.notes if n not in own_notes), note])


def _kernel_package() -> bool:
    import importlib.util

    from hw_profile.kernels.database import PACKAGE

    return importlib.util.find_spec(PACKAGE) is not None


# The prompt chunk at which a prompt token's own attention is set against T's price of it (``prompt_token_ns``)
PROMPT_CHUNK_TOKENS = 2048


def prompt_token_ns(shape: ModelShape, dep: Deployment, measured: tuple[float, str] | None) -> float:
    """What a prompt token's own attention costs beyond T's price of it, ns (``ChunkAttention.ns_per_token``), from
    the ``measured`` prefill kernels' price per token (``measured_chunk_token``); 0 without one, T's price standing.
    A Gated DeltaNet hybrid's T writes every token's recurrent states (verification keeps each position's to roll back
    to): for a prompt the kernel-level roofline's attention at ``PROMPT_CHUNK_TOKENS`` tokens with nothing cached,
    which the chunked kernel engines prefill with replaces (it writes a request's states once)."""
    if measured is None or shape.attention_kind not in LINEAR_HYBRIDS:
        return 0.0
    as_tokens = roofline_parts(shape, dep, np.array([float(PROMPT_CHUNK_TOKENS)]), np.zeros(1), floors=False)
    return measured[0] - float(as_tokens[ATTENTION][0]) * 1e6 / PROMPT_CHUNK_TOKENS


def chunk_attention(shape: ModelShape, dep: Deployment, measured: tuple[float, str] | None = None,
                    per_token: tuple[float, str] | None = None) -> dict:
    """The sidecar's ``prefill_cost`` block (``hw_profile.tables.step_table.ChunkAttention``): a prompt chunk's causal attention,
    ns per (chunk token, token it attends to), compute-bound (hundreds of queries per request). Its GEMMs are T's at
    the step's total tokens: one forward (``simulator.core.forward``). ``measured``: that rate and its source from
    the measured context modules (``measured_chunk_rate``), else the kernel-level roofline's. ``per_token``: a
    prompt token's own attention from measured prefill kernels (``measured_chunk_token``), from which the block's
    ``ns_per_token`` corrects T's price of a prompt token (``prompt_token_ns``)."""
    if measured is not None:
        rate, source = measured
    else:
        work = attention_work(shape, dep)
        rate = work.per_query_kv / dep.peak(work.dtype) * 1e9
        source = (f"compute-bound roofline of the attention on {dep.gpu.name} ({work.dtype}, "
                  f"comp_eff {dep.roofline.comp_eff})")
    block = {"ns_per_token_kv": rate, "source": source}
    own = prompt_token_ns(shape, dep, per_token)
    if own:
        block["ns_per_token"] = own
        block["source"] += (f"; ns_per_token: a prompt token's linear attention from the {per_token[1]}, less T's "
                            "price of it (which writes every token's states)")
    if shape.windowed_layers:  # those layers' tokens attend to the window at most (every layer does the same work)
        block.update(window=shape.sliding_window, windowed_share=shape.windowed_share)
    return block


def _measured_prompt_price(method: str, shape: ModelShape, dep: Deployment, kernels: str, sibling: GPU | None,
                           *args) -> tuple[float, str] | None:
    """A price of prompt chunks that the kernel source's ``method`` reads from measured kernels, on this GPU or its
    twin (``kernel_twin``, said in the source line); None for the roofline (``kernels: roofline``, a sibling's
    transfer, a source without the method, rows it lacks)."""
    if kernels == "roofline" or sibling is not None:
        return None
    gpu = kernel_twin(dep.gpu, dep.engine) or dep.gpu
    price = getattr(kernel_source("auto", gpu, dep.engine), method, None)
    if price is None:
        return None
    try:
        found = price(shape, gpu.name, dep.engine, dep.dtype, dep.head_split, *args)
    except HwProfileError:  # rows the decode path would also miss: that path says why
        return None
    if found is None or gpu is dep.gpu:
        return found
    return found[0], f"{found[1]}; the {gpu.name}'s, {dep.gpu.name}'s twin"


def measured_chunk_rate(shape: ModelShape, dep: Deployment, kernels: str = "auto",
                        sibling: GPU | None = None) -> tuple[float, str] | None:
    """A prompt chunk's attention per (chunk token, cached token) from the kernel database's measured context
    modules, where it has them for this model's attention (``KernelSource.chunk_pair_ns``); None for the roofline
    (``_measured_prompt_price``; other attention, tables without a sweep over cached prefixes)."""
    return _measured_prompt_price("chunk_pair_ns", shape, dep, kernels, sibling)


def measured_chunk_token(shape: ModelShape, dep: Deployment, kernels: str = "auto",
                         sibling: GPU | None = None) -> tuple[float, str] | None:
    """A prompt chunk's own attention per chunk token at ``PROMPT_CHUNK_TOKENS`` from the kernel database's
    measured prefill kernels (``KernelSource.chunk_token_ns``: Gated DeltaNet's); None where not measured."""
    return _measured_prompt_price("chunk_token_ns", shape, dep, kernels, sibling, PROMPT_CHUNK_TOKENS)


def estimate_table(shape: ModelShape, dep: Deployment, name: str, kernels: str = "auto",
                   costs: EngineCosts | None = None, b_axis: np.ndarray | None = None,
                   k_axis: np.ndarray | None = None, meta: dict | None = None,
                   sibling: GPU | None = None) -> StepTable:
    b_axis = default_b_axis(16384) if b_axis is None else np.asarray(b_axis)
    k_axis = default_k_axis(4_194_304) if k_axis is None else np.asarray(k_axis)
    bb, kk = np.meshgrid(b_axis, k_axis)
    est = estimate_points(shape, dep, bb.ravel(), kk.ravel(), kernels=kernels, costs=costs, sibling=sibling)
    # the points are steps replayed at their own size: the eager floor is the lookup's to apply (``cuda_graphs``)
    ms, note = padded_envelope((est.ms - est.parts.get(EAGER, 0.0)).reshape(bb.shape))
    notes = [*est.notes, note] if note else est.notes
    rows = {"batch_tokens": bb.ravel(), "kv_tokens": kk.ravel(), "status": "ok", "step_ms": ms.ravel(),
            "step_ms_p10": ms.ravel(), "step_ms_p90": ms.ravel(), "repeats": 0, "throttled": False,
            "source": est.source, "inside": est.inside}
    used = costs if costs is not None else dep.costs
    weights_per_gpu = _stored_bytes_per_gpu(shape, dep)
    full = dict(
        name=name,
        kind="estimate",
        caveat={"kind": "an estimate",
                "text": (f"kernels from {', '.join(est.sources)} ({np.mean(est.inside):.0%} of points inside measured "
                         "data) plus the engine costs in engine_costs; within 30% on "
                         f"{DECODE_WITHIN_30[0]} of {DECODE_WITHIN_30[1]} public decode "
                         "measurements (docs/sim-to-real.md): calibrate it on one to three measured points "
                         "(hw-profile calibrate --prior) before planning")},
        expected_error=estimate_expected_error(float(np.mean(est.inside)) if len(est.inside) else 0.0),
        device=dep.gpu.name,
        gpu=dep.gpu.to_dict(),
        gpus=dep.table_gpus,
        deployment={"gpus": dep.gpus, "ep": dep.ep, "parallel": dep.parallel, "engine": dep.engine},
        dtype=dep.dtype,
        model_shape=shape.to_dict(),
        roofline=dep.roofline.__dict__,
        engine_costs=used.to_dict(),
        sources=est.sources,
        notes=notes,
        **({"advice": advice} if (advice := [str(n) for n in notes if isinstance(n, Advice)]) else {}),
        inside_share=float(np.mean(est.inside)) if len(est.inside) else 0.0,
        prefill_cost=chunk_attention(shape, dep, measured_chunk_rate(shape, dep, kernels, sibling),
                                     measured_chunk_token(shape, dep, kernels, sibling)),
        verify_attention=verify_attention(shape, dep, used).to_meta(),
        cuda_graphs=(graphs := cuda_graphs(shape, dep, used).to_meta()),
        # what the engine changes when it speculates: the target's steps only (a drafter's run inside them)
        **({SPECULATIVE_MODE: speculative_mode(used, graphs, dep.gpus if dep.parallel == "dp" else 1)}
           if costs is None else {}),
        # the weights and the cache this table priced, which the simulator sizes the KV pool with
        **memory_fields(shape, dep.dtype, head_split=dep.head_split, gpus=dep.table_gpus,
                        weight_bytes_per_gpu=weights_per_gpu, device_memory_gb=dep.gpu.device_memory_bytes / 1e9),
        **(meta or {}),
    )
    return StepTable.from_points(rows, table_meta(**full))


def padded_envelope(ms: np.ndarray) -> tuple[np.ndarray, str]:
    """Step times ms[k, b] on a grid (B and K ascending) made non-decreasing in both: T(B, K) becomes the least time
    at any (B', K') >= (B, K), and a note says what moved ("" when nothing did).

    Why: an engine can always run a step as a larger one, padding the batch to a size it has a faster kernel for
    (CUDA-graph capture does exactly this) and masking context it does not need, so a smaller step never costs
    more than a larger one. Measured kernel data break this where a kernel's tile choice or the measurement is
    off at one size (vLLM's fused MoE on B300 measured 30 ms for a V4-Pro step at 320 expert-parallel tokens and
    22 ms at 784). A step curve that falls with B also misleads a scheduler that prices B: DSpark's greedy stops at
    the first token whose step costs more than the next one's."""
    env = np.minimum.accumulate(ms[:, ::-1], axis=1)[:, ::-1]
    env = np.minimum.accumulate(env[::-1, :], axis=0)[::-1, :]
    lowered = env < ms
    if not lowered.any():
        return env, ""
    rel = float(np.max((ms - env)[lowered] / ms[lowered]))
    return env, (f"made non-decreasing in B and K (a step can be padded to a larger one): {int(lowered.sum())} of "
                 f"{ms.size} points lowered to the least time at a larger (B, K), by up to {rel:.0%}")


def _stored_bytes_per_gpu(shape: ModelShape, dep: Deployment) -> float:
    if dep.parallel == "dp" and shape.is_moe:
        return stored_bytes_per_gpu(shape, dep.ep, dep.dtype)
    return stored_weight_bytes_per_gpu(shape, dep.dtype, dep.gpus)


def drafter_shapes(target: ModelShape, drafters: list[str],
                   configs: dict[str, dict] | None = None) -> dict[str, tuple[ModelShape, dict]]:
    """The drafters' shapes (``drafter_shape``: layers built like the target's) and their sidecar entries: MTP is
    one layer; DSpark three MoE layers (V4) or five dense layers, plus its rank-256 Markov head. Under compressed
    attention both read only the 128-token window (V4's MTP and DSpark layers are window-only). EAGLE-3 and DFlash
    drafters are dense layers whatever the target: EAGLE-3 one, with a head over its 32,000-token draft vocabulary,
    whose q, k and v projections read the token's embedding beside the fused feature (twice the width, every
    pass), and which first projects three target layers' states into one over the tokens its first pass takes in
    (``fusion_inputs``, priced by the simulator on that pass); DFlash five, with the target's head, which fuses five
    target layers' states over the tokens it takes in and projects that feature's K and V in each of its layers
    (``fused_context_kv``), the context its block attends to.

    ``configs``: a drafter checkpoint's own config.json by drafter name (``--drafter-config``). Its layers replace
    the built-in ones (``drafter_from_config``), attending in full; it keeps its kind's other traits (EAGLE-3's
    wider input, DFlash's context K and V), fuses as many target layers as the config names, projects the fused
    context's K and V in each layer where the config is built on DFlash's backbone (a ``dflash_config`` block, as
    DSpark drafters trained by SpecForge and vLLM's speculators are), and a DSpark drafter's sidecar entry carries
    the config's Markov rank (``markov_rank``)."""
    out: dict[str, tuple[ModelShape, dict]] = {}
    window = drafter_attention_window(target)
    configs = configs or {}
    unknown = sorted(set(configs) - set(drafters))
    if unknown:
        raise HwProfileError(f"--drafter-config {unknown[0]}: not among --drafters ({', '.join(drafters) or 'none'})")
    for name in drafters:
        dense, vocab, own = False, None, {}  # own: what the drafter has beyond layers built like the target's
        if name == "mtp":
            layers = 1
        elif name == "dspark":
            layers = DSPARK_LAYERS_MOE if target.is_moe else DSPARK_LAYERS_DENSE
        elif name == "eagle3":
            layers, dense, vocab = EAGLE3_LAYERS, True, EAGLE3_DRAFT_VOCAB
            own = dict(attn_input_multiple=2, fusion_inputs=EAGLE3_FUSED)
        elif name == "dflash":
            layers, dense = DFLASH_LAYERS, True
            own = dict(fusion_inputs=DFLASH_FUSED, fused_context_kv=True)
        else:
            raise HwProfileError(f"--drafters: unknown drafter {name!r}; known: {', '.join(ESTIMATE_DRAFTERS)}")
        if name in configs:
            fused, rank = drafter_config_fields(configs[name])
            try:
                shape = drafter_from_config(target, configs[name], name=f"{target.name}-{name}-config")
            except HwProfileError as exc:
                raise HwProfileError(f"--drafter-config {name}: {exc}") from None
            if fused:
                own["fusion_inputs"] = fused
            if isinstance(configs[name].get("dflash_config"), dict):  # DFlash's backbone (DSpark's too): its
                own["fused_context_kv"] = True  # layers take the fused context in as K and V
            entry = {"markov_rank": rank} if rank is not None and name == "dspark" else {}
            out[name] = (replace(shape, **own), entry)
            continue
        try:
            shape = drafter_shape(target, layers, vocab=vocab, name=f"{target.name}-{name}-{layers}l", dense=dense)
        except HwProfileError as exc:
            raise HwProfileError(f"--drafters {name}: {exc}") from None
        out[name] = (replace(shape, **own), {"attention_window": window} if window else {})
    return out


def drafter_costs(costs: EngineCosts) -> EngineCosts:
    """A drafter forward runs inside the engine's step: no host cost of its own, and it takes the argmax or
    draws from its own distribution in one pass over the vocabulary."""
    return replace(costs, step_fixed_ms=0.0, scheduler_ms=0.0, sample_passes=1.0)


def layout_note(dep: Deployment) -> str:
    if dep.parallel == "dp":
        return (f"one row is one GPU of {dep.gpus} (data-parallel attention, EP {dep.ep}): in a scenario set "
                f"gpus_per_replica: 1 and count ranks as replicas")
    return f"one row is a replica of {dep.gpus} GPU(s) (tensor parallel)"


def write_estimate_set(target: ModelShape, dep: Deployment, out: str | Path, drafters: list[str],
                       kernels: str = "auto", meta: dict | None = None, b_axis: np.ndarray | None = None,
                       k_axis: np.ndarray | None = None, sibling: GPU | None = None,
                       drafter_configs: dict[str, dict] | None = None) -> list[Path]:
    """The target's table at ``out`` and each drafter's beside it, the target's sidecar naming them; a drafter
    in ``drafter_configs`` is built from its checkpoint's config (``drafter_shapes``)."""
    out = Path(out)
    if out.suffix != ".csv":
        raise HwProfileError(f"--out: expected a path ending in .csv, got {out}")
    out.parent.mkdir(parents=True, exist_ok=True)
    stem = out.stem
    drafter_set: dict[str, DrafterTable] = {}
    for name, (shape, entry) in drafter_shapes(target, drafters, drafter_configs).items():
        table = estimate_table(shape, dep, f"{stem}.drafter-{name}", kernels=kernels, costs=drafter_costs(dep.costs),
                               meta=meta, b_axis=b_axis, k_axis=k_axis, sibling=sibling)
        rank = int(entry.get("markov_rank", MARKOV_RANK))
        head = (markov_head_costs(dep.gpu, rank, target.vocab, dep.dtype, dep.roofline, hidden=target.hidden)
                if name == "dspark" and rank else {})  # Markov and confidence heads
        drafter_set[name] = DrafterTable(table, head, int(entry.get("attention_window", 0)))
    main = estimate_table(target, dep, stem, kernels=kernels, meta=meta, b_axis=b_axis, k_axis=k_axis, sibling=sibling)
    return TableSet(main, drafter_set).write(out)
