"""A disaggregated prefill pool of finite capacity.

With ``engine.prefill: disaggregated`` a separate pool computes each prompt's KV cache and first token, then hands
the request to a decode replica. Without ``hardware.prefill_replicas`` that pool is unbounded (every prompt is
prefilled at once, as on an idle pool). With it, the pool has that many replicas, each running one forward at a
time over a batch of waiting prompts packed first-come first-served up to ``max_batch_tokens`` (a prompt longer
than what is left is chunked and continues in the next forward, reading its earlier chunks' KV). A forward is
priced by the engine's one forward rule (``simulator.core.forward``) on the prefill step-time table: T at its
prompt tokens plus their attention, or T(B, K) with the cached prompt as K on a table that does not price chunks'
attention apart. New prompts go to the replica with the fewest tokens outstanding, so TTFT grows with the queue
when the pool is too small: the capacity ``simulate plan`` sizes against a TTFT limit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import simpy

from hw_profile.tables.step_table import ChunkAttention, StepTimeGrid
from simulator.core.forward import ForwardPrice


class PrefillPool:
    """``replicas`` prefill replicas; ``on_done(rid)`` is called when a request's prompt is fully prefilled."""

    def __init__(self, env: simpy.Environment, replicas: int, clock: StepTimeGrid, max_batch_tokens: int,
                 on_done: Callable[[int], None], cost: ChunkAttention | None = None):
        self.env = env
        self.price = ForwardPrice(clock, cost)
        self.max_batch_tokens = max_batch_tokens
        self.on_done = on_done
        # per replica: FIFO of [rid, tokens left, tokens done]
        self.queues: list[deque[list[int]]] = [deque() for _ in range(replicas)]
        self.outstanding = np.zeros(replicas, dtype=np.int64)  # prompt tokens queued or in the running forward
        self.wakes: list[simpy.Event | None] = [None] * replicas
        self.forwards = 0
        self.busy_s = 0.0
        # (time, prompt tokens outstanding in the pool) after every change: each submit and each forward's end
        self.backlog_log: list[tuple[float, int]] = []
        for r in range(replicas):
            env.process(self._loop(r))

    @property
    def replicas(self) -> int:
        return len(self.queues)

    def submit(self, rid: int, prompt: int) -> None:
        r = int(np.argmin(self.outstanding))  # ties: lowest index
        self.queues[r].append([rid, int(prompt), 0])
        self.outstanding[r] += int(prompt)
        self.backlog_log.append((self.env.now, int(self.outstanding.sum())))
        wake = self.wakes[r]
        if wake is not None and not wake.triggered:
            wake.succeed()

    def _batch(self, queue: deque[list[int]]) -> list[tuple[list[int], int]]:
        """The next forward's (request, tokens) pairs: whole prompts first-come first-served, the last one
        possibly chunked (it stays at the head of the queue)."""
        budget = self.max_batch_tokens
        batch = []
        for item in queue:
            if budget <= 0:
                break
            take = min(item[1], budget)
            batch.append((item, take))
            budget -= take
        return batch

    def _loop(self, r: int):
        env, queue = self.env, self.queues[r]
        while True:
            if not queue:
                self.wakes[r] = env.event()
                yield self.wakes[r]
                self.wakes[r] = None
                continue
            batch = self._batch(queue)
            takes = [take for _, take in batch]
            tokens = sum(takes)
            # one forward over the chunks; a continued prompt reads its earlier chunks
            ms = self.price.prefill_ms(np.array(takes), np.array([item[2] for item, _ in batch]))
            yield env.timeout(ms * 1e-3)
            self.forwards += 1
            self.busy_s += ms * 1e-3
            self.outstanding[r] -= tokens
            self.backlog_log.append((env.now, int(self.outstanding.sum())))
            for item, take in batch:
                item[1] -= take
                item[2] += take
            while queue and queue[0][1] == 0:
                self.on_done(queue.popleft()[0])

    def backlog_at(self, t: float) -> int:
        """Prompt tokens outstanding in the pool (queued or in a running forward) at time ``t``."""
        if not self.backlog_log:
            return 0
        times = np.array([x[0] for x in self.backlog_log])
        i = int(np.searchsorted(times, t, side="right")) - 1
        return self.backlog_log[i][1] if i >= 0 else 0

    def saturated(self, end: float) -> bool:
        """The pool's backlog is still growing at the window's end ``end``: over a full forward per replica
        there, and above what it was at mid-run. One rule with the decode queue's (``metrics.saturated``), read
        at the same two moments. The drain after the window is no part of it: its length depends on the decode
        system behind the pool, and the pool under one set of arrivals must be judged the same for every one
        (read at the drain's end, one pool was judged saturated behind mtp-1 and not behind dspark-async)."""
        at_end = self.backlog_at(end)
        return bool(at_end > self.replicas * self.max_batch_tokens and at_end > self.backlog_at(end / 2))


class Disaggregated:
    """``EngineConfig.prefill`` for a separate prefill pool (not counted in the deployment's GPUs) that sends each
    request's KV and first token to a decode replica: ``replicas`` prefill replicas (``PrefillPool``), or, with
    None, an unbounded pool that prefills every prompt at once, alone in its forward. Priced by the one forward
    rule (``ForwardPrice``) on ``grid``, with ``cost`` the chunks' attention when the table prices it apart."""

    def __init__(self, grid: StepTimeGrid, cost: ChunkAttention | None = None, replicas: int | None = None,
                 max_batch_tokens: int = 8192):
        if replicas is not None and replicas < 1:
            raise ValueError(f"prefill replicas must be at least 1 (or None: unbounded), got {replicas}")
        self.grid = grid
        self.cost = cost
        self.replicas = replicas
        self.max_batch_tokens = max_batch_tokens

    def pool(self, env: simpy.Environment, on_done: Callable[[int], None]) -> PrefillPool | None:
        """The finite pool of one simulation, or None when it is unbounded."""
        if self.replicas is None:
            return None
        return PrefillPool(env, self.replicas, self.grid, self.max_batch_tokens, on_done, self.cost)

    def alone_ms(self) -> Callable[[np.ndarray], np.ndarray]:
        """An unbounded pool's forward time for each of an array of prompts."""
        return ForwardPrice(self.grid, self.cost).alone_ms
