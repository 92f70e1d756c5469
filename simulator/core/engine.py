"""The SimPy engine: a router over replicas, each a step-level continuous-batching loop with speculative decoding.

A ``Simulation`` is an ``EngineConfig`` (simulator/core/engine_config.py: limits, rules, replicas, where prompts are
prefilled) priced by ``StepPrices`` (the step-time tables), with an acceptance source and a policy factory. A
replica's loop admits waiting requests (the admission rule: by default oldest first, while the batch is under
``max_running`` and the KV cache can reserve the request's context plus gamma + 1 lookahead slots, less a cached
prefix it shares: the replica's ``KVCache``, simulator/core/kv_cache.py; with ``schedule_ahead``, only the requests
queued when the last step started), then runs one step, in phases (``Replica.step``; a ``StepPlan`` carries what one
phase hands the next, and nothing else crosses the clock):

1. ``plan_batch``: which rows decode and which prompt tokens are prefilled, by ``engine.schedule``:
   ``mixed`` (vLLM, TensorRT-LLM): requests still prefilling get up to ``prefill_chunk`` prompt tokens each,
   within what the batch-token cap leaves after every decoding request's worst case (1 + min(gamma,
   remaining - 1) tokens); ``prefill-first`` (SGLang): while any admitted request still prefills, the step is
   prefill-only (prompts packed in admission order up to the batch-token cap, the last one chunked) and decode
   waits for it;
2. ``speculate``: draft -> policy -> verify for the decoding requests: the acceptance source proposes
   confidences, the policy picks prefix lengths l (R,), the source says how many are accepted;
3. ``step_time``, then the clock advances (one SimPy timeout) by draft + scheduling stall (policies that need
   this step's confidences) + one forward over all the step's tokens (``simulator.core.forward``): T(B, K) with
   B = sum(1 + l) + prompt-chunk tokens and K the decoding rows' KV, plus the chunks' attention where the table
   prices it apart (its sidecar's ``prefill_cost``), else with the chunks' cached prompt on K;
4. ``apply_outcomes``: each decoding request emits its accepted prefix plus one target token; a request whose
   prefill completes emits its first token; a prefix a chunk passes becomes resident; the step is logged;
5. ``retire``: finished requests leave; while the KV cache overflows, unreferenced cached prefixes are evicted
   (least recently released first), then the preemption rule's victim (by default the most recently admitted
   request) is evicted and later recomputed (vLLM's default).

The router, admission and preemption rules are replaceable (simulator/core/engine_rules.py, docs/extending.md).
Per-request state is declared once in ``REQUEST_FIELDS`` (see ``simulator/core/columns.py`` and docs/engine.md).
Everything across the batch is numpy; there is no per-token Python loop.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Iterable

import numpy as np
import simpy

from hw_profile.tables.step_table import ChunkAttention, StepTimeGrid
from simulator.core.acceptance.base import AcceptanceSource, NoDrafts, checked_accepted, checked_confidence
from simulator.core.acceptance.runtime import RuntimeSource
from simulator.core.batch_kernels import (
    advance_prefill,
    emit_decoded,
    finished_rows,
    plan_prefill,
    verifiable,
)
from simulator.core.columns import COPY, LIVE, Batch, ColumnLog, Field, RowLog
from simulator.core.drafters import DRAFTER_KINDS, DraftCost
from simulator.core.engine_config import EngineConfig
from simulator.core.engine_rules import RoutedRequest, Router
from simulator.core.forward import ForwardPrice, StepCost
from simulator.core.kv_cache import KVCache
from simulator.core.policies import make_policy
from simulator.core.policies.base import Policy, PolicyView, checked_lengths
from simulator.errors import UserError

# Every per-request field, declared once. The request log holds them all; those with ``batch`` set are also
# columns of a replica's running batch (COPY: read at admission; LIVE: also written back when the request leaves
# the batch or the run ends). Add a field here and the log, admission, eviction, compaction and the records
# carry it (docs/engine.md).
REQUEST_FIELDS = {
    "arrival": Field(np.float64, np.nan),
    "prompt": Field(np.int64, batch=COPY),
    "output": Field(np.int64, batch=COPY),  # drawn length; the real one when a source ends it early (end_early)
    "mix": Field(np.int64),
    "replica": Field(np.int64, -1),
    "admitted": Field(np.float64, np.nan),
    "first_token": Field(np.float64, np.nan),
    "finish": Field(np.float64, np.nan),
    "generated": Field(np.int64, batch=LIVE),
    "preemptions": Field(np.int64),
    "rejected": Field(np.bool_, False),
    "decode_steps": Field(np.int64, batch=LIVE),
    "accepted": Field(np.int64, batch=LIVE),
    "kv_ready": Field(np.bool_, False),
    "routed": Field(np.float64, np.nan),  # joined a decode replica's queue: the admission wait starts
    "prefix": Field(np.int64, -1, batch=COPY),  # shared-prefix group (simulator/core/kv_cache.py), -1 for none
}
# Columns a request has only while it runs on a replica (``rid``, its row in the request log, is implied).
BATCH_LOCAL = {
    "to_prefill": np.int64,  # prompt tokens still to prefill here (0 once decoding)
    "kv_shared": np.int64,  # context tokens held in a shared prefix (KVCache.join; -1: a miss computing it)
}
REQUEST_COLUMNS = {k: f.dtype for k, f in REQUEST_FIELDS.items()}
# One row per replica step, written by name (``RowLog.append``).
STEP_COLUMNS = {
    "replica": np.int64, "start": np.float64, "end": np.float64, "running": np.int64, "decoding": np.int64,
    "prefill_tokens": np.int64, "prefill_done": np.int64, "batch_tokens": np.int64, "kv_tokens": np.int64,
    "verified": np.int64, "accepted": np.int64, "emitted": np.int64, "draft_ms": np.float64,
    "step_ms": np.float64, "queued": np.int64, "kv_used": np.int64,
    "drafted": np.int64,  # draft tokens the source proposed, a row of gamma a decoding request (INV-4 reads it)
}


def arrived_by(queue: deque[int], routed: np.ndarray, t: float) -> int:
    """How many requests at the head of ``queue`` had joined it by time ``t``: the queue is in the order its
    requests joined (a preempted request, first in line again, joined before any waiting one), so those are a
    prefix of it, found by bisection."""
    lo, hi = 0, len(queue)
    if hi and routed[queue[hi - 1]] <= t:
        return hi
    while lo < hi:
        mid = (lo + hi) // 2
        if routed[queue[mid]] <= t:
            lo = mid + 1
        else:
            hi = mid
    return lo


class RequestLog(ColumnLog):
    """Every request of a run, one row each (its id), columns ``REQUEST_FIELDS``."""

    def __init__(self):
        super().__init__(REQUEST_FIELDS)

    def add(self, now: float, prompt: np.ndarray, output: np.ndarray, mix: np.ndarray,
            prefix: np.ndarray | None = None) -> np.ndarray:
        if prefix is None:
            return self.extend(len(prompt), arrival=now, prompt=prompt, output=output, mix=mix)
        return self.extend(len(prompt), arrival=now, prompt=prompt, output=output, mix=mix, prefix=prefix)


class StepPlan:
    """One step, from planning to retirement: what ``Replica.plan_batch`` and ``Replica.speculate`` decide before
    the forward, and the only state carried across the clock's ``yield`` to ``apply_outcomes``.

    decode_rows: the batch rows that decode this step (a slice of all rows, or an index array when some prefill);
    remaining, context, ids: (rows,) of those requests; prefill_chunks: (running,) prompt tokens each row prefills
    this step, None when nothing prefills; lengths, accepted: (rows,) the policy's verification lengths and the
    accepted draft tokens, None without speculation; drafted: the draft tokens the source proposed (gamma a
    decoding row); ended: (rows,) bool, requests a token-generating source ended at EOS this step
    (``Proposal.ended``), or None; prefill_ended: batch rows whose completing prefill sampled an end-of-sequence
    token (``RuntimeSource.prefilled``), or None; cached: (running,) the tokens each row holds before its chunk,
    computed only where something reads it (chunks' attention, a prefix being computed), else None; chunk_ms: what
    the chunks add to the forward beyond T (their attention, ``ForwardPrice.chunk_terms``); kv: T's K, the
    decoding rows' KV plus, on a table that does not price chunks' attention, the chunks' cached prompt;
    kv_decode: the KV tokens the decoding rows read (what their verified tokens attend over); cost: the step's
    ``StepCost`` on the clock's table, which prices it at any verified B.
    """

    __slots__ = ("accepted", "batch_tokens", "cached", "chunk_ms", "context", "cost", "decode_rows", "draft_ms",
                 "drafted", "ended", "ids", "kv", "kv_decode", "kv_used", "lengths", "prefill_chunks", "prefill_ended",
                 "prefill_tokens", "remaining", "rows", "running", "stall_ms", "start", "step_ms", "verified")

    def __init__(self, start: float, running: int, kv_used: int):
        self.start = start
        self.running = running
        self.kv_used = kv_used
        self.prefill_chunks: np.ndarray | None = None
        self.prefill_tokens = 0
        self.lengths: np.ndarray | None = None
        self.accepted: np.ndarray | None = None
        self.verified = 0
        self.drafted = 0
        self.draft_ms = 0.0
        self.stall_ms = 0.0
        self.ended: np.ndarray | None = None
        self.prefill_ended: np.ndarray | None = None
        self.cached: np.ndarray | None = None
        self.chunk_ms = 0.0
        self.kv_decode = 0


class Replica:
    """One serving replica: its running batch (``Batch``, rows in admission order, at most max_running) and queue.

    Counts over the running batch are kept as requests join (``admit``), advance (``apply_outcomes``) and
    leave (``leave``), and nowhere else, so that a plain decode step does no reduction over the batch:
    ``tokens``, the KV context it holds (sum of prompt + generated, shared prefixes included: the K a step
    reads), and the rest of the KV cache's totals in ``kv`` (``KVCache``, simulator/core/kv_cache.py: the use,
    shared and resident prefixes), and ``prefilling``, the rows with prompt tokens still to prefill here
    (tests/simulator/test_engine_in_code.py recomputes them after runs with preemptions and chunked prefill).
    """

    def __init__(self, index: int, sim: Simulation, policy: Policy, policy_label: str):
        self.index = index
        self.sim = sim
        self.env = sim.env
        self.config = sim.config
        self.policy = policy
        self.label = policy_label
        cfg = sim.config
        self.batch = Batch(REQUEST_FIELDS, BATCH_LOCAL, cfg.max_running)
        # prefixes are cached where prompts are prefilled: with a disaggregated pool, a decode replica receives
        # each request's whole KV (and recomputes only preempted requests), so it caches nothing
        self.kv = KVCache(cfg.kv_capacity, cfg.lookahead, block_tokens=cfg.block_tokens,
                          prefix_tokens=cfg.shared_prefix_tokens, prefix_cache=cfg.prefix_cache and cfg.prefill is None)
        self.prefilling = 0
        self.queue: deque[int] = deque()
        self.wake: simpy.Event | None = None
        self.step_no = 0
        self.target_tokens = 0  # of the last step's tokens, those the next step's drafter takes in first
        self.drafter_takes_all = sim.prices.draft.takes_in == "processed"  # else the accepted ones (DraftCost)
        self.idle_checks: list[tuple[float, int]] = []  # (time, queued) whenever the replica goes idle
        self.scheduled_at = 0.0  # when the step after the running one was scheduled (EngineConfig.schedule_ahead)
        self.admission = cfg.admission()  # classes: EngineConfig found them
        # a rule that takes ``kv`` is told what requests sharing a cached prefix need; one that does not counts
        # every request's whole context, which never takes more than fits
        self.admission_kv = "kv" in inspect.signature(self.admission.take).parameters
        self.preemption = cfg.preemption()
        self.process = self.env.process(self.loop())

    # --- queue, admission, eviction -------------------------------------------------------------------------
    def enqueue(self, rids: Iterable[int]) -> None:
        """These requests join the back of the queue, in order."""
        self.queue.extend(rids)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    @property
    def load(self) -> int:
        return self.batch.n + len(self.queue)

    @property
    def tokens(self) -> int:
        """The KV context the running requests hold: sum of prompt + generated (``KVCache.tokens``)."""
        return self.kv.tokens

    def kv_used(self) -> int:
        """KV slots held: every running request's context plus gamma + 1 lookahead slots, a shared prefix counted
        once, and resident prefixes nobody uses until they are evicted (``KVCache.used``)."""
        return self.kv.used()

    def admit(self) -> None:
        """Waiting requests join the batch, as the admission rule picks them (by default oldest first, while the
        batch has room and the cache can reserve their context plus the lookahead slots, less a resident prefix
        they share). Unreferenced prefixes count as room and are evicted, least recently released first, as far as
        the requests taken need it."""
        cfg, batch, kv = self.config, self.batch, self.kv
        room = cfg.max_running - batch.n
        if not self.queue or room <= 0:
            return
        req = self.sim.requests.data
        free = kv.room()
        queue = self.queue
        if cfg.schedule_ahead and batch.n:  # the next step was scheduled when the last one started
            k = arrived_by(self.queue, req["routed"], self.scheduled_at)
            if k == 0:
                return
            if k < len(self.queue):
                queue = deque(self.queue.popleft() for _ in range(k))
        waiting = len(queue)
        if self.admission_kv:
            rids = self.admission.take(queue, room, free, req, cfg.lookahead, kv=kv.claims(req))
        else:
            rids = self.admission.take(queue, room, free, req, cfg.lookahead)
        rids = self.admission.checked(rids, waiting - len(queue), room, self.sim.requests.n)
        if queue is not self.queue:  # those not taken keep their place
            self.queue.extendleft(reversed(queue))
        if not rids:
            return
        ids = np.asarray(rids, dtype=np.int64)
        context = req["prompt"][ids] + req["generated"][ids]
        held = int(context.sum())
        need = held + len(ids) * cfg.lookahead
        claims = kv.claims(req)
        if claims is not None:  # what they need with the prefixes they share (an admission round's Python loop)
            need = 0
            for rid in rids:
                need += claims.need(rid)
                claims.take(rid)
        if need > free:  # the count and the ids were checked (Admission.checked)
            raise UserError(f"admission rule {type(self.admission).__name__}: take() took {len(ids)} requests "
                            f"needing {need} KV slots; expected at most the {free} free slots")
        # the prompt, plus generated tokens when recomputing; nothing when a prefill pool sent the KV
        to_prefill = np.where(req["kv_ready"][ids], 0, context)
        kv_shared = kv.join(context, to_prefill, req["prefix"][ids], held)  # hits: to_prefill less the cached prefix
        kv.make_room()  # fits: ``need`` was within the room
        batch.admit(self.sim.requests, ids, to_prefill=to_prefill, kv_shared=kv_shared)
        self.prefilling += int(np.count_nonzero(to_prefill))
        first_time = ids[np.isnan(req["admitted"][ids])]
        req["admitted"][first_time] = self.env.now

    def leave(self, rows: np.ndarray, freed: int) -> np.ndarray:
        """These rows (ascending) leave the batch, their live columns saved to the request log (``freed``: the
        context they held). Returns their request ids."""
        b = self.batch
        gone = b.rid[rows].copy()
        b.save(self.sim.requests, rows)
        if self.kv.active:
            self.kv.leave(freed, len(rows), b.kv_shared[rows], b.prefix[rows])
        else:
            self.kv.leave(freed, len(rows))
        if self.prefilling:
            self.prefilling -= int(np.count_nonzero(b.to_prefill[rows]))
        b.drop(rows)
        return gone

    def preempt_overflow(self) -> None:
        """While the cache overflows: first evict unreferenced prefixes (least recently released first), then
        recompute preemption: evict the request the preemption rule picks (by default the most recently
        admitted); it is first in line again."""
        sim, batch, kv = self.sim, self.batch, self.kv
        if kv.make_room():
            return
        req = sim.requests.data
        while batch.n > 1 and not kv.make_room():
            i = self.preemption.pick(batch)
            held = int(batch.prompt[i] + batch.generated[i])
            rid = int(self.leave(np.array([i]), held)[0])
            req["kv_ready"][rid] = False  # its cache is dropped: recomputed here on readmission
            if sim.runtime_source is not None:
                sim.runtime_source.preempt(np.array([rid]))
            req["preemptions"][rid] += 1
            sim.preemptions += 1
            self.queue.appendleft(rid)  # first in line again (the replica is running: no wake-up needed)

    def save(self) -> None:
        """Write the running requests' live columns back to the request log (at the end of a run)."""
        self.batch.save(self.sim.requests, slice(0, self.batch.n))

    # --- the loop -------------------------------------------------------------------------------------------
    def loop(self):
        env = self.env
        while True:
            self.admit()
            if self.batch.n == 0:
                # idle: by construction nothing in the queue could run (the invariant checker verifies it)
                self.idle_checks.append((env.now, len(self.queue)))
                self.wake = env.event()
                yield self.wake
                self.wake = None
                continue
            yield from self.step()

    def step(self):
        """One step: plan the batch, speculate, advance the clock, apply the outcomes, retire."""
        plan = self.plan_batch()
        self.scheduled_at = plan.start  # where a scheduler one step ahead decides the step after this one
        self.speculate(plan)
        plan.step_ms = self.step_time(plan)
        yield self.env.timeout(plan.step_ms * 1e-3)
        self.apply_outcomes(plan)
        self.retire()

    def plan_batch(self) -> StepPlan:
        """Which rows decode and how many prompt tokens each prefilling row gets. Mixed: chunked prefill in
        admission order, within what the batch-token cap leaves after every decoding request's worst case
        (1 + min(gamma, remaining - 1)). Prefill-first: while any row prefills, only prompt tokens (``plan_prefill_only``)."""
        cfg, prices, b = self.config, self.sim.prices, self.batch
        n = b.n
        plan = StepPlan(self.env.now, n, self.kv_used())
        held = 0  # the KV tokens the rows with a prompt chunk this step already hold
        if self.prefilling and cfg.schedule == "prefill-first":
            dec = remaining = plan.context = plan.ids = self.plan_prefill_only(plan)
            plan.cached = b.prompt[:n] + b.generated[:n] - b.to_prefill[:n]
            held = int(plan.cached[plan.prefill_chunks > 0].sum())
        elif self.prefilling:
            (dec, remaining, plan.context, plan.ids, plan.prefill_chunks, plan.prefill_tokens, _, plan.kv_decode,
             held) = plan_prefill(b.to_prefill, b.output, b.generated, b.prompt, b.rid, n, cfg.gamma,
                                  cfg.max_batch_tokens, cfg.prefill_chunk)
        else:
            dec = slice(0, n)
            remaining = b.output[:n] - b.generated[:n]
            plan.kv = self.kv.tokens
            plan.context = b.prompt[:n] + b.generated[:n]
            plan.ids = b.rid[:n]
        plan.decode_rows = dec
        plan.rows = len(remaining)
        plan.remaining = remaining
        if plan.prefill_chunks is not None:  # one forward: the chunks' prefix on K, or their attention apart
            if plan.cached is None and (prices.forward.chunk is not None or self.kv.computing):  # where it is read
                plan.cached = b.prompt[:n] + b.generated[:n] - b.to_prefill[:n]  # what each row holds before its chunk
            kv_chunks, plan.chunk_ms = prices.forward.chunk_terms(plan.prefill_chunks, plan.cached, held)
            plan.kv = plan.kv_decode + kv_chunks
        elif prices.per_request:
            plan.kv_decode = int(plan.context.sum())
        return plan

    def plan_prefill_only(self, plan: StepPlan) -> np.ndarray:
        """A prefill-only step (SGLang's scheduler): the prefilling rows' prompts, in admission order, up to the
        batch-token cap, the last one cut to what is left (it continues first in the next step). Returns the
        (empty) decoding rows."""
        b, n = self.batch, plan.running
        left = b.to_prefill[:n]
        before = np.cumsum(left) - left  # prompt tokens the earlier rows want
        chunks = np.minimum(np.maximum(self.config.max_batch_tokens - before, 0), left)
        plan.prefill_chunks = chunks
        plan.prefill_tokens = int(chunks.sum())
        return np.empty(0, dtype=np.int64)

    def speculate(self, plan: StepPlan) -> None:
        """Draft -> policy -> verify for the decoding rows: the source proposes confidences, the policy picks
        prefix lengths, the source says how many draft tokens are accepted."""
        sim, prices, gamma, rows = self.sim, self.sim.prices, self.config.gamma, plan.rows
        plan.draft_ms = prices.draft.ms(rows, gamma, plan.kv, self.target_tokens)
        plan.stall_ms = self.config.stall_ms if (self.policy.sync_stall and rows) else 0.0
        plan.cost = prices.step_cost(plan)
        if rows and (gamma or sim.source_decodes):
            remaining = plan.remaining
            proposal = sim.source.propose(plan.ids)
            conf = checked_confidence(sim.source, proposal.confidence, rows, gamma)
            plan.drafted = conf.size
            maxl, conf = verifiable(conf, remaining, gamma)  # positions past a request's end: confidence 0
            view = PolicyView(conf, remaining, plan.context, prices.policy_cost(plan), gamma, self.step_no,
                              proposal.outcome if self.policy.needs_outcome else None, maxl, plan.ids)
            plan.lengths = checked_lengths(self.policy, self.label, self.policy.choose(view), view)
            plan.accepted = checked_accepted(sim.source, sim.source.verify(proposal, plan.lengths), plan.lengths)
            plan.ended = proposal.ended
            plan.verified = int(plan.lengths.sum())
        plan.batch_tokens = rows + plan.verified + plan.prefill_tokens
        if plan.prefill_chunks is not None and sim.runtime_source is not None:  # prefills completing in this forward
            left = self.batch.to_prefill[: plan.running]
            done = np.flatnonzero((left > 0) & (left == plan.prefill_chunks))
            ended = sim.runtime_source.prefilled(self.batch.rid[done])
            if ended is not None and np.any(ended):
                plan.prefill_ended = done[np.asarray(ended, dtype=bool)]

    def step_time(self, plan: StepPlan) -> float:
        """Milliseconds: the step's cost (``StepCost``: draft + scheduling stall + one forward over the step's
        tokens + the prompt chunks' attention where the table prices it apart) at the tokens the policy chose to
        verify, the one object the policy priced them with."""
        sim = self.sim
        if sim.live_clock is not None:  # the measured time of the step's real forwards (clock: live)
            return sim.live_clock() + plan.stall_ms
        return float(plan.cost.ms(plan.rows + plan.verified))

    def apply_outcomes(self, plan: StepPlan) -> None:
        """After the forward: each decoding row emits its accepted prefix plus one target token, a row whose
        prefill completes emits its first token; the step is logged."""
        sim, b, n, rows = self.sim, self.batch, plan.running, plan.rows
        now = self.env.now
        acc_sum = 0
        if rows:
            dec = plan.decode_rows
            if plan.accepted is not None:
                accepted = plan.accepted
                self.policy.observe(plan.lengths, accepted)
                rows_at = np.arange(n)[dec]  # the decoding rows as indices (dec may be a slice)
                acc_sum = int(emit_decoded(rows_at, accepted, b.generated, b.accepted, b.decode_steps))
                if plan.ended is not None and plan.ended.any():  # the real sequence reached its end token
                    self.end_early(rows_at[plan.ended])
            else:
                b.generated[dec] += 1
                b.decode_steps[dec] += 1
        done_prefill = 0
        if plan.prefill_chunks is not None:
            kv = self.kv
            if kv.computing:  # a miss whose chunk passes its group's prefix makes it resident (kv_cache.py)
                kv.prefill_progress(b.kv_shared[:n], b.prefix[:n], plan.cached, plan.prefill_chunks)
            # rows whose prefill completes emit the token of the prefill's last position
            completed = advance_prefill(b.to_prefill, plan.prefill_chunks, b.generated, n)
            done_prefill = len(completed)
            if done_prefill:
                first = b.rid[completed]
                req = sim.requests.data
                req["first_token"][first[np.isnan(req["first_token"][first])]] = now
                self.prefilling -= done_prefill
                if plan.prefill_ended is not None:  # that token ended the real sequence: it finishes now
                    self.end_early(plan.prefill_ended)
        emitted = acc_sum + rows + done_prefill
        self.kv.tokens += emitted
        # what the next step's drafter takes in first (DraftCost.ms): every token processed, or those accepted
        self.target_tokens = plan.batch_tokens if self.drafter_takes_all else acc_sum + rows + plan.prefill_tokens
        sim.steps.append(
            replica=self.index, start=plan.start, end=now, running=n, decoding=rows,
            prefill_tokens=plan.prefill_tokens, prefill_done=done_prefill, batch_tokens=plan.batch_tokens,
            kv_tokens=plan.kv, verified=plan.verified, accepted=acc_sum, emitted=emitted, draft_ms=plan.draft_ms,
            step_ms=plan.step_ms, queued=len(self.queue), kv_used=plan.kv_used, drafted=plan.drafted,
        )
        self.step_no += 1

    def end_early(self, rows: np.ndarray) -> None:
        """These rows' real sequences reached their end token: their length is what they hold now (in the batch,
        which retires them, and in the request log, where ``output`` is otherwise the drawn length)."""
        b = self.batch
        b.output[rows] = b.generated[rows]
        self.sim.requests.data["output"][b.rid[rows]] = b.generated[rows]

    def retire(self) -> None:
        """Finished requests leave the batch (their live columns saved); then, if the cache overflows, the most
        recently admitted requests are preempted (vLLM's recompute)."""
        sim, b = self.sim, self.batch
        rows, freed = finished_rows(b.generated, b.output, b.prompt, b.n)
        if len(rows):
            gone = self.leave(rows, freed)
            sim.requests.data["finish"][gone] = self.env.now
            sim.source.detach(gone)
            sim.router.finished(self.index, len(gone))
            sim.on_finish(len(gone))
        self.preempt_overflow()


