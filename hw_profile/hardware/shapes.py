"""Model shapes: what the roofline and the profiler need to know of a transformer (no weights).

Numbers are the public configs of each model (config.json on the model's card). ``drafter_shape`` derives the
generic transformer a drafter is timed as: some layers built like the target's (width, attention, MLP or MoE block), plus
the (shared) LM head.

Beyond the dense GQA transformer (Qwen3), a shape can describe the kinds below; ``attention_kind`` names its
attention (``ATTENTION_KINDS``: ``mha``, ``gqa``, ``sliding-window``, ``mla``, ``dsa``, ``compressed-sparse``,
``gated-deltanet``, ``linear-mla``, ``block-sparse``), and the models read what a kind means from the shape (KV
bytes per token, reads and FLOPs per context and per query token, ``latent_kv``, ``checkpoint_dtype``,
``hyper_connections``, ``dense_gemms``) rather than from its fields:

- **Mixture of experts** (``experts > 0``): every layer after the first ``dense_layers`` replaces its MLP by
  ``experts`` routed experts (SwiGLU, width ``expert_intermediate``), of which each token uses
  ``experts_per_token``, plus ``shared_experts`` that every token uses. ``matmul_params`` is then the *active*
  parameter count (what one token multiplies through); ``total_params`` is what is stored.
- **Multi-head latent attention** (``mla``, ``kv_lora_rank > 0``, DeepSeek-V2/V3): keys and values are compressed to a
  latent of ``kv_lora_rank`` plus a shared rotary key of ``qk_rope_head_dim``. ``head_dim`` is then the per-head
  non-rotary query/key width (``qk_nope_head_dim``). KV cache per token and layer is the latent plus the rotary
  key, ``kv_lora_rank + qk_rope_head_dim`` values, and attention is counted in the weight-absorbed form serving
  engines use for decode (FlashMLA, vLLM, SGLang): each query head scores against the latent directly. See
  ``kv_bytes_per_token`` and ``attn_flops_per_kv_token``.
- **DeepSeek sparse attention** (``dsa``, DeepSeek-V3.2 and GLM-5, MLA with ``index_topk > 0``): MLA whose queries
  each read only the ``index_topk`` latent rows a lightning indexer selects for them (``index_heads`` x
  ``index_head_dim``, scanning one small key per context token of every layer). The cache holds the latent, the
  rotary key and the index key per token and layer. What grows with the context is the indexer's scan (its keys
  read once per request: ``kv_read_bytes_per_token``; its scores per query token: ``attn_flops_per_kv_token``); the
  selected rows are read and attended per query token (``attn_read_bytes_per_query_token``,
  ``attn_flops_per_query_token``), contexts assumed longer than ``index_topk`` (an upper bound below it, which the
  measured modules of ``hw_profile.kernels.ops`` do not share: they are looked up at the real context).
- **Compressed sparse attention** (``compressed-sparse``, DeepSeek-V4, ``csa_layers + hca_layers > 0``): one shared KV head of
  ``head_dim`` (rotary part included) per layer; every layer attends to its last ``sliding_window`` tokens
  uncompressed, and ``csa_layers`` layers also to compressed KV rows, one per ``csa_ratio`` tokens, of which a
  lightning indexer (``index_heads`` x ``index_head_dim``, scanning one small key per compressed row) selects the
  ``index_topk`` each query reads; ``hca_layers`` layers read every compressed row, one per ``hca_ratio``
  tokens; the rest (``layers - csa - hca``) only the window. Queries go through a low-rank ``q_lora_rank``; the
  output through ``o_groups`` grouped projections of rank ``o_lora_rank``. What a step reads therefore splits
  into a part per context token (index keys and heavily compressed rows: ``kv_read_bytes_per_token``) and a
  part per query token (the selected rows and the window: ``attn_read_bytes_per_query_token``), which the K axis
  alone cannot carry. The window's rows (``sliding_window`` per request and layer) are counted per query token,
  an upper bound when a request verifies several tokens that share them. Routed experts may be stored in a
  narrower type than the rest (``expert_dtype``, fp4 in V4).
- **Gated DeltaNet hybrids** (``gated-deltanet``, Qwen3-Next and Qwen3.5, ``linear_interval > 0``): every
  ``linear_interval``-th layer is full GQA attention (its query projection doubled by an output gate); the others
  are linear attention, a recurrent state of ``linear_value_heads`` x ``linear_key_head_dim`` x
  ``linear_value_head_dim`` values per request and layer (plus a short convolution's last ``linear_conv_kernel - 1``
  inputs) instead of a KV cache. Only the full layers' keys and values are cached and read per context token; a
  request's states are read once a step (``attn_read_bytes_per_request``: the recurrence carries them through the
  request's tokens) and written by each query token (``attn_read_bytes_per_query_token``: engines keep each
  verified position's state to roll back to), and each token spends 6 x heads x key x value FLOPs a layer on the
  delta rule (``attn_flops_per_query_token``). ``state_bytes_per_request`` is the memory a request holds whatever
  its context.
- **Linear hybrids with latent full layers** (``linear-mla``, Kimi-K3, ``linear_interval > 0`` with
  ``kv_lora_rank > 0``): Kimi Delta Attention linear layers beside MLA full layers. A KDA layer is priced as a Gated
  DeltaNet layer of ``linear_key_heads`` = ``linear_value_heads`` heads (its q, k, v and full-rank gate projections,
  per-head recurrent states of key x value, a short convolution; the low-rank output-gate factors KDA adds, under 1%
  of the layer's weights, are not counted). The full layers are MLA, as the ``mla`` kind prices them, plus an output
  gate projection of ``heads`` x ``v_head_dim`` where ``attn_output_gate`` is set; their latent cache is what each
  context token holds, the linear layers' states what each request holds. ``full_layers`` counts the full layers
  where the pattern is not exactly every ``linear_interval``-th (Kimi-K3: every 4th and the last, 24 of 93).
- **Block-sparse attention** (``block-sparse``, MiniMax-M3's MSA, ``index_block > 0`` without a latent): GQA
  whose queries, in all but the first ``full_layers`` layers, each attend only to the ``index_topk`` tokens (whole
  blocks of ``index_block``) a lightning indexer selects for them (``index_heads`` x ``index_head_dim`` queries
  scoring one index key of ``index_head_dim`` per context token). Per context token a step reads the full layers'
  K and V and the sparse layers' index keys (``kv_read_bytes_per_token``); the selected tokens' K and V are read
  and attended per query token (``attn_read_bytes_per_query_token``, ``attn_flops_per_query_token``), contexts
  assumed longer than the top-k (an upper bound below it). The cache holds every layer's K and V and the sparse
  layers' index keys.
- **Latent experts** (``expert_hidden > 0``, Kimi-K3): the routed experts work in an ``expert_hidden``-wide space;
  each MoE layer projects every token down to it and back once (dense GEMMs), and the experts' weights and the
  expert-parallel exchange are at that width. Shared experts stay at ``hidden``.
- **Sliding-window attention** (``sliding-window``, Gemma 3): all but every ``sliding_pattern``-th layer attend to the last
  ``sliding_window`` tokens only. The profiler builds it faithfully. A step over R requests reads at most
  ``sliding_window`` tokens per request in a windowed layer (``attended_kv``), which the estimate applies at the
  requests its table assumes and the kernel database at each request's context; ``hw-profile analytic``, whose K
  axis carries no request count, counts every layer as full attention (an upper bound beyond the window).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

from hw_profile.errors import HwProfileError, read_json_object

# Attention kinds (``ModelShape.attention_kind``)
MHA = "mha"
GQA = "gqa"
SLIDING_WINDOW = "sliding-window"
MLA = "mla"
DSA = "dsa"
COMPRESSED_SPARSE = "compressed-sparse"
GATED_DELTANET = "gated-deltanet"
LINEAR_MLA = "linear-mla"
BLOCK_SPARSE = "block-sparse"
ATTENTION_KINDS = (MHA, GQA, SLIDING_WINDOW, MLA, DSA, COMPRESSED_SPARSE, GATED_DELTANET, LINEAR_MLA, BLOCK_SPARSE)
LINEAR_HYBRIDS = (GATED_DELTANET, LINEAR_MLA)  # kinds whose linear layers hold per-request states


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool = False
    lm_head: bool = True  # a drafter without its own head call (none) sets False
    family: str = "qwen3"  # the transformers model_type the profiler builds
    # mixture of experts (experts == 0: dense)
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_intermediate: int = 0
    dense_layers: int = 0  # leading layers with a dense MLP of width `intermediate` (DeepSeek's first_k_dense_replace)
    # multi-head latent attention (kv_lora_rank == 0: standard multi-/grouped-query attention)
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # sliding-window attention: every `sliding_pattern`-th layer is global, the others see `sliding_window` tokens
    sliding_window: int = 0
    sliding_pattern: int = 0
    # compressed sparse attention (DeepSeek-V4); csa_layers == hca_layers == 0: not used. Its indexer fields
    # (index_*) also describe DeepSeek sparse attention's (MLA with index_topk > 0)
    csa_layers: int = 0
    hca_layers: int = 0
    csa_ratio: int = 4
    hca_ratio: int = 128
    index_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    o_lora_rank: int = 0
    o_groups: int = 0
    # Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5): every `linear_interval`-th layer full attention, the others linear
    linear_interval: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 4
    # layers attending in full where the others do not: a linear hybrid's where not every `linear_interval`-th
    # (Kimi-K3: every 4th and the last, 24), a block-sparse model's leading full layers (MiniMax-M3: 3)
    full_layers: int = 0
    index_block: int = 0  # block-sparse attention's unit of selection, tokens (MiniMax-M3: 128); 0: not block-sparse
    attn_output_gate: bool = False  # MLA full layers gate their output by a projection of the hidden state (Kimi-K3)
    expert_hidden: int = 0  # routed experts' width where they work in a latent space (Kimi-K3: 3,584 of 7,168)
    expert_dtype: str = ""  # routed experts' type where narrower than the rest ("fp4"; a deployment: "fp8", "w4a16")
    kv_dtype: str = ""  # the KV cache's type where the model or the deployment fixes it (V4: "fp8"); "" = bf16
    # the attention's input projections read this many hidden-width vectors (EAGLE-3's drafter layer: 2, the token's
    # embedding beside the fused target feature, so its q, k and v projections are twice as wide at their input)
    attn_input_multiple: int = 1
    # a drafter that first projects this many of the target's hidden states into one (EAGLE-3: 3 layers' states;
    # DFlash: 5), over the tokens it takes in, once a round; priced apart from its passes (``fusion_params``)
    fusion_inputs: int = 0
    # its layers also project K and V of that fused feature for each token taken in (DFlash's context)
    fused_context_kv: bool = False

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def attention_kind(self) -> str:
        """How the layers attend (one of ``ATTENTION_KINDS``; the module docstring describes each): a linear hybrid
        where some layers are linear (``linear-mla`` where its full layers are MLA, else ``gated-deltanet``), else
        compressed sparse attention where any layer reads compressed rows, else DeepSeek sparse attention where a
        latent's rows are selected by an indexer, else MLA where keys and values are a latent, else block-sparse GQA
        where an indexer selects each query's blocks of tokens (MiniMax-M3), else Gemma's interleaved sliding
        windows, else multi-head attention (a KV head per query head) or grouped-query attention (fewer, down to
        one: a DeepSeek-V4 drafter's window-only layers are one shared KV head)."""
        if self.linear_interval > 0:
            return LINEAR_MLA if self.kv_lora_rank > 0 else GATED_DELTANET
        if self.csa_layers + self.hca_layers > 0:
            return COMPRESSED_SPARSE
        if self.kv_lora_rank > 0:
            return DSA if self.index_topk > 0 else MLA
        if self.index_block > 0:
            return BLOCK_SPARSE
        if self.sliding_window and self.sliding_pattern:
            return SLIDING_WINDOW
        return MHA if self.kv_heads == self.heads else GQA

    @property
    def latent_kv(self) -> bool:
        """The KV cache is one copy for all query heads (MLA's latent, also that of Kimi-K3's full layers,
        compressed sparse attention's rows), so tensor parallelism cannot split it: every rank holds and reads all
        of it. Per-head caches (MHA, GQA, sliding windows, block-sparse) split over the ranks by KV head."""
        return self.attention_kind in (MLA, DSA, COMPRESSED_SPARSE, LINEAR_MLA)

    @property
    def checkpoint_dtype(self) -> str:
        """The type the model's public weights ship in, which ``hw-profile estimate`` prices by default: fp8 for
        DeepSeek's latent- and compressed-attention models (V3, V4, Kimi-K2, whose checkpoints are fp8 with 128 x 128
        block scales), bf16 for the others (Kimi-K3 quantizes its routed experts alone, ``expert_dtype``)."""
        return "fp8" if self.attention_kind in (MLA, DSA, COMPRESSED_SPARSE) else "bf16"

    @property
    def hyper_connections(self) -> bool:
        """Whether each layer's residual stream is mixed by DeepSeek-V4's hyper-connections (mHC), as priced: with
        V4's compressed attention only. A V4 drafter's window-only layers go without it (a simplification the
        estimate has made since V4 was added)."""
        return self.attention_kind == COMPRESSED_SPARSE

    def _compressed_attn_params(self) -> int:
        """All layers' attention parameters of a compressed-sparse-attention model (DeepSeek-V4)."""
        q = self.hidden * self.q_lora_rank + self.q_lora_rank * self.heads * self.head_dim
        kv = self.hidden * self.head_dim
        o = self.heads * self.head_dim * self.o_lora_rank + self.o_groups * self.o_lora_rank * self.hidden
        # compressors: KV and gate projections to the compressed row (overlapping windows double it on CSA)
        csa_comp = 2 * self.hidden * 2 * self.head_dim
        hca_comp = 2 * self.hidden * self.head_dim
        indexer = (self.q_lora_rank * self.index_heads * self.index_head_dim + self.hidden * self.index_heads
                   + 2 * self.hidden * 2 * self.index_head_dim)
        return (self.layers * (q + kv + o) + self.csa_layers * (csa_comp + indexer)
                + self.hca_layers * hca_comp)

    def _indexer_params(self) -> int:
        """A DeepSeek-sparse-attention layer's indexer: index queries from the query latent, one index key and the
        per-head weights from the hidden state (0 for other kinds)."""
        if self.attention_kind != DSA:
            return 0
        q_in = self.q_lora_rank or self.hidden
        return q_in * self.index_heads * self.index_head_dim + self.hidden * (self.index_head_dim + self.index_heads)

    def _block_indexer_params(self) -> int:
        """A block-sparse layer's indexer: its index queries and its one index key, from the hidden state."""
        return self.hidden * (self.index_heads + 1) * self.index_head_dim

    @property
    def sparse_attention_layers(self) -> int:
        """Layers of a block-sparse model whose queries attend to the tokens they select (0 for other kinds)."""
        return self.layers - min(self.full_layers, self.layers) if self.attention_kind == BLOCK_SPARSE else 0

    @property
    def full_attention_layers(self) -> int:
        """Layers that cache keys and values: all but a linear hybrid's linear layers."""
        if not self.linear_interval:
            return self.layers
        return min(self.full_layers, self.layers) if self.full_layers else self.layers // self.linear_interval

    @property
    def linear_attention_layers(self) -> int:
        return self.layers - self.full_attention_layers

    @property
    def _linear_conv_channels(self) -> int:
        """Channels of a linear layer's short convolution: its queries, keys and values."""
        return (2 * self.linear_key_heads * self.linear_key_head_dim
                + self.linear_value_heads * self.linear_value_head_dim)

    @property
    def state_bytes_per_request(self) -> float:
        """Bytes (2-byte precision) a request holds whatever its context: a linear hybrid's recurrent states and
        convolution inputs, all linear layers; 0 for other kinds."""
        per_layer = (self.linear_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
                     + (self.linear_conv_kernel - 1) * self._linear_conv_channels)
        return 2.0 * self.linear_attention_layers * per_layer

    def _linear_hybrid_attn_params(self) -> int:
        """All layers' attention parameters of a linear hybrid: the full layers' (Gated DeltaNet's: gated queries,
        2 x heads, keys, values and output; ``linear-mla``'s: MLA's, ``_mla_attn_params``), and the linear layers'
        query-key-value-gate and beta-alpha projections, convolution and output."""
        if self.attention_kind == LINEAR_MLA:
            full = self._mla_attn_params(self.hidden)
        else:
            full = (2 * self.hidden * self.heads * self.head_dim + 2 * self.hidden * self.kv_heads * self.head_dim
                    + self.heads * self.head_dim * self.hidden)
        value_width = self.linear_value_heads * self.linear_value_head_dim
        linear = (self.hidden * (2 * self.linear_key_heads * self.linear_key_head_dim + 2 * value_width)
                  + self.hidden * 2 * self.linear_value_heads + self.linear_conv_kernel * self._linear_conv_channels
                  + value_width * self.hidden)
        return self.full_attention_layers * full + self.linear_attention_layers * linear

    def _mla_attn_params(self, width: int) -> int:
        """One MLA layer's attention parameters whose input projections read ``width`` values: low-rank (or full)
        queries, the latent and rotary key, the latent's expansion to keys and values, the output (and its gate
        where ``attn_output_gate``), and a DeepSeek-sparse-attention indexer where there is one."""
        qk = self.head_dim + self.qk_rope_head_dim
        if self.q_lora_rank:
            q = width * self.q_lora_rank + self.q_lora_rank * self.heads * qk
        else:
            q = width * self.heads * qk
        kv_a = width * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_b = self.kv_lora_rank * self.heads * (self.head_dim + self.v_head_dim)
        o = self.heads * self.v_head_dim * self.hidden
        gate = width * self.heads * self.v_head_dim if self.attn_output_gate else 0
        return q + kv_a + kv_b + o + gate + self._indexer_params()

    @property
    def attn_params_per_layer(self) -> int:
        # V4's attention (low-rank queries, one shared KV head, grouped low-rank output) also in layers that only
        # see the window (a V4 drafter's): the same projections without compressors or indexer
        if self.attention_kind == COMPRESSED_SPARSE or self.o_groups:
            return self._compressed_attn_params() // self.layers
        if self.attention_kind in LINEAR_HYBRIDS:  # the mean over full and linear layers (to a parameter a layer)
            return self._linear_hybrid_attn_params() // self.layers
        width = self.hidden * self.attn_input_multiple  # what the input projections read
        if self.attention_kind in (MLA, DSA):
            return self._mla_attn_params(width)
        q = width * self.heads * self.head_dim
        kv = 2 * width * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        indexers = self.sparse_attention_layers * self._block_indexer_params()  # the mean over the layers
        return q + kv + o + indexers // self.layers

    @property
    def fusion_params(self) -> int:
        """Weights a drafter runs over the target tokens it takes in, once a round: the fusion projection
        (``fusion_inputs`` hidden states to one) and, with ``fused_context_kv``, every layer's K and V projections of
        the fused feature. Outside ``matmul_params``, which every pass reads."""
        context_kv = 2 * self.layers * self.hidden * self.kv_heads * self.head_dim if self.fused_context_kv else 0
        return self.fusion_inputs * self.hidden * self.hidden + context_kv

    @property
    def mlp_params_per_layer(self) -> int:
        return 3 * self.hidden * self.intermediate  # gate, up, down (SwiGLU)

    @property
    def expert_width(self) -> int:
        """The width routed experts read and write: ``expert_hidden`` for latent experts, else ``hidden``."""
        return self.expert_hidden or self.hidden

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert: a SwiGLU MLP of width ``expert_intermediate`` at ``expert_width``."""
        return 3 * self.expert_width * self.expert_intermediate

    @property
    def shared_expert_params(self) -> int:
        """Parameters of one shared expert: a SwiGLU MLP of width ``expert_intermediate`` at ``hidden``."""
        return 3 * self.hidden * self.expert_intermediate

    @property
    def latent_projection_params(self) -> int:
        """An MoE layer's projections into the latent experts' space and back (0 without latent experts)."""
        return 2 * self.hidden * self.expert_hidden

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def head_params(self) -> int:
        return self.hidden * self.vocab if self.lm_head else 0

    @property
    def dense_params(self) -> int:
        """Matmul parameters every step reads whatever the routing: attention, dense MLPs, shared experts, router,
        LM head. For a dense model this is ``matmul_params``."""
        if not self.is_moe:
            return self.layers * (self.attn_params_per_layer + self.mlp_params_per_layer) + self.head_params
        per_moe_layer = (self.shared_experts * self.shared_expert_params + self.hidden * self.experts  # + router
                         + self.latent_projection_params)
        return (
            self.layers * self.attn_params_per_layer
            + self.dense_layers * self.mlp_params_per_layer
            + self.moe_layers * per_moe_layer
            + self.head_params
        )

    @property
    def replicated_params(self) -> int:
        """Matmul parameters (among ``dense_params``) that every tensor-parallel rank holds and multiplies whole
        instead of a share: DeepSeek sparse attention's indexer, whose projections vLLM and SGLang replicate; 0 for
        other kinds."""
        return self.layers * self._indexer_params()

    def params_per_gpu(self, params: float, tp: int) -> float:
        """Of ``params`` matmul parameters that include the replicated ones (``replicated_params``), what one of
        ``tp`` tensor-parallel GPUs holds and multiplies: a share of the split ones and the replicated ones whole."""
        return (params - self.replicated_params) / tp + self.replicated_params

    def dense_params_per_gpu(self, tp: int) -> float:
        """``dense_params`` one of ``tp`` tensor-parallel GPUs holds and reads (``params_per_gpu``)."""
        return self.params_per_gpu(self.dense_params, tp)

    @property
    def matmul_params(self) -> int:
        """Parameters every new token multiplies through (the embedding lookup is not a matmul). For an MoE model,
        the active parameters: the dense part plus ``experts_per_token`` routed experts per MoE layer."""
        if not self.is_moe:
            return self.layers * (self.attn_params_per_layer + self.mlp_params_per_layer) + self.head_params
        return self.dense_params + self.moe_layers * self.experts_per_token * self.expert_params

    @property
    def total_params(self) -> int:
        """Every stored weight: all experts, the embedding and (when not tied) the LM head. Norms are negligible."""
        routed = self.moe_layers * self.experts * self.expert_params
        embed = self.hidden * self.vocab
        head = self.head_params if not self.tie_embeddings else 0
        return self.dense_params - self.head_params + routed + embed + head

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes of KV cache per context token, all layers, in 2-byte precision.

        GQA: K and V, ``kv_heads x head_dim`` each (of a Gated DeltaNet hybrid's full layers only). MLA: the
        compressed latent plus the shared rotary key, ``kv_lora_rank + qk_rope_head_dim`` values, one copy for all
        heads (what FlashMLA/vLLM/SGLang cache; the expanded per-head K and V would be ``heads x (qk_head_dim +
        v_head_dim)``, 71x more for DeepSeek-V3, and no serving engine stores that). Compressed sparse attention:
        per CSA layer a row of ``head_dim`` plus an index key of ``index_head_dim`` per ``csa_ratio`` tokens, per HCA
        layer a row per ``hca_ratio`` tokens (the window's ``sliding_window`` rows per request and layer are bounded
        and not counted here). DeepSeek sparse attention: MLA's latent and rotary key plus the indexer's key of
        ``index_head_dim``. Kimi-K3 (``linear-mla``): MLA's, of its full layers only. Block-sparse attention: GQA's
        in every layer plus the sparse layers' index keys of ``index_head_dim``."""
        if self.attention_kind == DSA:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim + self.index_head_dim) * 2.0
        if self.attention_kind == COMPRESSED_SPARSE:
            return 2.0 * (self.csa_layers * (self.head_dim + self.index_head_dim) / self.csa_ratio
                          + self.hca_layers * self.head_dim / self.hca_ratio)
        if self.attention_kind in (MLA, LINEAR_MLA):
            return self.full_attention_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * 2.0
        index_keys = self.sparse_attention_layers * self.index_head_dim * 2.0
        return 2.0 * self.full_attention_layers * self.kv_heads * self.head_dim * 2.0 + index_keys

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads one of ``tp`` tensor-parallel ranks holds: they split with the query heads, but never below one
        (engines replicate a KV head over the ranks that share it)."""
        return max(1, self.kv_heads // tp)

    def kv_cache_facts(self, value_bytes: float, tp: int, gpus: int) -> dict[str, float]:
        """The sidecar's KV facts for a cache of ``value_bytes`` per value on a table of ``gpus`` GPUs whose
        attention heads are split ``tp`` ways: ``kv_bytes_per_token_per_gpu``, what one context token holds on one
        GPU (tensor parallelism splits KV heads, but never below one head a GPU, as vLLM replicates them; a latent
        or compressed cache is one copy for all heads, so every GPU holds all of it), and ``kv_bytes_per_token``,
        the same over all the table's GPUs. One owner of this fact: the simulator sizes the KV pool from it."""
        total = self.kv_bytes_per_token * value_bytes / 2.0
        if self.latent_kv or tp <= 1:
            per_gpu = total
        else:
            per_gpu = total * self.kv_heads_per_rank(tp) / self.kv_heads
        return {"kv_bytes_per_token_per_gpu": per_gpu, "kv_bytes_per_token": per_gpu * gpus}

    @property
    def windowed_layers(self) -> int:
        """Layers that attend to the last ``sliding_window`` tokens only (every ``sliding_pattern``-th is global);
        0 unless the attention kind is sliding-window (a compressed-sparse model's window is priced per query
        token instead)."""
        if self.attention_kind != SLIDING_WINDOW:
            return 0
        return self.layers - self.layers // self.sliding_pattern

    @property
    def windowed_share(self) -> float:
        """The share of the layers that see their window only (``windowed_layers`` over all); 0 without windows."""
        return self.windowed_layers / self.layers

    def attended_kv(self, kv_tokens, requests):
        """The KV tokens a step's attention reads per layer, averaged over the layers, when ``kv_tokens`` of context
        are spread over ``requests`` requests evenly: all of them, except that a windowed layer reads at most its
        window per request (elementwise over arrays)."""
        if not self.windowed_layers:
            return kv_tokens
        share = self.windowed_share
        return kv_tokens * (1.0 - share) + np.minimum(kv_tokens, np.asarray(requests) * self.sliding_window) * share

    @property
    def kv_read_bytes_per_token(self) -> float:
        """Bytes of KV cache a step reads per context token (2-byte precision), once per request. Every layer reads
        its whole cache (``kv_bytes_per_token``) except under compressed sparse attention, where per context token
        only the indexer's keys (CSA) and the heavily compressed rows (HCA) are read; the selected rows are a cost
        per query token (``attn_read_bytes_per_query_token``); under DeepSeek sparse attention only the index keys
        are, the selected latent rows likewise a cost per query token; under block-sparse attention the full layers'
        K and V and the sparse layers' index keys, the selected tokens a cost per query token."""
        if self.attention_kind == DSA:
            return 2.0 * self.layers * self.index_head_dim
        if self.attention_kind == COMPRESSED_SPARSE:
            return 2.0 * (self.csa_layers * self.index_head_dim / self.csa_ratio
                          + self.hca_layers * self.head_dim / self.hca_ratio)
        if self.attention_kind == BLOCK_SPARSE:  # the full layers' K and V, the sparse layers' index keys
            full = self.layers - self.sparse_attention_layers
            return 2.0 * (full * 2 * self.kv_heads * self.head_dim + self.sparse_attention_layers * self.index_head_dim)
        return self.kv_bytes_per_token

    @property
    def attn_read_bytes_per_query_token(self) -> float:
        """KV bytes (2-byte precision) each query token reads beyond ``kv_read_bytes_per_token``: under compressed
        sparse attention, the ``index_topk`` selected rows of each CSA layer and the window of every layer
        (contexts assumed longer than both); under DeepSeek sparse attention the ``index_topk`` selected latent rows
        of every layer; under block-sparse attention the ``index_topk`` selected tokens' K and V of every sparse
        layer; under a linear hybrid the token's own states, written. Zero for other attention kinds."""
        if self.attention_kind == DSA:
            return 2.0 * self.layers * self.index_topk * (self.kv_lora_rank + self.qk_rope_head_dim)
        if self.attention_kind in LINEAR_HYBRIDS:  # the token's own state written (read: once per request)
            return self.state_bytes_per_request
        if self.attention_kind == BLOCK_SPARSE:  # the selected tokens' K and V in every sparse layer
            return 2.0 * self.sparse_attention_layers * self.index_topk * 2 * self.kv_heads * self.head_dim
        if self.attention_kind != COMPRESSED_SPARSE:
            return 0.0
        return 2.0 * self.head_dim * (self.csa_layers * self.index_topk + self.layers * self.sliding_window)

    @property
    def attn_read_bytes_per_request(self) -> float:
        """Bytes (2-byte precision) a step reads once for each request in it, however many of its tokens: a Gated
        DeltaNet hybrid's recurrent states and convolution inputs, which the recurrence carries from one of the
        request's tokens to the next (vLLM's and SGLang's verify kernels load them once and store every position's).
        Zero for other attention kinds."""
        return self.state_bytes_per_request if self.attention_kind in LINEAR_HYBRIDS else 0.0

    @property
    def attn_flops_per_query_token(self) -> float:
        """Attention FLOPs per query token that do not grow with the context: scores and weighted sums over the
        selected rows and the window under compressed sparse attention (one KV head shared by all query heads);
        under DeepSeek sparse attention MLA's absorbed scores and sums over the ``index_topk`` selected rows; under
        block-sparse attention GQA's over the selected tokens of every sparse layer; a linear hybrid's delta rule.
        Zero for other attention kinds."""
        if self.attention_kind == DSA:
            return self.layers * self.heads * (4.0 * self.kv_lora_rank + 2.0 * self.qk_rope_head_dim) * self.index_topk
        if self.attention_kind == BLOCK_SPARSE:  # scores and sums over the selected tokens
            return 4.0 * self.sparse_attention_layers * self.heads * self.head_dim * self.index_topk
        if self.attention_kind in LINEAR_HYBRIDS:  # the delta rule: S k, the rank-one update of S, S q
            return (self.linear_attention_layers * (6.0 * self.linear_value_heads * self.linear_key_head_dim
                                                    * self.linear_value_head_dim
                                                    + 2.0 * self.linear_conv_kernel * self._linear_conv_channels))
        if self.attention_kind != COMPRESSED_SPARSE:
            return 0.0
        rows = self.csa_layers * self.index_topk + self.layers * self.sliding_window
        return 4.0 * self.heads * self.head_dim * rows

    @property
    def attn_flops_per_kv_token(self) -> float:
        """FLOPs of attention per query token per context token, all layers.

        GQA: scores and weighted sum, 2 x 2 x heads x head_dim (a Gated DeltaNet hybrid's full layers only). MLA
        in absorbed form: each head scores against the latent and the rotary key (2 x (kv_lora_rank + rope)) and
        sums the latent (2 x kv_lora_rank). Compressed sparse attention: the indexer scores every compressed row of a
        CSA layer (2 x index heads x index dim per ``csa_ratio`` tokens) and HCA layers attend to every compressed
        row. DeepSeek sparse attention: its indexer scores every context token (2 x index heads x index dim per
        layer); the attention proper is per query. Block-sparse attention: GQA's in the full layers, the indexer's
        scores in the sparse layers. Kimi-K3: MLA's, of its full layers only."""
        if self.attention_kind == DSA:
            return self.layers * 2.0 * self.index_heads * self.index_head_dim
        if self.attention_kind == COMPRESSED_SPARSE:
            return (self.csa_layers * 2.0 * self.index_heads * self.index_head_dim / self.csa_ratio
                    + self.hca_layers * 4.0 * self.heads * self.head_dim / self.hca_ratio)
        if self.attention_kind in (MLA, LINEAR_MLA):
            return self.full_attention_layers * self.heads * (4.0 * self.kv_lora_rank + 2.0 * self.qk_rope_head_dim)
        sparse = self.sparse_attention_layers  # their indexer scores every context token; the attention is per query
        indexer = sparse * 2.0 * self.index_heads * self.index_head_dim
        return 4.0 * (self.full_attention_layers - sparse) * self.heads * self.head_dim + indexer

    def to_dict(self) -> dict:
        """All fields, leaving out the optional ones (MoE, MLA, sliding window, family) at their defaults, so a
        dense Qwen3 shape reads as it always has."""
        out = asdict(self)
        defaults = {f.name: f.default for f in fields(self) if f.name in _OPTIONAL}
        return {k: v for k, v in out.items() if k not in defaults or v != defaults[k]}


