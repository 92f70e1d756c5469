"""The serving engines' own verify planners, as they run them: what the engine would choose on this hardware, with
the tables it would have profiled and the lag it has.

Both reuse the greedy of ``greedy.py`` (the survival products, the candidate order, the first-maximum rule) and
price shapes with the run's own step-time table (``StepTimeGrid`` and its compiled ``verify_ms_at``), so where
they differ from ``dspark`` is only what the engine knows and when:

- ``vllm-adaptive`` knows T(B) at one profiled context, by token count, forced monotone, and sizes the batch from
  confidences one step old;
- ``sglang-compact`` knows a three-coefficient linear fit of its table and plans on this step's confidences;
- ``trtllm-adaptive`` knows whole steps profiled at its captured verify lengths and plans, budget and windows
  alike, on the confidences of the block before (its own top-k, not the greedy).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

import hw_profile.tables.step_table
from hw_profile.tables.step_table import StepTimeGrid, verify_ms_at
from simulator.core.forward import StepCost
from simulator.core.kernel_cache import guard_cached_kernel
from simulator.core.policies.base import Policy, PolicyView, register
from simulator.core.policies.greedy import greedy_prefix_lengths, top_k_prefix_lengths

#: the context (tokens per request) engines profile their cost tables at (vLLM's
#: VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN default)
PROFILE_CONTEXT = 8192
#: batch sizes an SGLang-like engine captures CUDA graphs at (1, 2, 4, 8, then steps of 16): the profile's points
#: when the run's table records no capture by requests
CAPTURE_BATCH_SIZES = (1, 2, 4, 8, *range(16, 257, 16))
#: the context of the dummy requests in a table derived from captured CUDA graphs (ASSUMED: capture fills each
#: dummy sequence with a token or so, so the table prices weights and matrix work, hardly any attention)
CAPTURE_CONTEXT = 1


@njit(cache=True)
def _verify_ms_rows(tokens, rows, kv, q_table, a, c, p, window, share):
    """``verify_ms_at`` (the table's own rule) elementwise over arrays of tokens, requests and KV tokens."""
    out = np.empty(tokens.shape[0])
    for i in range(tokens.shape[0]):
        out[i] = verify_ms_at(tokens[i], rows[i], kv[i], q_table, a, c, p, window, share)
    return out


guard_cached_kernel(_verify_ms_rows, hw_profile.tables.step_table)  # verify_ms_at is compiled in


def dummy_step_ms(grid: StepTimeGrid, tokens: np.ndarray, requests: np.ndarray, context: int) -> np.ndarray:
    """What an engine's startup profiling measures on this hardware: the target's forward over ``tokens`` new
    tokens spread over ``requests`` dummy requests that each hold ``context`` KV tokens (arrays, elementwise),
    priced by the run's table as a real step of that shape would be (T, plus the table's correction for the tokens
    each request verifies)."""
    tokens = np.asarray(tokens, dtype=np.float64)
    requests = np.asarray(requests, dtype=np.float64)
    kv = requests * float(context)
    ms = grid.values(tokens, kv, requests)  # on the table's CUDA-graph stairs, as the engine's own steps run
    if grid.verify is not None:
        ms = ms + _verify_ms_rows(tokens, requests, kv, *grid.verify_terms)
    return ms


def _same_tables(profiled: tuple | None, sps: StepCost, gamma: int) -> bool:
    """Whether tables profiled for (grid, drafter cost, gamma) still serve this step (the same objects)."""
    return profiled is not None and profiled[0] is sps.grid and profiled[1] is sps.draft and profiled[2] == gamma


def _draft_ms(draft: object | None, requests: np.ndarray, gamma: int, context: int,
              fed_per_request: int = 1) -> np.ndarray:
    """The drafter's cost for each request count at the profiled context (0 without a drafter's cost model), an
    autoregressive drafter's first pass taking in ``fed_per_request`` tokens a request (``DraftCost.ms``'s
    ``fed``). DraftCost prices one shape a call; a profile has one entry per request count, not per token."""
    if draft is None:
        return np.zeros(len(requests))
    return np.array([draft.ms(int(r), gamma, float(r) * context, int(r) * fed_per_request) for r in requests])


def _find_ids(seen: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``ids`` sits among the sorted ids ``seen`` of an earlier step (a clipped index) and whether it
    is there: how a planner follows its requests' history from step to step."""
    at = np.minimum(np.searchsorted(seen, ids), max(len(seen) - 1, 0))
    known = (seen[at] == ids) if len(seen) else np.zeros(len(ids), dtype=bool)
    return at, known


@register
class VllmAdaptive(Policy):
    """``vllm-adaptive``: vLLM's adaptive verification (``enable_adaptive_verification``, vllm-project/vllm PR
    #47808; the vLLM blog post of 2026-08-14 on DSpark adaptive verification).

    The budget is a global argmax over the number of draft tokens n,

        n* = argmax_n (N + sum of the n largest survival products) / (draft_cost[R] + verify_cost[T + n]),

    with N the R sampled tokens (one per request) and T the step's tokens that are not drafts (the R anchors and
    any prefill chunk, which count in the cost only). Both tables are what the engine profiles at startup on this
    hardware: dummy steps at a fixed ``profile_context`` per request, the verify table indexed by token count only
    (a step of n tokens taken as a uniform verify batch of n / (gamma + 1) requests), the draft table by request
    count (an autoregressive drafter's first pass over the dummy step's gamma + 1 tokens a request, as vLLM's
    proposer takes in every token the target processed; PR #52233 says the startup profile times the target and
    the drafter at every shape), each forced monotone by a running maximum. They come from the run's own step-time
    table, so the policy is the engine on this hardware, and misinformed as the engine is wherever the real context
    is not the profiled one.

    The search runs on the CPU before this step's drafts exist, so it reads each request's exponential moving
    average of its confidences as of the previous step (weight ``ema_alpha`` on the newest step, 1 - ema_alpha on
    the average before); the n* slots are then allocated on the GPU by this step's live survival products (the
    top n*, as ``dspark-async`` admits). Lossless by construction: the budget depends only on older steps, and a
    top-n admission never looks past a position's own prefix (``docs/losslessness.md``). A request seen for the
    first time is sized at the mean average of the requests of the step before (nothing before the first step).
    The EMA follows requests by ``view.ids``; a caller without ids has row r be the same request every step.
    Without the engine's table (``view.sps`` a plain callable) the callable is the profile. No scheduling stall.
    """

    name = "vllm-adaptive"

    def __init__(self, ema_alpha: float = 0.8, profile_context: int = PROFILE_CONTEXT):
        if not 0.0 < float(ema_alpha) <= 1.0:
            raise ValueError(f"ema_alpha must be in (0, 1], got {ema_alpha!r}")
        if int(profile_context) != profile_context or profile_context < 1:
            raise ValueError(f"profile_context must be a positive integer, got {profile_context!r}")
        self.alpha = float(ema_alpha)
        self.context = int(profile_context)
        self._ids = np.empty(0, dtype=np.int64)  # the previous step's requests, sorted
        self._ema = np.empty((0, 0))  # their averages, in the order of _ids
        self._prior: np.ndarray | None = None  # the mean average of the previous step's requests
        self._for: tuple | None = None  # (grid, draft, gamma) the tables were profiled for
        self._verify = np.empty(0)  # verify_cost[n], n = 0.. tokens
        self._draft = np.empty(0)  # draft_cost[r], r = 0.. requests

    def choose(self, view: PolicyView) -> np.ndarray:
        rows, gamma = view.confidence.shape
        ids = np.arange(rows, dtype=np.int64) if view.ids is None else np.asarray(view.ids, dtype=np.int64)
        at, known = self._find(ids)
        sizing = self._sizing(at, known, rows, gamma, view.max_lengths)
        budget = int(greedy_prefix_lengths(sizing, self._profiled_rate(view.sps, rows, gamma),
                                           early_stop=False).sum())
        lengths = top_k_prefix_lengths(view.confidence, budget)
        self._remember(ids, at, known, view.confidence, view.max_lengths)
        return lengths

    # --- the one-step-old averages -----------------------------------------------------------------------------
    def _find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each request's average sits in the previous step's (clipped index) and whether it has one."""
        return _find_ids(self._ids, ids)

    def _sizing(self, at, known, rows, gamma, max_lengths) -> np.ndarray:
        old = np.zeros((rows, gamma))
        if self._ema.shape[1:] == (gamma,):
            if self._prior is not None:
                old[:] = self._prior
            old[known] = self._ema[at[known]]
        # positions a request cannot verify now (past its end) are known before this step's drafts
        return np.where(np.arange(gamma)[None, :] < max_lengths[:, None], old, 0.0)

    def _remember(self, ids, at, known, confidence, max_lengths) -> None:
        rows, gamma = confidence.shape
        live = np.arange(gamma)[None, :] < max_lengths[:, None]  # the positions whose confidences mean something
        ema = np.array(confidence, dtype=float)
        if self._ema.shape[1:] == (gamma,) and known.any():
            prev = self._ema[at[known]]
            ema[known] = np.where(live[known], self.alpha * confidence[known] + (1.0 - self.alpha) * prev, prev)
        order = np.argsort(ids, kind="stable")
        self._ids, self._ema = ids[order], ema[order]
        self._prior = ema.mean(axis=0) if rows else self._prior

    # --- the profiled tables ------------------------------------------------------------------------------------
    def _profiled_rate(self, sps: Callable, rows: int, gamma: int) -> Callable[[np.ndarray], np.ndarray]:
        """SPS(B) as the engine's tables price it: 1000 / (draft_cost[R] + verify_cost[B + prefill])."""
        if not isinstance(sps, StepCost):
            return sps
        if not _same_tables(self._for, sps, gamma):
            self._for, self._verify, self._draft = (sps.grid, sps.draft, gamma), np.empty(0), np.empty(0)
        prefill = int(sps.prefill)
        self._grow(sps, gamma, rows * (gamma + 1) + prefill, rows)
        fixed = self._draft[rows]
        verify = self._verify
        return lambda batch: 1000.0 / (fixed + verify[np.asarray(batch, dtype=np.int64) + prefill])

    def _grow(self, sps: StepCost, gamma: int, tokens: int, requests: int) -> None:
        """Profile the tables up to ``tokens`` and ``requests`` (doubling, so a run profiles a few times)."""
        if len(self._verify) <= tokens:
            n = np.arange(max(2 * len(self._verify), tokens + 1, 64))
            ms = dummy_step_ms(sps.grid, n, np.maximum(np.ceil(n / (gamma + 1)), 1.0), self.context)
            self._verify = np.maximum.accumulate(ms)
        if len(self._draft) <= requests:
            r = np.arange(max(2 * len(self._draft), requests + 1, 64))
            # a dummy step verifies gamma drafts a request, and vLLM's proposer takes in every token the target
            # processed: the profile's first pass is gamma + 1 tokens a request
            self._draft = np.maximum.accumulate(_draft_ms(sps.draft, r, gamma, self.context, gamma + 1))


def fit_cost_model(batch_sizes: np.ndarray, drafts: np.ndarray, step_ms: np.ndarray) -> tuple[float, float, float]:
    """SGLang's step-cost model T(bs, K) = bias + alpha * bs + theta * (bs + K), bs the requests and K the draft
    tokens verified, fitted by least squares to profiled points: (bias, alpha, theta). Points at one batch size
    only cannot separate bias from alpha; the least-norm solution then still predicts that batch size's costs."""
    bs = np.asarray(batch_sizes, dtype=float)
    k = np.asarray(drafts, dtype=float)
    design = np.column_stack((np.ones_like(bs), bs, bs + k))
    coef = np.linalg.lstsq(design, np.asarray(step_ms, dtype=float), rcond=None)[0]
    return float(coef[0]), float(coef[1]), float(coef[2])


@register
class SglangCompact(Policy):
    """``sglang-compact``: SGLang's DSpark verify in compact mode (``SGLANG_RAGGED_VERIFY_MODE=compact``, v0.5.16;
    the table from ``--speculative-dspark-sps-table-path``, or derived from the captured graphs as in
    sgl-project/sglang PR #35413).

    The planner's cost model is T(bs, K) = bias + alpha * bs + theta * (bs + K) (alpha: the draft and the part of
    attention trimming does not reduce; theta: the cost of a verified token), fitted by least squares
    (``fit_cost_model``) to the profiled table: dummy steps at each profiled batch size (``profiled_sizes``) holding
    ``profile_context`` tokens, verifying 0..gamma drafts each, priced by the run's own step-time table and drafter
    cost. The default context is that of a table derived from the captured graphs (``CAPTURE_CONTEXT``, assumed);
    a table profiled at a real context takes ``profile_context``. The table has no context axis, so the planner is
    misinformed at every other context, as the engine is. Each step it maximises tau x SPS with SPS = 1 / T(R, K) on this step's confidences, and the scheduler
    gives each request its window (the greedy's per-request lengths). On a cost linear in K, tau / T(K) is unimodal,
    so the first maximum is the greedy's early stop: the argmax the engine takes, and lossless for it
    (Algorithm 1). It reads this step's confidences before the verify launches, so it pays the scheduling stall
    (SGLang turns its overlap scheduler off while speculating).

    Without a table (``table: false``, an engine started without one) it verifies every drafted token. Given a plain
    SPS callable instead of the engine's table (``view.sps``), the points are that callable at this step's R.
    """

    name = "sglang-compact"
    sync_stall = True

    def __init__(self, table: bool = True, profile_context: int = CAPTURE_CONTEXT,
                 batch_sizes: list[int] | tuple[int, ...] | None = None):
        if not isinstance(table, bool):
            raise ValueError(f"table must be true or false, got {table!r}")
        if int(profile_context) != profile_context or profile_context < 1:
            raise ValueError(f"profile_context must be a positive integer, got {profile_context!r}")
        try:
            sizes = None if batch_sizes is None else np.unique(np.asarray(batch_sizes, dtype=np.int64))
        except (TypeError, ValueError):
            raise ValueError(f"batch_sizes must be a list of positive integers, got {batch_sizes!r}") from None
        if sizes is not None and (sizes.ndim != 1 or len(sizes) < 2 or sizes[0] < 1):
            raise ValueError(f"batch_sizes needs at least two positive batch sizes, got {batch_sizes!r}")
        self.table = table
        self.context = int(profile_context)
        self.batch_sizes = sizes
        self._for: tuple | None = None
        self.coefficients: tuple[float, float, float] | None = None  # (bias, alpha, theta) of the last fit

    def choose(self, view: PolicyView) -> np.ndarray:
        if not self.table:
            return np.array(view.max_lengths, dtype=np.int64)
        rows, gamma = view.confidence.shape
        sps = view.sps
        if isinstance(sps, StepCost):
            if not _same_tables(self._for, sps, gamma):
                self._for = (sps.grid, sps.draft, gamma)
                self.coefficients = fit_cost_model(*self.profile(sps, gamma))
            prefill = float(sps.prefill)
        else:
            drafts = np.arange(rows * gamma + 1)
            ms = 1000.0 / np.asarray(sps(rows + drafts), dtype=float)
            self.coefficients = fit_cost_model(np.full(len(drafts), rows), drafts, ms)
            prefill = 0.0
        bias, alpha, theta = self.coefficients
        fixed = bias + alpha * rows + theta * prefill
        tiny = 1e-9  # a fit that reaches zero or below prices nothing as free: keep SPS finite and positive

        def rate(batch: np.ndarray) -> np.ndarray:
            return 1000.0 / np.maximum(fixed + theta * np.asarray(batch, dtype=float), tiny)

        return greedy_prefix_lengths(view.confidence, rate, early_stop=True)

    def profiled_sizes(self, grid: StepTimeGrid) -> np.ndarray:
        """The batch sizes the engine profiles: ``batch_sizes`` as given, else the sizes the run's table says the
        engine captures by request count (its ``cuda_graphs``, as the engine derives its table from its captured
        graphs), else ``CAPTURE_BATCH_SIZES``."""
        if self.batch_sizes is not None:
            return self.batch_sizes
        graphs = grid.graphs
        if graphs is not None and graphs.counts == "requests" and len(graphs.sizes) >= 2:
            return np.asarray(graphs.sizes, dtype=np.int64)
        return np.asarray(CAPTURE_BATCH_SIZES, dtype=np.int64)

    def profile(self, sps: StepCost, gamma: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The profiled points the fit reads: (batch sizes, draft tokens verified in all, step ms)."""
        sizes = self.profiled_sizes(sps.grid)
        bs, k = (x.ravel() for x in np.meshgrid(sizes, np.arange(gamma + 1), indexing="ij"))
        ms = dummy_step_ms(sps.grid, bs * (k + 1), bs, self.context)
        # SGLang's draft extend takes in the accepted tokens, and a dummy step's random drafts accept none: one a
        # request
        draft = _draft_ms(sps.draft, sizes, gamma, self.context)
        return bs, bs * k, ms + np.repeat(draft, gamma + 1)


#: the context of TensorRT-LLM's profiled cells: its profiler's default prompt (``input_len`` 1,024 tokens) plus half
#: of the 100 steps a cell decodes with acceptance pinned to the bonus token
TRTLLM_PROFILE_CONTEXT = 1074
#: the confidence TensorRT-LLM's planner reads for a request with no staged row: certain acceptance (its neutral
#: logit, sigmoid(30) ~ 1)
NEUTRAL_CONFIDENCE = 1.0
#: survival products below this are not candidates for a window (TensorRT-LLM's ``survival_eps``)
SURVIVAL_EPS = 1e-6


@register
class TrtllmAdaptive(Policy):
    """``trtllm-adaptive``: TensorRT-LLM's DSpark confidence scheduling (``enable_confidence_scheduling`` with a
    ``confidence_sps_table_path``; ``tensorrt_llm/_torch/speculative/dspark_planner.py``, ``dspark_verify.py`` and
    ``dspark_sps_profiler.py`` in NVIDIA/TensorRT-LLM, from PR #17056).

    Every request verifies at least one draft (``min_verify_len`` 1); above that floor the budget n is the global
    argmax, over the totals a captured verify length can realise (n = R x (t - 1) for t in ``tiers``), of

        Theta(n) = (R + sum of the R first positions' survival + the n largest other survival products)
                   / S(R, R x 2 + n),

    S the engine's profiled whole-step cost at that many verified tokens (anchors included), and a trimmed budget
    is kept only if it beats verifying everything by ``min_gain`` (the runtime table's 1%). The n slots then go to
    the n largest survival products (ties by position, then request; products under 1e-6 take none), so a request's
    window is a prefix. Its profiler sweeps whole decode steps over batch sizes and uniform verify lengths and keeps
    the additive fit bias + alpha(bs) + theta(M); here the profile is read at this step's R, as if that R had been
    profiled (where the fit holds, which the profiler checks to 2% of a step, it returns the measured cells), at
    ``profile_context`` tokens a request (``TRTLLM_PROFILE_CONTEXT``: what the profiler's cells hold at its
    defaults), priced by the run's own table and drafter cost, forced monotone along the lengths. The profile drafts
    the deployment's whole block at every length (the engine's sweep rebuilds with shorter blocks, a bias its source
    names). Prompt chunks do not count: the table prices decode steps.

    Budget and windows read the confidences of the request's block ``lag`` steps before (the host snapshot: a
    block's confidences reach the host a step after it is drafted, and the shipped overlap scheduler plans the next
    step before that, so the planner sees the block before the one it schedules), a request with none at the
    neutral 1 (certain). So nothing it decides looks at this step's drafts: lossless by construction
    (``docs/losslessness.md``). ``tiers`` ASSUMED every length 1..gamma (the source leaves the ladder to
    ``confidence_verify_len_tiers``; its profiler recommends one from the measured shelves). Without a table
    (``table: false``: no profiled table, or a flat one) it verifies every drafted token. No scheduling stall.
    """

    name = "trtllm-adaptive"

    def __init__(self, table: bool = True, tiers: list[int] | tuple[int, ...] | None = None, min_gain: float = 0.01,
                 profile_context: int = TRTLLM_PROFILE_CONTEXT, lag: int = 1):
        if not isinstance(table, bool):
            raise ValueError(f"table must be true or false, got {table!r}")
        try:
            ladder = None if tiers is None else np.unique(np.asarray(tiers, dtype=np.int64))
        except (TypeError, ValueError):
            raise ValueError(f"tiers must be a list of positive integers, got {tiers!r}") from None
        if ladder is not None and (ladder.ndim != 1 or not len(ladder) or ladder[0] < 1):
            raise ValueError(f"tiers must be a list of positive integers, got {tiers!r}")
        if not (isinstance(min_gain, (int, float)) and 0.0 <= float(min_gain) < 1.0):
            raise ValueError(f"min_gain must be in [0, 1), got {min_gain!r}")
        if int(profile_context) != profile_context or profile_context < 1:
            raise ValueError(f"profile_context must be a positive integer, got {profile_context!r}")
        if int(lag) != lag or lag < 1:
            raise ValueError(f"lag must be a positive integer (1: the block before), got {lag!r}")
        self.table = table
        self.tiers = ladder
        self.min_gain = float(min_gain)
        self.context = int(profile_context)
        self.lag = int(lag)
        self._seen: list[tuple[np.ndarray, np.ndarray]] = []  # the last `lag` steps' (sorted ids, confidences)
        self._for: tuple | None = None  # (grid, draft, gamma) the profile was read for
        self._profile: dict[int, np.ndarray] = {}  # R -> S(R, R x (t + 1)) for t = 1..gamma

    def choose(self, view: PolicyView) -> np.ndarray:
        rows, gamma = view.confidence.shape
        ids = np.arange(rows, dtype=np.int64) if view.ids is None else np.asarray(view.ids, dtype=np.int64)
        lagged = self._lagged(ids, gamma)
        self._remember(ids, view.confidence)
        if not self.table or rows == 0:
            return np.array(view.max_lengths, dtype=np.int64)
        verifiable = np.arange(gamma)[None, :] < view.max_lengths[:, None]
        survival = np.where(verifiable, np.cumprod(lagged, axis=1), 0.0)
        floor = np.minimum(view.max_lengths, 1).astype(np.int64)
        if gamma < 2:
            return floor
        # the candidates above the floor position by position, so that a stable sort breaks ties by position, then
        # request: the engine's admission order, shared by the budget and the windows
        above = survival[:, 1:].T.ravel()
        order = np.argsort(-above, kind="stable")
        budget = self._budget(rows, gamma, float(survival[:, 0].sum()), above[order],
                              self._cost(view.sps, rows, gamma))
        return floor + self._windows(above, order, budget, rows)

    # --- the snapshot --------------------------------------------------------------------------------------------
    def _lagged(self, ids: np.ndarray, gamma: int) -> np.ndarray:
        """Each request's confidences from the step ``lag`` steps before, the neutral 1 where it had none."""
        out = np.full((len(ids), gamma), NEUTRAL_CONFIDENCE)
        if len(self._seen) == self.lag:
            old_ids, old = self._seen[0]
            if old.shape[1] == gamma:
                at, known = _find_ids(old_ids, ids)
                out[known] = old[at[known]]
        return out

    def _remember(self, ids: np.ndarray, confidence: np.ndarray) -> None:
        order = np.argsort(ids, kind="stable")
        self._seen.append((ids[order], np.array(confidence, dtype=float)[order]))
        del self._seen[:-self.lag]

    # --- the profiled table and the argmax -------------------------------------------------------------------------
    def _cost(self, sps: Callable, rows: int, gamma: int) -> np.ndarray:
        """S(R, R x (t + 1)) ms for t = 1..gamma: the engine's profile at this step's R, or the step's own SPS
        callable where it has no engine table."""
        tokens = rows * (np.arange(1, gamma + 1) + 1)
        if not isinstance(sps, StepCost):
            return np.maximum.accumulate(1000.0 / np.asarray(sps(tokens), dtype=float))
        if not _same_tables(self._for, sps, gamma):
            self._for, self._profile = (sps.grid, sps.draft, gamma), {}
        if rows not in self._profile:
            ms = dummy_step_ms(sps.grid, tokens, np.full(gamma, float(rows)), self.context)
            self._profile[rows] = np.maximum.accumulate(ms + _draft_ms(sps.draft, np.array([rows]), gamma,
                                                                       self.context)[0])
        return self._profile[rows]

    def _budget(self, rows: int, gamma: int, first: float, ranked: np.ndarray, cost: np.ndarray) -> int:
        """The verified drafts above the floor: the argmax of Theta over the tiers' totals, kept if it beats the
        whole block by ``min_gain``. ``first``: the floor positions' survival; ``ranked``: the others, largest
        first."""
        tau = rows + first + np.concatenate(([0.0], np.cumsum(ranked)))
        lengths = np.arange(1, gamma + 1) if self.tiers is None else self.tiers[self.tiers <= gamma]
        if not len(lengths):
            lengths = np.array([gamma])
        n = rows * (lengths - 1)
        theta = tau[n] / cost[lengths - 1]
        best = int(np.lexsort((n, theta))[-1])  # the largest Theta, the larger budget on a tie
        full = len(lengths) - 1
        if lengths[full] == gamma and best != full and theta[best] < theta[full] * (1.0 + self.min_gain):
            best = full
        return int(n[best])

    @staticmethod
    def _windows(above: np.ndarray, order: np.ndarray, budget: int, rows: int) -> np.ndarray:
        """Drafts granted per request above the floor: the first ``budget`` of the admission ``order`` over the
        position-major candidates ``above``, never one under ``SURVIVAL_EPS``; a prefix of each row, as products
        fall along it."""
        chosen = np.zeros(above.shape, dtype=bool)
        chosen[order[:budget]] = True
        chosen &= above >= SURVIVAL_EPS
        return chosen.reshape(-1, rows).sum(axis=0).astype(np.int64)


__all__ = ["CAPTURE_BATCH_SIZES", "CAPTURE_CONTEXT", "PROFILE_CONTEXT", "TRTLLM_PROFILE_CONTEXT", "SglangCompact",
           "TrtllmAdaptive", "VllmAdaptive", "dummy_step_ms", "fit_cost_model"]