NO_DRAFT = DraftCost(DRAFTER_KINDS["none"], None)


class StepPrices:
    """What a step costs, from the tables: ``clock`` gives the target's forward T(B, K) that advances the clock,
    ``policy_grid`` the copy a hardware-aware policy prices SPS(B) on (default: the clock's), ``draft`` the
    drafter's cost, and ``chunk_attention`` the prompt chunks' attention when the table's sidecar prices it apart
    (``forward``: the chunks' part of the forward rule on the clock's table), and ``host_ms`` host time every step
    pays beyond the table's (an engine that drops its overlap scheduler while it speculates).
    ``step_cost`` builds each step's ``StepCost``, which the clock reads and, on the same table, the policy too."""

    def __init__(self, clock: StepTimeGrid, *, draft: DraftCost | None = None, policy_grid: StepTimeGrid | None = None,
                 chunk_attention: ChunkAttention | None = None, host_ms: float = 0.0):
        self.clock = clock
        self.host_ms = float(host_ms)
        self.policy_grid = clock if policy_grid is None else policy_grid
        self.draft = NO_DRAFT if draft is None else draft
        self.forward = ForwardPrice(clock, chunk_attention)
        # a table that corrects for tokens per request (``StepTimeGrid.verify``) needs the decoding rows' KV each step
        self.per_request = clock.verify is not None or self.policy_grid.verify is not None

    def step_cost(self, plan: StepPlan, grid: StepTimeGrid | None = None) -> StepCost:
        """The step's ``StepCost`` on ``grid`` (the clock's by default): its K, prompt tokens, decoding rows and
        their KV, and the fixed costs beside the forward (draft, stall, the chunks' attention)."""
        return StepCost(self.clock if grid is None else grid, plan.kv, plan.prefill_tokens,
                        plan.draft_ms + plan.stall_ms + plan.chunk_ms + self.host_ms, plan.rows, plan.kv_decode,
                        self.draft)

    def policy_cost(self, plan: StepPlan) -> StepCost:
        """What the policy prices SPS(B) with: the clock's ``StepCost`` itself unless it reads its own table."""
        return plan.cost if self.policy_grid is self.clock else self.step_cost(plan, self.policy_grid)