_OPTIONAL = {
    "family", "experts", "experts_per_token", "shared_experts", "expert_intermediate", "dense_layers",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "sliding_window", "sliding_pattern",
    "csa_layers", "hca_layers", "csa_ratio", "hca_ratio", "index_heads", "index_head_dim", "index_topk",
    "o_lora_rank", "o_groups", "expert_dtype", "kv_dtype", "linear_interval", "linear_key_heads",
    "linear_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel", "full_layers",
    "index_block", "attn_output_gate", "expert_hidden", "attn_input_multiple", "fusion_inputs", "fused_context_kv",
}

SHAPES: dict[str, ModelShape] = {
    # Qwen/Qwen3-0.6B: small enough to time on a CPU at full depth
    "qwen3-0.6b": ModelShape("qwen3-0.6b", layers=28, hidden=1024, heads=16, kv_heads=8, head_dim=128,
                             intermediate=3072, vocab=151936, tie_embeddings=True),
    "qwen3-4b": ModelShape("qwen3-4b", layers=36, hidden=2560, heads=32, kv_heads=8, head_dim=128,
                           intermediate=9728, vocab=151936, tie_embeddings=True),
    "qwen3-8b": ModelShape("qwen3-8b", layers=36, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                           intermediate=12288, vocab=151936),
    "qwen3-14b": ModelShape("qwen3-14b", layers=40, hidden=5120, heads=40, kv_heads=8, head_dim=128,
                            intermediate=17408, vocab=151936),
    "qwen3-32b": ModelShape("qwen3-32b", layers=64, hidden=5120, heads=64, kv_heads=8, head_dim=128,
                            intermediate=25600, vocab=151936),
    # Qwen/Qwen3-Next-80B-A3B-Instruct config.json: 48 layers, three Gated DeltaNet layers to one gated full-attention
    # layer (full_attention_interval 4; GQA 16 query / 2 KV heads of 256; linear 16 key / 32 value heads of 128,
    # a 4-wide convolution), 512 routed experts of width 512 (10 per token) + one shared expert of the same width
    "qwen3-next-80b-a3b": ModelShape("qwen3-next-80b-a3b", layers=48, hidden=2048, heads=16, kv_heads=2, head_dim=256,
                                     intermediate=5120, vocab=151936, family="qwen3_next", experts=512,
                                     experts_per_token=10, shared_experts=1, expert_intermediate=512,
                                     linear_interval=4, linear_key_heads=16, linear_value_heads=32,
                                     linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel=4),
    # Qwen/Qwen3.5-397B-A17B's language model (the config's text fields, as public ports and training recipes pin
    # them; its vision tower is not priced): Qwen3-Next's layout at 60 layers of 4096 (GQA 32 query / 2 KV heads
    # of 256; linear 16 key / 64 value heads of 128), 512 routed experts of width 1024 (10 per token) + one shared
    # expert of the same width, a 248,320-token vocabulary
    "qwen3.5-397b-a17b": ModelShape("qwen3.5-397b-a17b", layers=60, hidden=4096, heads=32, kv_heads=2, head_dim=256,
                                    intermediate=1024, vocab=248320, family="qwen3_5_moe_text", experts=512,
                                    experts_per_token=10, shared_experts=1, expert_intermediate=1024,
                                    linear_interval=4, linear_key_heads=16, linear_value_heads=64,
                                    linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel=4),
    # meta-llama/Llama-3.1-8B-Instruct and -70B-Instruct config.json (Llama-3.3-70B is the 70B's architecture):
    # GQA with 8 KV heads of 128, a 128,256-token vocabulary
    "llama-3.1-8b": ModelShape("llama-3.1-8b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                               intermediate=14336, vocab=128256, family="llama"),
    "llama-3.1-70b": ModelShape("llama-3.1-70b", layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128,
                                intermediate=28672, vocab=128256, family="llama"),
    # openai/gpt-oss-120b and -20b config.json: 36 (24) layers alternating a 128-token sliding window and full
    # attention, 64 query / 8 KV heads of 64, 128 (32) routed experts of width 2880, 4 per token, stored in MXFP4.
    # Not priced: the attention sinks and the projections' biases
    "gpt-oss-120b": ModelShape("gpt-oss-120b", layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64,
                               intermediate=2880, vocab=201088, family="gpt_oss", experts=128, experts_per_token=4,
                               expert_intermediate=2880, sliding_window=128, sliding_pattern=2, expert_dtype="fp4"),
    "gpt-oss-20b": ModelShape("gpt-oss-20b", layers=24, hidden=2880, heads=64, kv_heads=8, head_dim=64,
                              intermediate=2880, vocab=201088, family="gpt_oss", experts=32, experts_per_token=4,
                              expert_intermediate=2880, sliding_window=128, sliding_pattern=2, expert_dtype="fp4"),
    # Qwen/Qwen3-30B-A3B config.json: 48 layers, all MoE (128 experts, 8 per token, width 768, no shared expert),
    # GQA 32 query / 4 KV heads of 128
    "qwen3-30b-a3b": ModelShape("qwen3-30b-a3b", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128,
                                intermediate=6144, vocab=151936, family="qwen3_moe", experts=128,
                                experts_per_token=8, expert_intermediate=768),
    # Qwen/Qwen3-235B-A22B config.json: 94 layers, all MoE (128 experts, 8 per token, width 1536, no shared
    # expert), GQA 64 query / 4 KV heads of 128
    "qwen3-235b-a22b": ModelShape("qwen3-235b-a22b", layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128,
                                  intermediate=12288, vocab=151936, family="qwen3_moe", experts=128,
                                  experts_per_token=8, expert_intermediate=1536),
    # google/gemma-3-12b (text config): 48 layers, 5 local (1024-token window) : 1 global
    "gemma3-12b": ModelShape("gemma3-12b", layers=48, hidden=3840, heads=16, kv_heads=8, head_dim=256,
                             intermediate=15360, vocab=262208, tie_embeddings=True, family="gemma3_text",
                             sliding_window=1024, sliding_pattern=6),
    # deepseek-ai/DeepSeek-V3 config.json: 61 layers (first 3 dense), 256 routed experts + 1 shared, 8 per token,
    # MLA (q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128). The MTP module (layer 61 of the
    # checkpoint, 14B) is not part of the 671B and not counted here.
    "deepseek-v3": ModelShape("deepseek-v3", layers=61, hidden=7168, heads=128, kv_heads=128, head_dim=128,
                              intermediate=18432, vocab=129280, family="deepseek_v3",
                              experts=256, experts_per_token=8, shared_experts=1, expert_intermediate=2048,
                              dense_layers=3, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
                              v_head_dim=128),
    # deepseek-ai/DeepSeek-V3.2 config.json: DeepSeek-V3's architecture plus DeepSeek sparse attention, an indexer of
    # 64 heads x 128 selecting the top 2,048 context tokens per query token in every layer
    "deepseek-v3.2": ModelShape("deepseek-v3.2", layers=61, hidden=7168, heads=128, kv_heads=128, head_dim=128,
                                intermediate=18432, vocab=129280, family="deepseek_v32",
                                experts=256, experts_per_token=8, shared_experts=1, expert_intermediate=2048,
                                dense_layers=3, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
                                v_head_dim=128, index_heads=64, index_head_dim=128, index_topk=2048),
    # moonshotai/Kimi-K2-Instruct config.json: DeepSeek-V3's architecture with 64 heads, 384 routed experts (8 per
    # token, width 2048) + 1 shared, one leading dense layer, a 163,840-token vocabulary
    "kimi-k2": ModelShape("kimi-k2", layers=61, hidden=7168, heads=64, kv_heads=64, head_dim=128, intermediate=18432,
                          vocab=163840, family="deepseek_v3", experts=384, experts_per_token=8, shared_experts=1,
                          expert_intermediate=2048, dense_layers=1, kv_lora_rank=512, q_lora_rank=1536,
                          qk_rope_head_dim=64, v_head_dim=128),
    # GLM-5.2 (zai-org; model_type glm_moe_dsa): the config values a public vLLM port pins for the GLM-5.2
    # checkpoint (jinhuang12/vllm-neuron, vllm_neuron/model/glm_moe_dsa/config.py), which are GLM-5's defaults in
    # transformers' GlmMoeDsaConfig: 78 layers (first 3 dense, width 12288), 256 routed experts + 1 shared, 8 per
    # token, width 2048, MLA (q_lora_rank 2048, kv_lora_rank 512, qk_nope 192, qk_rope 64, v 256), 64 heads, a
    # 154,880-token vocabulary, one MTP layer (not counted), fp8 weights in 128 x 128 blocks, and DeepSeek-V3.2's
    # sparse attention: index_topk 2,048 as the port pins it, an indexer of 32 heads x 128 (index_n_heads and
    # index_head_dim: GlmMoeDsaConfig's defaults, which the port does not pin).
    "glm-5.2": ModelShape("glm-5.2", layers=78, hidden=6144, heads=64, kv_heads=64, head_dim=192, intermediate=12288,
                          vocab=154880, family="glm_moe_dsa", experts=256, experts_per_token=8, shared_experts=1,
                          expert_intermediate=2048, dense_layers=3, kv_lora_rank=512, q_lora_rank=2048,
                          qk_rope_head_dim=64, v_head_dim=256, index_heads=32, index_head_dim=128, index_topk=2048),
    # deepseek-ai/DeepSeek-V4-Flash config.json: 43 layers, hidden 4096, 64 query heads over one 512-wide KV head
    # (rotary 64 inside), q_lora_rank 1024, output in 8 groups of rank 1024, 256 routed experts (fp4) + 1 shared,
    # 6 per token, width 2048 (the first 3 hash-routed, still experts), compress_ratios [0, 0] + [4, 128] x 20 +
    # [4] (2 window-only, 21 CSA, 20 HCA layers), window 128, indexer 64 x 128 selecting the top 512, one MTP
    # layer (not counted). Totals come out at 284B stored and 13.2B active matmul parameters (+0.5B embedding: 13.8B,
    # the card's ~13.9B; mHC mixing and norms are not counted).
    "deepseek-v4-flash": ModelShape("deepseek-v4-flash", layers=43, hidden=4096, heads=64, kv_heads=1, head_dim=512,
                                    intermediate=0, vocab=129280, family="deepseek_v4", experts=256,
                                    experts_per_token=6, shared_experts=1, expert_intermediate=2048,
                                    q_lora_rank=1024, qk_rope_head_dim=64, sliding_window=128, csa_layers=21,
                                    hca_layers=20, index_heads=64, index_head_dim=128, index_topk=512,
                                    o_lora_rank=1024, o_groups=8, expert_dtype="fp4", kv_dtype="fp8"),
    # deepseek-ai/DeepSeek-V4-Pro: the card states 1.6T total and 49B active. Shape as its config.json is
    # reproduced in public inference code (not checked against the card here): 61 layers, hidden 7168, 128 query
    # heads x 512, q_lora_rank 1536, output in 16 groups of rank 1024, 384 routed experts (fp4) + 1 shared, 6 per
    # token, width 3072, compress_ratios [128, 128] + [4, 128] x 29 + [4] (30 CSA, 31 HCA, no window-only layer),
    # indexer 64 x 128 selecting the top 1024. Consistency check: 1.57T stored (the card's 1.6T) and 48.8B active
    # matmul parameters + 0.9B embedding = 49.7B (the card's 49B).
    "deepseek-v4-pro": ModelShape("deepseek-v4-pro", layers=61, hidden=7168, heads=128, kv_heads=1, head_dim=512,
                                  intermediate=0, vocab=129280, family="deepseek_v4", experts=384,
                                  experts_per_token=6, shared_experts=1, expert_intermediate=3072,
                                  q_lora_rank=1536, qk_rope_head_dim=64, sliding_window=128, csa_layers=30,
                                  hca_layers=31, index_heads=64, index_head_dim=128, index_topk=1024,
                                  o_lora_rank=1024, o_groups=16, expert_dtype="fp4", kv_dtype="fp8"),
    # moonshotai/Kimi-K3 config.json (text_config, model_type kimi_linear), as public ports quote it: 93 layers, 69 of
    # Kimi Delta Attention (96 heads of 128, a 4-wide convolution, a full-rank gate) and 24 gated MLA (every 4th
    # and the last: q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128, 96 heads, an output gate),
    # the first layer dense (width 33,792), the others 896 routed experts (16 a token, width 3,072) in a 3,584-wide
    # latent space + 2 shared experts at the hidden width, a 163,840-token vocabulary, experts in MXFP4. Not priced:
    # the attention residuals over blocks of 12 layers (a softmax over a dozen block summaries a token), norms.
    "kimi-k3": ModelShape("kimi-k3", layers=93, hidden=7168, heads=96, kv_heads=96, head_dim=128, intermediate=33792,
                          vocab=163840, family="kimi_linear", experts=896, experts_per_token=16, shared_experts=2,
                          expert_intermediate=3072, dense_layers=1, kv_lora_rank=512, q_lora_rank=1536,
                          qk_rope_head_dim=64, v_head_dim=128, linear_interval=4, full_layers=24,
                          linear_key_heads=96, linear_value_heads=96, linear_key_head_dim=128,
                          linear_value_head_dim=128, linear_conv_kernel=4, attn_output_gate=True,
                          expert_hidden=3584, expert_dtype="fp4"),
    # MiniMax-M3's config.json (text_config of MiniMaxAI/MiniMax-M3, model_type minimax_m3), as public ports and
    # engines' tests quote it: 60 layers of hidden 6144, GQA 64 query / 4 KV heads of 128 (partial rotary), the
    # first 3 layers a dense MLP of 12,288 attending in full, the other 57 MoE (128 routed experts of width 3,072, 4
    # a token, + 1 shared of 3,072) with MiniMax sparse attention: an indexer of 4 heads x 128 choosing each query's
    # top 16 blocks of 128 tokens (2,048 tokens; a local block beside them, where the engine adds one, is not
    # counted), a 200,064-token vocabulary. Not counted: the 7 MTP modules and the vision tower. 426B stored, 24.7B
    # active matmul parameters (a public reading of the config gives 428B and about 23B).
    "minimax-m3": ModelShape("minimax-m3", layers=60, hidden=6144, heads=64, kv_heads=4, head_dim=128,
                             intermediate=12288, vocab=200064, family="minimax_m3", experts=128, experts_per_token=4,
                             shared_experts=1, expert_intermediate=3072, dense_layers=3, index_heads=4,
                             index_head_dim=128, index_topk=2048, index_block=128, full_layers=3),
}

# Names that resolve to another entry. Google's Gemma 4 family (ai.google.dev/gemma/docs/core) has E2B, E4B, a
# 26B MoE and a 31B dense model, no 12B; "gemma4-12b" (the name the profiling issue asked for) therefore resolves
# to the 12B Gemma whose config is public, Gemma 3 12B, and tables record the resolved name.
ALIASES: dict[str, str] = {"gemma4-12b": "gemma3-12b", "llama-3.3-70b": "llama-3.1-70b"}


def shape_names() -> list[str]:
    return sorted([*SHAPES, *ALIASES])


def get_shape(name_or_path: str | Path) -> ModelShape:
    """A built-in shape by name, or one read from a transformers config.json."""
    key = str(name_or_path)
    key = ALIASES.get(key, key)
    if key in SHAPES:
        return SHAPES[key]
    path = Path(key)
    if path.suffix == ".json" and path.is_file():
        return shape_from_config(read_config(path), name=path.stem)
    raise KeyError(f"unknown model shape {key!r}; built-in shapes: {', '.join(shape_names())}, or a config.json path")


def read_config(path: str | Path) -> dict:
    """A transformers config.json as a dict (the text config of a multimodal one)."""
    cfg = read_json_object(Path(path), "config.json")
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    return cfg


def shape_from_config(cfg: dict, name: str = "custom") -> ModelShape:
    """Read the fields a transformers config uses (Qwen3/Llama-style, Gemma 3, Qwen3-MoE/Mixtral, gpt-oss,
    DeepSeek-V2/V3/V3.2, Qwen3-Next/Qwen3.5, Kimi Linear/Kimi-K3, MiniMax-M3)."""
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        layers = int(cfg["num_hidden_layers"])
        experts = int(cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
        moe = {}
        if experts:
            mlp_only = cfg.get("mlp_only_layers") or []
            moe = dict(
                experts=experts,
                experts_per_token=int(cfg.get("num_experts_per_tok") or cfg.get("num_experts_per_token")
                                      or cfg.get("top_k_experts") or 1),
                shared_experts=int(cfg.get("n_shared_experts") or cfg.get("num_shared_experts") or 0),
                expert_hidden=int(cfg.get("routed_expert_hidden_size") or 0),  # Kimi-K3's latent experts
                expert_intermediate=int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"]),
                dense_layers=int(cfg.get("first_k_dense_replace") or len(mlp_only)),
            )
            shared_width = int(cfg.get("shared_expert_intermediate_size") or 0)
            if cfg.get("shared_intermediate_size"):  # MiniMax-M3: n_shared_experts of this width
                shared_width = int(cfg["shared_intermediate_size"]) * max(moe["shared_experts"], 1)
                moe["shared_experts"] = 0
            if isinstance(cfg.get("moe_layer_freq"), list):  # MiniMax-M3: 0 for each leading dense layer
                moe["dense_layers"] = list(cfg["moe_layer_freq"]).count(0)
            if shared_width and not moe["shared_experts"]:  # Qwen3-Next, Qwen3.5: one shared expert of its own width
                moe["shared_experts"] = max(1, round(shared_width / moe["expert_intermediate"]))
            quant = cfg.get("quantization_config")
            if isinstance(quant, dict) and (quant.get("quant_method") == "mxfp4"  # gpt-oss: the experts alone
                                            or "mxfp4" in str(quant.get("format") or "")):  # Kimi-K3: likewise
                moe["expert_dtype"] = "fp4"
        mla = {}
        if cfg.get("kv_lora_rank"):
            mla = dict(
                kv_lora_rank=int(cfg["kv_lora_rank"]),
                q_lora_rank=int(cfg.get("q_lora_rank") or 0),
                qk_rope_head_dim=int(cfg["qk_rope_head_dim"]),
                v_head_dim=int(cfg["v_head_dim"]),
            )
        if mla and cfg.get("index_topk"):  # DeepSeek sparse attention (DeepSeek-V3.2, GLM-5)
            mla.update(index_topk=int(cfg["index_topk"]), index_heads=int(cfg.get("index_n_heads") or 0),
                       index_head_dim=int(cfg.get("index_head_dim") or 0))
        sliding = {}
        if cfg.get("sliding_window") and (cfg.get("layer_types") or cfg.get("sliding_window_pattern")
                                          or cfg.get("_sliding_window_pattern")):
            pattern = cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern")
            if not pattern and cfg.get("layer_types"):
                types = list(cfg["layer_types"])
                pattern = types.index("full_attention") + 1 if "full_attention" in types else 0
            if pattern:
                sliding = dict(sliding_window=int(cfg["sliding_window"]), sliding_pattern=int(pattern))
        linear = {}
        types = list(cfg.get("layer_types") or [])
        interval = cfg.get("full_attention_interval") or (
            types.index("full_attention") + 1 if "linear_attention" in types and "full_attention" in types else 0)
        if interval and cfg.get("linear_num_value_heads"):  # Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5)
            linear = dict(linear_interval=int(interval), linear_key_heads=int(cfg["linear_num_key_heads"]),
                          linear_value_heads=int(cfg["linear_num_value_heads"]),
                          linear_key_head_dim=int(cfg["linear_key_head_dim"]),
                          linear_value_head_dim=int(cfg["linear_value_head_dim"]),
                          linear_conv_kernel=int(cfg.get("linear_conv_kernel_dim") or 4))
        kda = cfg.get("linear_attn_config")
        if isinstance(kda, dict) and kda.get("kda_layers") and kda.get("full_attn_layers"):  # Kimi Linear, Kimi-K3
            full = sorted(int(n) for n in kda["full_attn_layers"])
            heads_kda, dim = int(kda["num_heads"]), int(kda["head_dim"])
            linear = dict(linear_interval=full[0], full_layers=len(full), linear_key_heads=heads_kda,
                          linear_value_heads=heads_kda, linear_key_head_dim=dim, linear_value_head_dim=dim,
                          linear_conv_kernel=int(kda.get("short_conv_kernel_size") or 4))
            if cfg.get("mla_use_output_gate"):
                linear["attn_output_gate"] = True
        block_sparse = {}
        sparse = cfg.get("sparse_attention_config")
        if isinstance(sparse, dict) and sparse.get("use_sparse_attention") and not mla:  # MiniMax-M3's MSA
            freq = list(sparse.get("sparse_attention_freq") or [1] * layers)
            block_sparse = dict(index_heads=int(sparse["sparse_num_index_heads"]),
                                index_head_dim=int(sparse["sparse_index_dim"]),
                                index_topk=int(sparse["sparse_topk_blocks"]) * int(sparse["sparse_block_size"]),
                                index_block=int(sparse["sparse_block_size"]), full_layers=freq.count(0))
        head_dim = cfg.get("qk_nope_head_dim") if mla else cfg.get("head_dim")
        return ModelShape(
            name=str(cfg.get("_name_or_path") or (name if name != "custom" else None) or cfg.get("model_type")
                     or name),
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(head_dim or hidden // heads),
            intermediate=int(cfg.get("dense_intermediate_size") or cfg["intermediate_size"]),
            vocab=int(cfg["vocab_size"]),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            family=str(cfg.get("model_type") or "qwen3"),
            **moe,
            **mla,
            **sliding,
            **linear,
            **block_sparse,
        )
    except KeyError as exc:
        raise KeyError(f"config lacks {exc.args[0]!r}, which a model shape needs") from None


def dense_gemms(shape: ModelShape, tp: int = 1) -> list[tuple[str, int, int, int]]:
    """(name, N, K, layers) of the dense GEMMs of one forward on one of ``tp`` tensor-parallel GPUs: the attention
    projections, dense MLPs, shared experts and latent experts' projections (routed experts and attention itself
    are priced apart)."""
    h, L = shape.hidden, shape.layers
    out: list[tuple[str, int, int, int]] = []
    kind = shape.attention_kind
    if kind in (COMPRESSED_SPARSE, DSA):
        pass  # V4's and DSA's attention projections (DSA's indexer too) are inside their measured attention modules
    elif kind in (MLA, LINEAR_MLA):
        qk = shape.head_dim + shape.qk_rope_head_dim
        full = shape.full_attention_layers
        out.append(("q_a+kv_a", shape.q_lora_rank + shape.kv_lora_rank + shape.qk_rope_head_dim,
                    h * shape.attn_input_multiple, full))
        out.append(("q_b", shape.heads * qk // tp, shape.q_lora_rank, full))
        if shape.attn_output_gate:
            out.append(("output gate", shape.heads * shape.v_head_dim // tp, h, full))
        out.append(("o", h, shape.heads * shape.v_head_dim // tp, full))
    elif kind == GATED_DELTANET:
        full = shape.full_attention_layers
        kv_local = shape.kv_heads_per_rank(tp)
        out.append(("gated q+kv", (2 * shape.heads // tp + 2 * kv_local) * shape.head_dim, h, full))
        out.append(("o", h, shape.heads * shape.head_dim // tp, full))
    else:
        kv_local = shape.kv_heads_per_rank(tp)
        out.append(("qkv", (shape.heads // tp + 2 * kv_local) * shape.head_dim, h * shape.attn_input_multiple, L))
        out.append(("o", h, shape.heads * shape.head_dim // tp, L))
    if kind == BLOCK_SPARSE:
        out.append(("indexer q+k", (shape.index_heads + 1) * shape.index_head_dim // tp, h,
                    shape.sparse_attention_layers))
    if kind in LINEAR_HYBRIDS:  # the linear layers' projections (a KDA layer's as a Gated DeltaNet layer's)
        linear = shape.linear_attention_layers
        value_width = shape.linear_value_heads * shape.linear_value_head_dim
        qkvz = 2 * shape.linear_key_heads * shape.linear_key_head_dim + 2 * value_width + 2 * shape.linear_value_heads
        out.append(("linear qkvz+ba", qkvz // tp, h, linear))
        out.append(("linear out", h, value_width // tp, linear))
    dense_layers = shape.dense_layers if shape.is_moe else L
    if dense_layers:
        out.append(("gate_up", 2 * shape.intermediate // tp, h, dense_layers))
        out.append(("down", h, shape.intermediate // tp, dense_layers))
    if shape.is_moe and shape.shared_experts:
        width = shape.shared_experts * shape.expert_intermediate
        out.append(("shared gate_up", 2 * width // tp, h, shape.moe_layers))
        out.append(("shared down", h, width // tp, shape.moe_layers))
    if shape.is_moe and shape.expert_hidden:
        out.append(("latent down", shape.expert_hidden // tp, h, shape.moe_layers))
        out.append(("latent up", h, shape.expert_hidden // tp, shape.moe_layers))
    return out


def with_layers(shape: ModelShape, layers: int) -> ModelShape:
    """The same model cut to its first ``layers`` layers (the profiler's ``--layers`` override): leading dense
    layers are kept first, as in the full model."""
    if layers < 1:
        raise HwProfileError(f"--layers: expected a positive number of layers, got {layers}")
    return replace(shape, name=f"{shape.name}-{layers}l" if layers != shape.layers else shape.name,
                   layers=layers, dense_layers=min(shape.dense_layers, layers))


def drafter_shape(target: ModelShape, layers: int, vocab: int | None = None, name: str | None = None,
                  dense: bool = False) -> ModelShape:
    """A drafter's backbone: ``layers`` layers built like the target's, of its width, and an LM head over
    ``vocab`` tokens (the target's unless the drafter keeps a reduced vocabulary, as Eagle3 does).

    Each drafter layer keeps the target's attention kind and its feed-forward block: a dense MLP of width
    ``intermediate`` for a dense target, the routed experts (and shared ones) of an MoE layer for an MoE target,
    as DeepSeek's MTP module and the DSpark V4 drafter are built (a DeepSeek-V4 layer has no dense MLP at all, so
    a dense drafter of it would have no feed-forward block). ``dense_layers`` is 0: the target's leading dense
    layers are not what a drafter copies. Under compressed sparse attention (DeepSeek-V4) the drafter's layers
    attend to the ``sliding_window`` only, with no compressed rows (the paper's V4 drafter, section 5.1); a
    table of such a drafter records ``attention_window`` so that the simulator caps the KV tokens it reads.

    A linear hybrid's drafter layers are full attention (Qwen3-Next's MTP layer is; Kimi-K3's: MLA), and so are a
    block-sparse model's (MiniMax-M3's).

    ``dense``: the layers' feed-forward block is a dense MLP of the target's ``intermediate`` whatever the target
    (EAGLE-3's and DFlash's drafters are dense decoder layers, also those trained for MoE targets); a target
    without a dense width (DeepSeek-V4) has no such drafter."""
    changes = dict(csa_layers=0, hca_layers=0) if target.attention_kind == COMPRESSED_SPARSE else {}
    if target.attention_kind in LINEAR_HYBRIDS:  # Qwen3-Next's MTP layer, as EAGLE-3's, attends in full
        changes.update(linear_interval=0, full_layers=0)
    if target.attention_kind == BLOCK_SPARSE:  # so do a block-sparse model's (its indexer selects nothing)
        changes.update(index_topk=0, index_heads=0, index_head_dim=0, index_block=0, full_layers=0)
    if dense and target.is_moe:
        if target.intermediate <= 0:
            raise HwProfileError(f"{target.name} has no dense MLP width (intermediate) to build a dense drafter of")
        changes.update(experts=0, experts_per_token=0, shared_experts=0, expert_intermediate=0, expert_dtype="")
    return replace(target, name=name or f"{target.name}-drafter-{layers}l", layers=layers, vocab=vocab or target.vocab,
                   dense_layers=0, **changes)


def drafter_config_fields(cfg: dict) -> tuple[int, int | None]:
    """What a drafter checkpoint's config.json says beyond its layers: how many target layers' hidden states it
    fuses (``target_layer_ids`` under ``dflash_config`` or ``dspark_config``, EAGLE-3's
    ``eagle_aux_hidden_state_layer_ids``; 0 where it names none) and its Markov head's rank (None where unsaid)."""
    fused, rank = 0, None
    for key in ("dflash_config", "dspark_config", "eagle_config"):
        sub = cfg.get(key)
        if not isinstance(sub, dict):
            continue
        ids = sub.get("target_layer_ids") or sub.get("eagle_aux_hidden_state_layer_ids")
        fused = len(ids) if isinstance(ids, list) and ids else fused
        rank = int(sub["markov_rank"]) if sub.get("markov_rank") is not None else rank
    return fused, rank


def drafter_from_config(target: ModelShape, cfg: dict, name: str) -> ModelShape:
    """A drafter checkpoint's own layers, read from its config.json (``shape_from_config``), as a drafter of
    ``target``: its head over ``draft_vocab_size`` where the config keeps a reduced draft vocabulary, its cache in
    the target's KV type (the deployment's, which the engine gives the drafter too). Its width must be the
    target's, since it takes in the target's hidden states."""
    cfg = dict(cfg)
    if cfg.get("draft_vocab_size"):
        cfg["vocab_size"] = cfg["draft_vocab_size"]
    try:
        shape = shape_from_config(cfg)
    except KeyError as exc:
        raise HwProfileError(str(exc.args[0])) from None
    if shape.hidden != target.hidden:
        raise HwProfileError(f"hidden_size {shape.hidden} is not the target's ({target.hidden}); a drafter takes in "
                             "the target's hidden states at its width")
    return replace(shape, name=name, kv_dtype=target.kv_dtype)


def drafter_attention_window(target: ModelShape) -> int:
    """KV tokens per request a drafter of ``target`` reads (``drafter_shape``): the window under compressed sparse
    attention, else 0 (all of them)."""
    return target.sliding_window if target.attention_kind == COMPRESSED_SPARSE else 0
