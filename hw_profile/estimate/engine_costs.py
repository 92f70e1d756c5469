"""What a serving engine adds to the kernels of a step: the costs a kernel database or a roofline does not see.

Each term is named, has a documented default per engine with where it comes from, and can be set from the command
line (``hw-profile estimate --cost NAME=VALUE``); ``hw-profile calibrate --prior TABLE --point B,K,MS`` fits the
per-step cost and per-token scale of a written table. All times are per step of one replica.

- ``step_fixed_ms``: per-step host cost the engine does not hide: scheduling, input preparation, the sync that
  reads sampled tokens back, detokenisation handed to other processes. vLLM's V1 engine runs its scheduler and
  the model in one loop with asynchronous output processing; SGLang overlaps the next batch's scheduling with the
  current forward ("overlap scheduler"); TensorRT-LLM's executor is C++. Defaults: vLLM 0.3 ms, SGLang 0.8 ms,
  TensorRT-LLM 0.5 ms. These are our judgement, ordered by how much host work each design leaves on the critical
  path, not measurements: the least certain term, which one single-stream point fixes (``calibrate --prior``).
  vLLM's was 1.5 ms, for a loop that scheduled between forwards; vLLM turned its asynchronous scheduler on by
  default in its late-2025 releases (its async-scheduling plan, vllm-project/vllm issue #27679, PR #27614; the
  scheduler runs one step ahead, preparing step N+1 while the GPU runs step N, NanoFlow-style), so what stays
  exposed is the hand-over between two forwards. For a vLLM without it (before about 0.12, or
  ``--no-async-scheduling``) set ``step_fixed_ms=1.5``. The real vLLM v0.15.1 runs in docs/sim-to-real.md
  ("Plain serving") do not decide between the two: at 0.3 ms the estimate's decode step is 2-5% short of vLLM's
  for Llama-2-7B, CodeLlama-34B and Mixtral, and 11-16% short for Llama-2-70B over 4 GPUs.
- ``request_ms``: what a request spends outside the forwards, once: the API server's request handling and
  tokenisation before the engine sees it, and detokenising and streaming its first token back. It adds to TTFT and
  E2E, not to the time per output token. Default 10 ms for every engine (each serves OpenAI-style HTTP from a Python
  front end), from the one public measurement we found: a `vllm bench serve` run against a live vLLM (0.28, a
  Qwen2.5-0.5B on a laptop GPU under WSL2; vllm-project/vllm PR #54628) saw the client's TTFT exceed vLLM's own
  server-side TTFT metric by 8.4 and 12.0 ms on the completions endpoint (11-12 on chat); vLLM's metric starts when
  the front end has the request, so this is HTTP, parsing and streaming, not the engine's queue. One measurement on
  other hardware: a single-stream TTFT on a planner's own deployment fixes it (TTFT at one request = this + about
  two steps under a scheduler one step ahead).
- ``capture_sizes`` and ``graph_max_batch``: the sizes the engine captures its forward at as CUDA graphs, and the
  largest of them. A step replays the smallest captured graph it fits in, padded to that size, so its cost is a
  staircase (the table's ``cuda_graphs`` block, ``hw_profile.tables.cuda_graphs``); past the largest it runs eagerly
  and pays ``launch_us`` per kernel, ``kernels_per_layer`` kernels per layer. Unset, ``capture_sizes`` is the
  engine's default list (``default_capture_sizes``) up to ``graph_max_batch``:
  vLLM counts tokens: 1, 2, 4, then every 8 to 248, then every 16 from 256 to min(2 x max_num_seqs, 512)
  (its ``cudagraph_capture_sizes``; 512 with the default max_num_seqs). SGLang counts requests: 1, 2, 4, 8, then
  every 8 from 16 to 160, and on to 256 on a GPU with more than 80 GB (its ``cuda_graph_bs`` without speculation;
  while speculating it captures 1-8, every 2 to 32, every 16 to 160: set ``--capture-sizes`` for that). vLLM
  started with k draft tokens (``spec_tokens``, its ``num_speculative_tokens``) rounds each size up to a multiple of
  k + 1 and drops those past its largest (its ``adjust_cudagraph_sizes_for_spec_decode``; the largest,
  min(max_num_seqs x (k + 1) x 2, 512), stays 512 at the default max_num_seqs).
  TensorRT-LLM counts requests: 1, 2, 4, then every 8 to 128, with padding on (``cuda_graph_config``; without
  padding a batch of another size runs eagerly). These are the engines' defaults as their sources state them at the
  versions docs/hw-profile.md names; a deployment that sets its own sizes sets them here.
- ``launch_us`` (5 us: a PyTorch-dispatched CUDA kernel launch, host side) and ``kernels_per_layer`` (dense 14,
  MoE 24: norms, projections, rotary, attention, activation, routing, grouped GEMMs, all-reduce).
- ``sample_passes``: passes over the fp32 logits per verified token for sampling and the rejection test
  (softmax, top-k/top-p filtering, the draw, the target-drafter ratio): 6 by default, each pass reading
  vocab x 4 bytes at the GPU's achieved bandwidth. Per verified token, so it grows with the verify budget.
- ``moe_imbalance``: the busiest expert-parallel rank's routed-expert work over the mean. ``auto``: tokens
  routed uniformly at random, n = tokens x experts per token over ep ranks of mean m = n / ep, the busiest
  rank's expected load about m + sqrt(2 m ln ep) (the maximum of ep near-Poisson counts), so the factor is
  1 + sqrt(2 ln(ep) / m); a number >= 1 sets it (an expert-parallel load balancer with redundant experts, as
  DeepSeek's EPLB, brings it towards 1.05-1.1).
- ``verify_tokens_per_request``: a step-time table has axes (B tokens, K KV tokens), not the request count, yet
  each verified token attends to its request's whole context: attention compute is sum(q_i x context_i), which is
  B x K / R. The table takes R = B / q with q this value (2: MTP-1's budget, the most common speculative
  deployment). Attention reads of the KV are once per request whatever q is. The table's sidecar records q with
  the attention's rates (``verify_attention``), and the simulator corrects each step for the tokens per request
  it actually verifies (``hw_profile.tables.step_table.VerifyAttention``), so plain decoding is not charged q x its attention
  compute nor a long proposal one budget's.
- ``a2a_us_per_layer``: the fixed latency of one expert-parallel dispatch + combine per MoE layer. Across nodes an
  exchange costs this latency plus its volume at the NIC's line rate (400 Gb/s: 50 GB/s per GPU). The default comes
  by EP size from DeepEP's published low-latency kernel figures over RDMA (H800, 128 tokens per rank, hidden 7168,
  top-8, fp8 dispatch, bf16 combine: EP8 191 us, EP16 313, EP32 428, EP64 487, EP128 561, EP256 554 for dispatch +
  combine): the part of each figure its payload at line rate does not explain (EP64 54 us, EP128 124, EP256 115;
  none at EP32 and below), interpolated in log(EP). So the exchange reproduces DeepEP's figures at their 128 tokens
  and scales with the tokens rather than keeping a 128-token floor for a handful. Under that line lies a floor, what
  DeepEP's low-latency kernels take at two tokens per rank as NVIDIA measured them over 2, 4 and 8 nodes of
  H100/H200 (aiconfigurator-core's database): 48.5, 55.6 and 59.5 us (``a2a_floor_us``). At EP16 and EP32 the
  figures above leave no latency (part of their traffic stays on NVLink), yet an exchange across nodes is never
  cheaper than that floor. Inside one NVLink domain (EP up to 8 on a board, up to 72 on an NVL72 rack) the latency
  is a 60 us floor and the bandwidth NVLink's (``hw_profile.estimate.estimate``).
- ``nic_gb_s``: the line rate, GB/s per GPU, at which an exchange across nodes moves its volume (50: one 400 Gb/s
  NIC per GPU, as DeepEP's H800 figures were measured with). A node with fewer NICs than GPUs has less: four
  400 Gb/s NICs for eight H20s are 25. The fixed latency above stays DeepEP's, whatever this is.
- ``overlap``: how the engine hides the expert-parallel exchange of a data-parallel deployment. ``none`` (the
  default): it is paid in full. ``two-batch``: the engine splits each step into two micro-batches that overlap
  one's exchange with the other's compute (DeepSeek's decode, SGLang's ``--enable-two-batch-overlap``), priced as
  their published layout runs (``hw_profile.estimate.estimate.two_batch_ms``): dispatch hides behind attention projections
  and shared experts, combine behind core attention, the routed experts in between are exposed, and each
  micro-batch reads the weights again. ``fused``: one kernel per MoE layer pipelines dispatch, the routed experts
  and combine over waves of experts (DeepGEMM's Mega MoE, which the DeepSeek-V4 report introduces and vLLM ships
  as an expert backend for V4), priced by ``hw_profile.estimate.estimate.fused_moe_ms``; it moves tokens over NVLink symmetric
  memory, so the expert-parallel group must fit in one NVLink domain. ``single-batch``: one batch, its exchange
  overlapped inside each MoE layer as SGLang's ``--enable-single-batch-overlap`` runs it (Ant Group's layout,
  LMSYS blog 2025-09-26): the dispatch's receive under the layer's shared experts, and the combine's send under
  the routed experts' down projection, which feeds it block by block (``hw_profile.estimate.estimate.single_batch_ms``).
  ``true``/``false`` read as ``two-batch``/``none``.
- ``two_batch_min_tokens``: the smallest decode step (tokens per rank) a ``two-batch`` engine splits; smaller
  steps run as one batch and pay the whole exchange. vLLM: 32 (its dual-batch overlap splits a decode batch of
  at least ``--dbo-decode-token-threshold`` tokens, 32 by default, after its ranks agree). SGLang and TensorRT-LLM:
  unset, which means two requests' worth (2 x ``verify_tokens_per_request``): SGLang's two-batch overlap halves
  a decode batch by requests whenever there are two (its code notes that small batches would be better left
  whole, but does not do so); for TensorRT-LLM we found no threshold published, so it gets the least a split needs.
- ``fused_waves``: waves of experts a ``fused`` layer runs in (4). DeepGEMM sizes a wave to fill the GPU's SMs
  with the experts' tiles, so the count depends on the shape and the load. The DeepSeek-V4 report gives Mega MoE's
  speed-up over the unfused layer as 1.50-1.73x in inference (up to 1.96x in small-batch RL rollouts; as public
  reading notes of the report quote it); a layer whose exchange equals its expert compute gets 2n/(n+1) from n
  waves under this pricing, 1.5x at 3 and 1.71x at 6, so 4 sits inside that range. A judgement, not a
  measurement: set it for a deployment.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from hw_profile.errors import HwProfileError

ENGINES = ("vllm", "sglang", "trtllm")
OVERLAP_MODES = ("none", "two-batch", "single-batch", "fused")
_OVERLAP_WORDS = {"true": "two-batch", "1": "two-batch", "false": "none", "0": "none"}

# DeepEP low-latency dispatch + combine per MoE layer (us) by EP size, H800 with CX7 400 Gb/s (its README's table),
# measured at 128 tokens per rank, hidden 7168, top-8 experts, fp8 dispatch and bf16 combine
_DEEPEP_LL_US = {8: 191.0, 16: 313.0, 32: 428.0, 64: 487.0, 128: 561.0, 256: 554.0}
_DEEPEP_BYTES = 128 * 7168 * 8 * 3.0  # the payload behind each figure, before the share that stays on the rank
# DeepEP's low-latency dispatch + combine per MoE layer (us) at the fewest tokens measured, two per rank, by nodes of 8
# GPUs: NVIDIA's runs on H100 and H200 nodes in aiconfigurator-core 0.12's database (comm/wideep_deepep_ll_perf,
# SGLang 0.5.6.post2, hidden 7168, top-8; both GPUs' rows agree). Two tokens are a few kilobytes, so these are what
# an exchange across nodes costs however little it moves
_DEEPEP_LL_FLOOR_US = {2: 48.5, 4: 55.6, 8: 59.5}
NIC_GB_S = 50.0  # a 400 Gb/s NIC's line rate, one per GPU
# host work an overlap scheduler hides (ms a step). Data-parallel attention over many ranks: SGLang's MTP post,
# 2 / 51.0 - 2 / 60.4 s per step per rank (DeepSeek-V3, DP16). One tensor-parallel replica: sgl-project/sglang
# PR #38131, one small model on one GPU at one request, 364.3 tok/s without the overlap scheduler and 498.5 with it
# (1/364.3 - 1/498.5 s a step)
SCHEDULER_MS = 6.1
SCHEDULER_MS_TP = 0.74
# What each forward a speculative step launches beyond the verify (``SpeculativeMode.extra_forwards``) costs the
# host beyond the scheduler's work, unhidden without the overlap scheduler: sgl-project/sglang PR #18906 ran one
# request of Qwen3.5-397B-A17B over TP8 with 3 chained drafts (acceptance length 3.368) at 298.19 tok/s on spec v1
# (no overlap scheduler) and 323.72 on spec v2 (overlapped), 11.30 against 10.41 ms a step: 0.89 ms hidden, of
# which SCHEDULER_MS_TP is the scheduler's; the rest over the step's two extra forwards
SPEC_FORWARD_HOST_MS = round(((3.368 / 298.19 - 3.368 / 323.72) * 1e3 - SCHEDULER_MS_TP) / 2, 3)
# vLLM: what its asynchronous scheduling hides, its step cost without it (1.5 ms) less with it (0.3 ms), as
# ``step_fixed_ms`` documents them
VLLM_SCHEDULER_MS = 1.2
# SGLang's running-request cap under its EAGLE/MTP worker where the deployment sets none (server_args.py,
# ``_handle_speculative_decoding``: max_running_requests = 48), and the CUDA-graph batch sizes it captures in that
# mode (``cuda_graph_runner``/``_generate_cuda_graph_batch_sizes``: 1-8, every 2 to 32, every 4 to 64, every 8 to
# 256, every 16 on), both as its sources state them from v0.4.x through v0.5.x
SGLANG_SPEC_MAX_RUNNING = 48
SGLANG_SPEC_VERSIONS = "0.4.x-0.5.x (spec v1: SGLANG_ENABLE_SPEC_V2 unset)"
_BOOL_WORDS = {"true": True, "1": True, "on": True, "false": False, "0": False, "off": False}


@dataclass(frozen=True)
class EngineCosts:
    engine: str = "vllm"
    step_fixed_ms: float = 0.3
    overlap_schedule: bool = True
    scheduler_ms: float | None = None  # None: by layout (``scheduler_ms_for``)
    graph_max_batch: int = 512
    capture_sizes: tuple[int, ...] | None = None  # None: the engine's default list up to graph_max_batch
    spec_tokens: int = 0  # draft tokens a vLLM deployment is started with (num_speculative_tokens); 0: none
    launch_us: float = 5.0
    kernels_per_layer: float | None = None  # None: 14 for dense layers, 24 for MoE layers
    sample_passes: float = 6.0
    moe_imbalance: float | str = "auto"
    verify_tokens_per_request: float = 2.0
    a2a_us_per_layer: float | None = None  # None: from DeepEP's figures by EP size
    overlap: str = "none"  # none | two-batch | single-batch | fused (true/false read as two-batch/none)
    fused_waves: float = 4.0
    nic_gb_s: float = NIC_GB_S
    two_batch_min_tokens: float | None = None  # None: two requests' worth (see the module docstring)
    request_ms: float = 10.0  # per request, outside the forwards (see the module docstring)
    spec_overlap_schedule: bool | None = None  # None: the engine's own rule (``speculative_mode``)
    spec_max_running: int | None = None  # None: the engine's own cap in speculative mode (SGLang 48, others none)
    spec_forward_host_ms: float = SPEC_FORWARD_HOST_MS  # host ms of each extra forward while speculating, unhidden

    def __post_init__(self):
        if self.capture_sizes is not None:  # a sidecar stores a list
            sizes = tuple(int(x) for x in self.capture_sizes)
            if not sizes or sizes[0] < 1 or list(sizes) != sorted(set(sizes)):
                raise HwProfileError(f"--capture-sizes: expected ascending distinct integers >= 1, got "
                                     f"{list(self.capture_sizes)}")
            object.__setattr__(self, "capture_sizes", sizes)
        # sidecars and callers written before the fused mode stored a bool
        if isinstance(self.overlap, bool):
            object.__setattr__(self, "overlap", "two-batch" if self.overlap else "none")
        if self.overlap not in OVERLAP_MODES:
            raise HwProfileError(f"engine costs: overlap must be one of {', '.join(OVERLAP_MODES)}; "
                                 f"got {self.overlap!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> EngineCosts:
        """The costs a sidecar recorded; terms it predates take their defaults."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})

    @property
    def host_ms(self) -> float:
        """Host time a step of the target pays beside its kernels."""
        return self.step_fixed_ms + (0.0 if self.overlap_schedule else self.scheduler_or_default)

    @property
    def scheduler_or_default(self) -> float:
        """``scheduler_ms`` where a layout has set it (``scheduler_ms_for``), else the data-parallel figure."""
        return SCHEDULER_MS if self.scheduler_ms is None else float(self.scheduler_ms)