class Simulation:
    """One run: an environment, replicas, a router, the request and step logs.

    In code (a test, a notebook), a run is a few lines::

        sim = Simulation(EngineConfig(max_running=64, max_batch_tokens=8192, kv_capacity=200_000),
                         StepPrices(table.grid))        # no drafter: plain decoding
        sim.closed_loop(32, lambda n: (np.full(n, 512), np.full(n, 256), np.zeros(n, dtype=np.int64)))
        sim.run(until=10.0)

    With a drafter: ``EngineConfig(gamma=...)``, ``source=`` an acceptance source, ``policy=`` a policy name
    (``"dspark"``, ``"static-3"``) or a factory of ``Policy`` objects (one per replica), and the drafter's cost in
    ``StepPrices(draft=...)``. ``live_clock``: the source times its own forwards (``hardware.clock: live``).
    """

    def __init__(self, config: EngineConfig, prices: StepPrices, *, source: AcceptanceSource | None = None,
                 policy: str | Callable[[], Policy] = "ar", label: str | None = None, live_clock: bool = False):
        if source is None:
            if config.gamma:
                raise ValueError("a simulation with a drafter (gamma > 0) needs an acceptance source")
            source = NoDrafts()
        if isinstance(policy, str):
            spec = policy
            label = label or spec
            policy = lambda: make_policy(spec, label=label)  # noqa: E731
        self.env = simpy.Environment()
        self.config = config
        self.prices = prices
        self.source = source
        self.requests = RequestLog()
        self.steps = RowLog(STEP_COLUMNS)
        # a source that generates real tokens (hardware in the loop), else None: it hears of completed prefills
        # and preemptions, may decode without a drafter and end a request at EOS (Proposal.ended), and under
        # ``clock: live`` the measured time of its forwards is the step's time instead of the table's T(B, K)
        self.runtime_source = source if isinstance(source, RuntimeSource) else None
        self.source_decodes = self.runtime_source is not None and self.runtime_source.decodes_without_drafter
        if live_clock and self.runtime_source is None:
            raise ValueError("live_clock needs a RuntimeSource that times its forwards (measures_time)")
        self.live_clock = self.runtime_source.step_ms if live_clock else None
        self.preemptions = 0
        self.rejected = 0
        self.remote_tokens = 0  # first tokens emitted by a disaggregated prefill pool
        # a finite prefill pool (simulator/core/prefill.py); with an unbounded one, each prompt's forward is priced alone
        pre = config.prefill
        self.prefill_pool = pre.pool(self.env, self.prefilled) if pre is not None else None
        self.remote_prefill_ms = pre.alone_ms() if pre is not None and self.prefill_pool is None else None
        self.replicas = [Replica(i, self, policy(), label or "policy") for i in range(config.replicas)]
        self.router: Router = config.router(config.replicas)
        self.on_finish: Callable[[int], None] = lambda count: None

    @property
    def kv_stats(self) -> dict[str, int]:
        """The prefix cache's counters summed over replicas: ``prefix_hits``, ``prefix_misses`` (admissions of a
        request with a prefix group whose prefix was resident, or was not and is computed), ``prefix_hit_tokens``
        (prompt tokens the hits did not prefill) and ``prefix_evictions`` (simulator/core/kv_cache.py)."""
        total: dict[str, int] = {}
        for rep in self.replicas:
            for k, v in rep.kv.stats().items():
                total[k] = total.get(k, 0) + v
        return total

    def submit(self, prompt: np.ndarray, output: np.ndarray, mix: np.ndarray, prefix: np.ndarray | None = None) -> None:
        """New requests arrive now: log them, tell the source, route them (after a remote prefill, if any).
        ``prefix``: each request's shared-prefix group (-1: none), whose first ``shared_prefix_tokens`` prompt
        tokens are those of every request of the group."""
        if prefix is not None:
            prefix = self.checked_prefix(prompt, prefix)
        ids = self.requests.add(self.env.now, prompt, output, mix, prefix)
        self.source.attach(ids, mix)
        ends = self.source.end_positions(ids)
        req = self.requests.data
        # admitted on the drawn length, as a live run (which meets the end token only when it comes) admits
        fits = req["prompt"][ids] + req["output"][ids] + self.config.lookahead <= self.config.kv_capacity
        if ends is not None:  # the request log's output is the real length, as a live run's is
            req["output"][ids] = np.minimum(req["output"][ids], np.asarray(ends, dtype=np.int64))
        if not fits.all():
            req["rejected"][ids[~fits]] = True  # could never fit, even alone
            self.rejected += int((~fits).sum())
            ids = ids[fits]
        if self.config.request_ms:  # the API server holds them first (EngineConfig.request_ms)
            later = self.env.timeout(self.config.request_ms * 1e-3)
            later.callbacks.append(lambda _, ids=ids: self.dispatch(ids))
        else:
            self.dispatch(ids)

    def dispatch(self, ids: np.ndarray) -> None:
        """Requests the engine now sees go to their prefill: a finite prefill pool, a replica's queue (colocated), or
        an unbounded pool that prefills each alone."""
        req = self.requests.data
        if self.prefill_pool is not None:
            for rid in ids.tolist():
                self.prefill_pool.submit(rid, int(req["prompt"][rid]))
        elif self.remote_prefill_ms is None:
            self.route(ids)
        else:
            ms = self.remote_prefill_ms(req["prompt"][ids])  # all at once: one vectorised lookup
            for rid, t in zip(ids.tolist(), ms.tolist(), strict=True):
                self.prefill_elsewhere(rid, t)

    def checked_prefix(self, prompt: np.ndarray, prefix: np.ndarray) -> np.ndarray:
        """``prefix`` as int64, checked: one group per request, -1 or >= 0, prompts at least the shared prefix.
        (A closed loop submits one request at a time: a few scalar numpy calls, no more.)"""
        prefix = np.asarray(prefix)
        if prefix.shape != np.shape(prompt) or prefix.dtype.kind not in "iu":
            raise UserError(f"prefix: expected one integer group per request ({np.shape(prompt)}), got "
                            f"{prefix.dtype} of shape {prefix.shape}")
        if not len(prefix):
            return prefix.astype(np.int64, copy=False)
        if prefix.min() < -1:
            raise UserError(f"prefix: a group is -1 (none) or >= 0, got {int(prefix.min())}")
        short = (prefix >= 0) & (prompt < self.config.shared_prefix_tokens)
        if short.any():
            i = int(np.flatnonzero(short)[0])
            raise UserError(f"prefix: a request of prefix group {int(prefix[i])} has a {int(prompt[i])}-token prompt, "
                            f"shorter than the shared prefix it begins with (shared_prefix_tokens "
                            f"{self.config.shared_prefix_tokens})")
        return prefix.astype(np.int64, copy=False)

    def route_one(self, rid: int) -> None:
        """``route`` of one request, without the array machinery."""
        req = self.requests.data
        seen = (RoutedRequest(rid, int(req["prompt"][rid]), int(req["prefix"][rid]), int(req["mix"][rid]),
                              float(req["arrival"][rid])) if self.router.wants_request else None)
        i = self.router.pick(seen)
        req["replica"][rid] = i
        req["routed"][rid] = self.env.now
        self.replicas[i].enqueue((rid,))

    def route(self, ids: np.ndarray) -> None:
        """These requests join replicas' queues, in order; with one replica, all at once."""
        if len(self.replicas) > 1:
            for rid in ids.tolist():
                self.route_one(rid)
            return
        self.router.sent(0, len(ids))
        req = self.requests.data
        req["replica"][ids] = 0
        req["routed"][ids] = self.env.now
        self.replicas[0].enqueue(ids.tolist())

    def prefill_elsewhere(self, rid: int, ms: float) -> None:
        """Disaggregated prefill: a separate pool (not counted in this deployment's GPUs) computes the prompt's KV
        in one forward of ``ms`` and emits the first token, then the request joins a decode replica's queue. (A
        timeout with a callback rather than a SimPy process per request: one event instead of three, in the same
        order.)"""
        done = self.env.timeout(ms * 1e-3)
        done.callbacks.append(lambda _: self.prefilled(rid))

    def prefilled(self, rid: int) -> None:
        """A remote prefill finished now: the first token is out and the request joins a decode queue."""
        req = self.requests.data
        req["first_token"][rid] = self.env.now
        req["generated"][rid] = 1
        req["kv_ready"][rid] = True
        self.remote_tokens += 1
        if self.runtime_source is not None:  # the real first token: an end token ends the request with it
            ended = self.runtime_source.prefilled_elsewhere(np.array([rid]))
            if ended is not None and bool(np.asarray(ended)[0]):
                req["output"][rid] = 1
        if req["output"][rid] <= 1:
            req["finish"][rid] = self.env.now
            self.source.detach(np.array([rid]))
            self.on_finish(1)
        else:
            self.route_one(rid)

    def closed_loop(self, users: int, draw: Callable[[int], tuple], total: int | None = None) -> None:
        """``users`` requests, each followed by a new one when it finishes; ``draw(n)`` returns n requests'
        (prompt, output, mix) or (prompt, output, mix, prefix). With ``total``, a benchmark client's finite prompt
        list: ``total`` requests in all, at most ``users`` at once, and none once the list is spent."""
        if total is None:
            self.on_finish = lambda count: self.submit(*draw(count))
            self.submit(*draw(users))
            return
        left = total

        def send(count: int) -> None:
            nonlocal left
            while count > 0 and left > 0:
                n = min(count, left)
                left -= n
                refused = self.rejected
                self.submit(*draw(n))
                count = self.rejected - refused  # a client sends its next prompt when one is refused

        self.on_finish = send
        send(users)

    def open_loop(self, times: np.ndarray, prompt: np.ndarray, output: np.ndarray, mix: np.ndarray,
                  prefix: np.ndarray | None = None) -> None:
        """Requests arrive at ``times`` (ascending), with these lengths, mix indices and prefix groups (None: no
        prefix)."""
        def arrivals():
            i, n = 0, len(times)
            while i < n:
                t = times[i]
                if t > self.env.now:
                    yield self.env.timeout(t - self.env.now)
                j = int(np.searchsorted(times, self.env.now, side="right"))  # everything due by now, at once
                self.submit(prompt[i:j], output[i:j], mix[i:j], None if prefix is None else prefix[i:j])
                i = j

        self.env.process(arrivals())

    def run(self, until: float) -> None:
        self.env.run(until=until)
        for rep in self.replicas:  # requests still running keep their counts in the log too
            rep.save()