def scheduler_ms_for(costs: EngineCosts, data_parallel: bool) -> EngineCosts:
    """``costs`` with ``scheduler_ms`` set for the layout where it was left to the default: the host work an overlap
    scheduler hides is the step's scheduling, input preparation and result processing, which data-parallel
    attention over many ranks multiplies by a synchronisation of the ranks' batches (``SCHEDULER_MS``, measured
    there) and one tensor-parallel replica does once (``SCHEDULER_MS_TP``); vLLM's is the difference between its
    step costs without and with asynchronous scheduling (``VLLM_SCHEDULER_MS``)."""
    if costs.scheduler_ms is not None:
        return costs
    if costs.engine == "vllm":
        return replace(costs, scheduler_ms=VLLM_SCHEDULER_MS)
    return replace(costs, scheduler_ms=SCHEDULER_MS if data_parallel else SCHEDULER_MS_TP)


def sglang_spec_capture_sizes(top: int) -> tuple[int, ...]:
    """SGLang's CUDA-graph batch sizes while speculating (requests), up to ``top``."""
    full = (*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, 1025, 16))
    sizes = [s for s in full if s <= top]
    return tuple([*sizes, top] if sizes[-1] != top else sizes)


def speculative_mode(costs: EngineCosts, plain_graphs: dict, ranks: int = 1) -> dict:
    """What the engine changes when it speculates, against the plain steps ``costs`` price (the sidecar's block
    ``speculative_mode``, ``hw_profile.tables.sidecar.SpeculativeMode``), per engine as its sources state it:

    - SGLang (v0.4.x-0.5.x, spec v1): its EAGLE/MTP worker turns the overlap scheduler off (server_args.py:
      ``disable_overlap_schedule = True`` unless SGLANG_ENABLE_SPEC_V2), so a speculative step pays the host work
      that scheduler hid (``scheduler_ms``) where the plain steps had it. It caps the running requests at 48 where
      the deployment sets no ``--max-running-requests``, split over the ``ranks`` of data-parallel attention (its
      model runner takes max_running_requests // dp_size a rank; a table row is one rank there). It captures other
      CUDA-graph batch sizes (``sglang_spec_capture_sizes``, up to the plain list's largest; ``plain_graphs``, the
      table's ``cuda_graphs`` block, gives that and the eager floor). Its worker launches the drafter's passes (one
      captured graph), the target's verify and the draft extend as separate forwards, each prepared on the host
      and, without the overlap scheduler, not hidden: ``spec_forward_host_ms`` each beyond the target's one
      (``SpeculativeMode.extra_forwards``; default ``SPEC_FORWARD_HOST_MS``, 0.075 ms: what one public spec v1
      against spec v2 pair hides beyond the scheduler's work, over its two extra forwards).
      ``--cost spec_overlap_schedule=true``: spec v2 (topk 1), which keeps the overlap scheduler;
      ``--cost spec_max_running=N``: the deployment's own cap.
    - vLLM: asynchronous scheduling stays on for the methods its config lists (``EagleModelTypes``: EAGLE,
      EAGLE-3, MTP, DFlash; it turns it off for others, such as n-gram or a separate draft model), no cap is
      added, and the captured sizes are the table's (``spec_tokens`` already rounds them to the verify width).
      DSpark has a type of its own, which some releases leave out of that list: taken to keep it (ASSUMED; a
      release that drops it says so at start-up, and ``--cost spec_overlap_schedule=false`` prices that).
    - TensorRT-LLM: nothing recorded (its speculative mode is not read here); the block says so and changes
      nothing.
    """
    engine = costs.engine
    if engine == "sglang":
        overlap = bool(costs.spec_overlap_schedule) if costs.spec_overlap_schedule is not None else False
        cap = SGLANG_SPEC_MAX_RUNNING if costs.spec_max_running is None else int(costs.spec_max_running)
        cap = max(cap // max(ranks, 1), 1) if cap else 0
        return {"engine": "sglang", "version": SGLANG_SPEC_VERSIONS, "overlap_schedule": overlap,
                "host_ms": costs.scheduler_or_default if (costs.overlap_schedule and not overlap) else 0.0,
                "forward_host_ms": 0.0 if overlap else float(costs.spec_forward_host_ms),
                "max_running": cap or None,
                "cuda_graphs": {**plain_graphs, "sizes": list(sglang_spec_capture_sizes(plain_graphs["sizes"][-1])),
                                "source": "SGLang's speculative capture list"},
                "source": "sglang python/sglang/srt/server_args.py _handle_speculative_decoding and "
                          "_generate_cuda_graph_batch_sizes"}
    if engine == "vllm":
        overlap = True if costs.spec_overlap_schedule is None else bool(costs.spec_overlap_schedule)
        return {"engine": "vllm", "version": "0.12+ (asynchronous scheduling on by default)",
                "overlap_schedule": overlap,
                "host_ms": costs.scheduler_or_default if (costs.overlap_schedule and not overlap) else 0.0,
                "max_running": costs.spec_max_running, "cuda_graphs": None,
                "source": "vllm vllm/config/vllm.py: async scheduling disabled for speculative methods outside "
                          "EagleModelTypes"}
    return {"engine": engine, "version": "", "overlap_schedule": True, "host_ms": 0.0,
            "max_running": costs.spec_max_running, "cuda_graphs": None,
            "source": f"{engine}'s speculative mode is not recorded: steps priced as in plain mode"}


DEFAULTS: dict[str, EngineCosts] = {
    "vllm": EngineCosts("vllm", step_fixed_ms=0.3, graph_max_batch=512, two_batch_min_tokens=32.0),
    "sglang": EngineCosts("sglang", step_fixed_ms=0.8, graph_max_batch=256),
    "trtllm": EngineCosts("trtllm", step_fixed_ms=0.5, graph_max_batch=128),
}


#: what each engine's captured sizes count: the step's tokens, or its requests (each with its own tokens)
CAPTURE_COUNTS = {"vllm": "tokens", "sglang": "requests", "trtllm": "requests"}


def default_capture_sizes(engine: str, memory_gb: float | None = None) -> tuple[int, ...]:
    """The engine's default CUDA-graph capture list (the module docstring), before ``graph_max_batch``."""
    if engine == "vllm":
        return (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
    if engine == "sglang":
        big = memory_gb is None or memory_gb > 80
        return (1, 2, 4, 8, *range(16, 161, 8), *(range(168, 257, 8) if big else ()))
    return (1, 2, 4, *range(8, 129, 8))


def capture_sizes(costs: EngineCosts, memory_gb: float | None = None) -> tuple[int, ...]:
    """The sizes the engine replays: ``capture_sizes`` as set, else its default list cut at ``graph_max_batch``
    (which joins the list if it falls between two of its sizes, as an engine adds its largest batch; past the list's
    end it changes nothing: the engine captures no more than its list). A vLLM deployment started with
    ``spec_tokens`` = k draft tokens captures only multiples of k + 1 (every decode step verifies k + 1 tokens a
    request): each size rounded up to one, those past the largest dropped."""
    if costs.capture_sizes is not None:
        return costs.capture_sizes
    top = max(int(costs.graph_max_batch), 1)
    full = default_capture_sizes(costs.engine, memory_gb)
    sizes = [s for s in full if s <= top]
    sizes = [*sizes, top] if top < full[-1] and (not sizes or sizes[-1] != top) else sizes
    q = int(costs.spec_tokens) + 1
    if costs.engine != "vllm" or q <= 1:
        return tuple(sizes)
    if q > top:
        raise HwProfileError(f"--cost spec_tokens: {q} tokens a request exceed the largest captured size ({top} "
                             "tokens, graph_max_batch)")
    return tuple(sorted({r for r in (-(-s // q) * q for s in sizes) if r <= top}))


def engine_defaults(engine: str) -> EngineCosts:
    key = engine.lower()
    if key not in DEFAULTS:
        raise HwProfileError(f"--engine: unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    return DEFAULTS[key]


def with_overrides(costs: EngineCosts, items: list[str] | tuple[str, ...]) -> EngineCosts:
    """``NAME=VALUE`` settings (``--cost``) applied to ``costs``; one-line errors name the term."""
    known = {f.name for f in fields(EngineCosts)} - {"engine", "capture_sizes"}  # a list: --capture-sizes
    changes: dict = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in known:
            raise HwProfileError(f"--cost: expected NAME=VALUE with NAME one of {', '.join(sorted(known))}; "
                                 f"got {item!r}")
        try:
            if key == "overlap":
                value: object = _OVERLAP_WORDS.get(text.lower(), text.lower())
            elif key in ("overlap_schedule", "spec_overlap_schedule"):
                value = _BOOL_WORDS[text.lower()]
            elif key == "moe_imbalance" and text == "auto":
                value = "auto"
            elif key in ("graph_max_batch", "spec_tokens", "spec_max_running"):
                value = int(text)
            else:
                value = float(text)
        except KeyError:
            raise HwProfileError(f"--cost {key}: expected true or false, got {text!r}") from None
        except ValueError:
            raise HwProfileError(f"--cost {key}: expected a number, got {text!r}") from None
        if key == "overlap" and value not in OVERLAP_MODES:
            raise HwProfileError(f"--cost overlap: expected one of {', '.join(OVERLAP_MODES)} (or true/false); "
                                 f"got {text!r}")
        if isinstance(value, float | int) and not isinstance(value, bool) and value < 0:
            raise HwProfileError(f"--cost {key}: expected a value >= 0, got {text}")
        if key == "moe_imbalance" and value != "auto" and value < 1:
            raise HwProfileError(f"--cost moe_imbalance: expected 'auto' or a factor >= 1, got {text}")
        if key == "nic_gb_s" and value <= 0:
            raise HwProfileError(f"--cost nic_gb_s: expected a line rate > 0 GB/s per GPU, got {text}")
        if key == "fused_waves" and value < 1:
            raise HwProfileError(f"--cost fused_waves: expected >= 1, got {text}")
        if key == "verify_tokens_per_request" and value < 1:
            raise HwProfileError(f"--cost verify_tokens_per_request: expected >= 1, got {text}")
        changes[key] = value
    return replace(costs, **changes)


def two_batch_min_tokens(costs: EngineCosts) -> float:
    """Tokens per rank from which a ``two-batch`` engine splits a step: its own threshold, else two requests."""
    if costs.two_batch_min_tokens is not None:
        return max(2.0, float(costs.two_batch_min_tokens))
    return 2.0 * costs.verify_tokens_per_request


def a2a_latency_us(ep: int, costs: EngineCosts) -> float:
    """Fixed latency of one MoE layer's dispatch + combine over RDMA, beside its volume at line rate (0 without
    expert parallelism): DeepEP's figure less its payload's time at ``NIC_GB_S``, never below 0."""
    if ep <= 1:
        return 0.0
    if costs.a2a_us_per_layer is not None:
        return float(costs.a2a_us_per_layer)
    sizes = np.array(sorted(_DEEPEP_LL_US), dtype=float)
    wire_us = _DEEPEP_BYTES * (sizes - 1) / sizes / (NIC_GB_S * 1e9) * 1e6
    us = np.maximum(np.array([_DEEPEP_LL_US[int(s)] for s in sizes]) - wire_us, 0.0)
    return float(np.interp(math.log2(ep), np.log2(sizes), us))


def a2a_floor_us(ep: int, costs: EngineCosts) -> float:
    """The least one MoE layer's dispatch + combine over RDMA costs (``_DEEPEP_LL_FLOOR_US`` by nodes of 8,
    interpolated in log(nodes) and held past its ends); 0 inside one node or where ``a2a_us_per_layer`` is set (the
    planner's own latency stands)."""
    if ep <= 8 or costs.a2a_us_per_layer is not None:
        return 0.0
    nodes = sorted(_DEEPEP_LL_FLOOR_US)
    return float(np.interp(math.log2(ep / 8), np.log2(nodes), [_DEEPEP_LL_FLOOR_US[n] for n in nodes]))


def imbalance_factor(routed_tokens: np.ndarray, ep: int, costs: EngineCosts) -> np.ndarray:
    """Busiest rank's routed work over the mean, for ``routed_tokens`` token-expert assignments over ``ep`` ranks."""
    n = np.asarray(routed_tokens, dtype=float)
    if ep <= 1:
        return np.ones_like(n)
    if costs.moe_imbalance != "auto":
        return np.full_like(n, float(costs.moe_imbalance))
    mean = np.maximum(n / ep, 1e-9)
    # never more than every assignment landing on one rank
    return np.minimum(1.0 + np.sqrt(2.0 * math.log(ep) / mean), float(ep))


def launches_ms(layers: int, moe_layers: int, costs: EngineCosts) -> float:
    """What the host takes to launch every kernel of one eager forward."""
    if costs.kernels_per_layer is not None:
        kernels = costs.kernels_per_layer * layers
    else:
        kernels = 14.0 * (layers - moe_layers) + 24.0 * moe_layers
    return kernels * costs.launch_us * 1e-3


def sampling_ms(tokens: np.ndarray, vocab: int, bandwidth_bytes_s: float, costs: EngineCosts) -> np.ndarray:
    """Sampling and the rejection test over the vocabulary, per verified token."""
    b = np.asarray(tokens, dtype=float)
    return b * vocab * 4.0 * costs.sample_passes / bandwidth_bytes_s * 1e3
