"""The SimPy engine: a router over replicas, each a step-level continuous-batching loop with speculative decoding.

One replica step (one SimPy timeout):

1. admission: waiting requests join the running batch, oldest first, while the batch is under ``max_running`` and
   the KV cache can reserve the request's context plus gamma + 1 lookahead slots;
2. chunked prefill: requests still prefilling get up to ``prefill_chunk`` prompt tokens each, within what the
   batch-token cap leaves after every decoding request's worst case (1 + gamma tokens);
3. draft -> policy -> verify for the decoding requests: the acceptance source proposes confidences, the policy
   picks prefix lengths l (R,), the source says how many are accepted;
4. the clock advances by draft + scheduling stall (policies that need this step's confidences) + T(B, K), with
   B = sum(1 + l) + prefill tokens and K = KV tokens read;
5. each decoding request emits its accepted prefix plus one target token; a request whose prefill completes emits
   its first token; finished requests leave; if the KV cache overflows, the most recently admitted request is
   preempted and later recomputed (vLLM's default).

Everything across the batch is numpy; there is no per-token Python loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import simpy

from hw_profile.table import StepCurve, StepTimeGrid
from simulator.acceptance.base import AcceptanceSource
from simulator.drafters import DraftCost
from simulator.policies.base import Policy, PolicyView, checked_lengths


class Growable:
    """Columns of a log, extended by blocks of rows, grown geometrically."""

    def __init__(self, columns: dict[str, type], capacity: int = 4096):
        self.columns = columns
        self.n = 0
        self.capacity = capacity
        self.data = {k: np.zeros(capacity, dtype=t) for k, t in columns.items()}

    def _grow(self, need: int) -> None:
        if need <= self.capacity:
            return
        self.capacity = max(need, 2 * self.capacity)
        for k, v in self.data.items():
            new = np.zeros(self.capacity, dtype=v.dtype)
            new[: self.n] = v[: self.n]
            self.data[k] = new

    def extend(self, count: int, **cols) -> np.ndarray:
        start = self.n
        self._grow(start + count)
        for k, v in cols.items():
            self.data[k][start : start + count] = v
        self.n = start + count
        return np.arange(start, start + count)

    def frame(self) -> dict[str, np.ndarray]:
        return {k: v[: self.n].copy() for k, v in self.data.items()}


REQUEST_COLUMNS = {
    "arrival": np.float64, "prompt": np.int64, "output": np.int64, "mix": np.int64, "replica": np.int64,
    "admitted": np.float64, "first_token": np.float64, "finish": np.float64, "generated": np.int64,
    "preemptions": np.int64, "rejected": np.bool_, "decode_steps": np.int64, "accepted": np.int64,
    "kv_ready": np.bool_,
}
STEP_COLUMNS = {
    "replica": np.int64, "start": np.float64, "end": np.float64, "running": np.int64, "decoding": np.int64,
    "prefill_tokens": np.int64, "prefill_done": np.int64, "batch_tokens": np.int64, "kv_tokens": np.int64,
    "verified": np.int64, "accepted": np.int64, "emitted": np.int64, "draft_ms": np.float64,
    "step_ms": np.float64, "queued": np.int64, "kv_used": np.int64,
}


class RowLog:
    """A log written one whole row at a time into a 2-D float array (one numpy assignment per row); ``frame``
    returns typed columns."""

    def __init__(self, columns: dict[str, type], capacity: int = 4096):
        self.columns = columns
        self.n = 0
        self.data = np.zeros((capacity, len(columns)))

    def append(self, row: tuple) -> None:
        if self.n == len(self.data):
            self.data = np.concatenate([self.data, np.zeros_like(self.data)])
        self.data[self.n] = row
        self.n += 1

    def frame(self) -> dict[str, np.ndarray]:
        return {k: self.data[: self.n, i].astype(t) for i, (k, t) in enumerate(self.columns.items())}


class Requests(Growable):
    def __init__(self):
        super().__init__(REQUEST_COLUMNS)

    def add(self, now: float, prompt: np.ndarray, output: np.ndarray, mix: np.ndarray) -> np.ndarray:
        n = len(prompt)
        return self.extend(n, arrival=now, prompt=prompt, output=output, mix=mix, replica=-1, admitted=np.nan,
                           first_token=np.nan, finish=np.nan, generated=0, preemptions=0, rejected=False,
                           decode_steps=0, accepted=0, kv_ready=False)


class StepRate:
    """SPS(B) for one step: the whole engine step rate with this step's draft, stall, prefill and K fixed."""

    __slots__ = ("curve", "fixed_ms", "prefill")

    def __init__(self, curve: StepCurve, prefill: int, fixed_ms: float):
        self.curve = curve  # T(B) at this step's K
        self.prefill = prefill
        self.fixed_ms = fixed_ms

    def step_ms(self, batch: np.ndarray | float) -> np.ndarray:
        return self.curve(np.asarray(batch, dtype=float) + self.prefill) + self.fixed_ms

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        return 1000.0 / self.step_ms(batch)


class Replica:
    """One serving replica: its running batch (arrays of capacity max_running, oldest admitted first) and queue.

    ``tokens`` (sum of prompt + generated over the running batch) and ``prefilling`` (how many still prefill) are
    kept incrementally so that a plain decode step does no bookkeeping reductions.
    """

    def __init__(self, index: int, sim: Simulation, policy: Policy, policy_label: str):
        self.index = index
        self.sim = sim
        self.env = sim.env
        self.policy = policy
        self.label = policy_label
        cap = sim.max_running
        self.ids = np.zeros(cap, dtype=np.int64)
        self.prompt = np.zeros(cap, dtype=np.int64)
        self.output = np.zeros(cap, dtype=np.int64)
        self.generated = np.zeros(cap, dtype=np.int64)
        self.to_prefill = np.zeros(cap, dtype=np.int64)  # tokens still to prefill (0 once decoding)
        self.decode_steps = np.zeros(cap, dtype=np.int64)
        self.accepted = np.zeros(cap, dtype=np.int64)
        self.n = 0
        self.tokens = 0
        self.prefilling = 0
        self.queue: deque[int] = deque()
        self.wake: simpy.Event | None = None
        self.step_no = 0
        self.idle_checks: list[tuple[float, int]] = []  # (time, queued) whenever the replica goes idle
        self.process = self.env.process(self.loop())

    # --- queue and admission --------------------------------------------------------------------------------
    def enqueue(self, rid: int, front: bool = False) -> None:
        (self.queue.appendleft if front else self.queue.append)(rid)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    @property
    def load(self) -> int:
        return self.n + len(self.queue)

    def kv_used(self) -> int:
        """KV slots held: every running request's context plus gamma + 1 lookahead slots."""
        return self.tokens + self.n * self.sim.lookahead

    def admit(self) -> None:
        sim = self.sim
        if not self.queue or self.n >= sim.max_running:
            return
        req = sim.requests.data
        used = self.kv_used()
        while self.queue and self.n < sim.max_running:
            rid = self.queue[0]
            context = int(req["prompt"][rid] + req["generated"][rid])
            if used + context + sim.lookahead > sim.kv_capacity:
                break
            self.queue.popleft()
            i = self.n
            self.ids[i] = rid
            self.prompt[i] = req["prompt"][rid]
            self.output[i] = req["output"][rid]
            self.generated[i] = req["generated"][rid]
            self.decode_steps[i] = req["decode_steps"][rid]
            self.accepted[i] = req["accepted"][rid]
            # the prompt, plus generated tokens when recomputing; nothing when a prefill pool sent the KV
            self.to_prefill[i] = 0 if req["kv_ready"][rid] else context
            if np.isnan(req["admitted"][rid]):
                req["admitted"][rid] = self.env.now
            self.n = i + 1
            self.tokens += context
            self.prefilling += int(self.to_prefill[i] > 0)
            used += context + sim.lookahead

    def preempt_overflow(self) -> None:
        """Recompute preemption: while the cache overflows, evict the most recently admitted request."""
        sim = self.sim
        if self.kv_used() <= sim.kv_capacity:
            return
        req = sim.requests.data
        while self.kv_used() > sim.kv_capacity and self.n > 1:
            i = self.n - 1
            rid = int(self.ids[i])
            self.tokens -= int(self.prompt[i] + self.generated[i])
            self.prefilling -= int(self.to_prefill[i] > 0)
            self.save(slice(i, i + 1))
            req["kv_ready"][rid] = False  # its cache is dropped: recomputed here on readmission
            sim.source_preempt(np.array([rid]))
            req["preemptions"][rid] += 1
            sim.preemptions += 1
            self.n = i
            self.enqueue(rid, front=True)

    def save(self, rows: slice | np.ndarray) -> None:
        """Write the live per-request counters of these rows back to the request log."""
        req, ids = self.sim.requests.data, self.ids[rows]
        req["generated"][ids] = self.generated[rows]
        req["decode_steps"][ids] = self.decode_steps[rows]
        req["accepted"][ids] = self.accepted[rows]

    # --- the loop -------------------------------------------------------------------------------------------
    def loop(self):
        env = self.env
        while True:
            self.admit()
            if self.n == 0:
                # idle: by construction nothing in the queue could run (the invariant checker verifies it)
                self.idle_checks.append((env.now, len(self.queue)))
                self.wake = env.event()
                yield self.wake
                self.wake = None
                continue
            yield from self.step()

    def step(self):
        env, sim = self.env, self.sim
        n, gamma = self.n, sim.gamma
        start = env.now
        kv_used = self.kv_used()
        if self.prefilling:
            prefill_mask = self.to_prefill[:n] > 0
            dec = np.flatnonzero(~prefill_mask)
            rows = len(dec)
            remaining = self.output[dec] - self.generated[dec]
            context = self.prompt[dec] + self.generated[dec]
            # chunked prefill in admission order, after reserving every decoding request's worst case
            budget = sim.max_batch_tokens - rows - int(np.minimum(gamma, remaining - 1).sum())
            want = np.minimum(self.to_prefill[:n], sim.prefill_chunk)
            chunks = np.clip(budget - (np.cumsum(want) - want), 0, want)
            prefill_tokens = int(chunks.sum())
            kv = self.tokens - int(self.to_prefill[:n].sum())  # prefilling requests read what is prefilled
            ids = self.ids[dec]
        else:
            rows = n
            remaining = self.output[:n] - self.generated[:n]
            context = self.prompt[:n] + self.generated[:n]
            prefill_tokens = 0
            kv = self.tokens
            ids = self.ids[:n]

        draft_ms = sim.draft.ms(rows, gamma, kv)
        stall = sim.stall_ms if (self.policy.sync_stall and rows) else 0.0
        verified = 0
        if rows and (gamma or sim.source_decodes):
            maxl = np.minimum(gamma, remaining - 1)
            proposal = sim.source.propose(ids)
            conf = proposal.confidence
            if maxl.min() < gamma:
                conf = conf * (sim.positions < maxl[:, None])
            sps = StepRate(sim.policy_grid.curve(kv), prefill_tokens, draft_ms + stall)
            view = PolicyView(conf, remaining, context, sps, gamma, self.step_no,
                              proposal.outcome if self.policy.needs_outcome else None, maxl)
            lengths = checked_lengths(self.policy, self.label, self.policy.choose(view), view)
            accepted = sim.source.verify(proposal, lengths)
            verified = int(lengths.sum())
        batch = rows + verified + prefill_tokens
        if self.prefilling:  # the requests whose prefill completes in this step's forward
            sim.source.prefilled(self.ids[:n][prefill_mask & (self.to_prefill[:n] == chunks)])
        step_ms = draft_ms + stall + sim.clock.lookup(batch, kv) if sim.step_ms is None else sim.step_ms() + stall
        yield env.timeout(step_ms * 1e-3)
        now = env.now

        # apply the step's outcome
        req = sim.requests.data
        acc_sum = 0
        if rows:
            if gamma or sim.source_decodes:
                acc_sum = int(accepted.sum())
                self.policy.observe(lengths, accepted)
                gained = accepted + 1
            else:
                accepted, gained = 0, 1
            rows_of = dec if self.prefilling else slice(0, n)
            self.generated[rows_of] += gained
            self.decode_steps[rows_of] += 1
            self.accepted[rows_of] += accepted
            if sim.source_decodes and proposal.ended is not None and proposal.ended.any():
                ended = (dec if self.prefilling else np.arange(n))[proposal.ended]
                self.output[ended] = self.generated[ended]  # the real sequence reached its end token
        done_prefill = 0
        if self.prefilling:
            self.to_prefill[:n] -= chunks
            completed = prefill_mask & (self.to_prefill[:n] == 0)
            done_prefill = int(completed.sum())
            if done_prefill:
                self.generated[:n] += completed  # the prefill's last position yields one token
                first = self.ids[:n][completed]
                fresh = first[np.isnan(req["first_token"][first])]
                req["first_token"][fresh] = now
                self.prefilling -= done_prefill
        emitted = acc_sum + rows + done_prefill
        self.tokens += emitted
        sim.steps.append((self.index, start, now, n, rows, prefill_tokens, done_prefill, batch, kv, verified,
                          acc_sum, emitted, draft_ms, step_ms, len(self.queue), kv_used))  # STEP_COLUMNS order
        self.step_no += 1

        finished = self.generated[:n] >= self.output[:n]
        if finished.any():
            gone = self.ids[:n][finished]
            req["finish"][gone] = now
            self.save(np.flatnonzero(finished))
            self.tokens -= int((self.prompt[:n][finished] + self.output[:n][finished]).sum())
            keep = ~finished
            m = int(keep.sum())
            for arr in (self.ids, self.prompt, self.output, self.generated, self.to_prefill, self.decode_steps,
                        self.accepted):
                arr[:m] = arr[:n][keep]
            self.n = m
            sim.source.detach(gone)
            sim.on_finish(len(gone))
        self.preempt_overflow()


class Router:
    def __init__(self, replicas: list[Replica], kind: str):
        self.replicas = replicas
        self.kind = kind
        self._next = 0

    def pick(self) -> Replica:
        if self.kind == "round-robin":
            r = self.replicas[self._next % len(self.replicas)]
            self._next += 1
            return r
        return min(self.replicas, key=lambda r: r.load)  # ties: lowest index


class Simulation:
    """One run: an environment, replicas, a router, the request and step logs."""

    def __init__(self, *, gamma: int, source: AcceptanceSource, draft: DraftCost, clock: StepTimeGrid,
                 policy_grid: StepTimeGrid, make_policy: Callable[[], Policy], policy_label: str, replicas: int,
                 router: str, max_running: int, max_batch_tokens: int, kv_capacity: int, prefill_chunk: int,
                 stall_ms: float, remote_prefill_ms: Callable[[int], float] | None = None, live_clock: bool = False):
        self.env = simpy.Environment()
        self.gamma = gamma
        self.positions = np.arange(gamma)[None, :]
        self.lookahead = gamma + 1
        self.source = source
        self.draft = draft
        self.clock = clock
        self.policy_grid = policy_grid
        self.max_running = max_running
        self.max_batch_tokens = max_batch_tokens
        self.kv_capacity = kv_capacity
        self.prefill_chunk = prefill_chunk
        self.stall_ms = stall_ms
        self.requests = Requests()
        self.steps = RowLog(STEP_COLUMNS)
        self.remote_prefill_ms = remote_prefill_ms
        # hooks of a source that generates real tokens (hardware in the loop): it decodes even without a drafter,
        # may end a request at its end token (Proposal.ended), frees real caches on preemption, and under
        # ``clock: live`` its measured forward time is the step's time instead of the table's T(B, K)
        self.source_decodes = source.decodes_without_drafter
        self.source_preempt = source.preempt
        self.step_ms = source.step_ms if live_clock else None
        self.preemptions = 0
        self.rejected = 0
        self.remote_tokens = 0  # first tokens emitted by a disaggregated prefill pool
        self.replicas = [Replica(i, self, make_policy(), policy_label) for i in range(replicas)]
        self.router = Router(self.replicas, router)
        self.on_finish: Callable[[int], None] = lambda count: None

    def submit(self, prompt: np.ndarray, output: np.ndarray, mix: np.ndarray) -> None:
        """New requests arrive now: log them, tell the source, route them (after a remote prefill, if any)."""
        ids = self.requests.add(self.env.now, prompt, output, mix)
        self.source.attach(ids, mix)
        req = self.requests.data
        for rid in ids:
            if req["prompt"][rid] + req["output"][rid] + self.lookahead > self.kv_capacity:
                req["rejected"][rid] = True  # could never fit, even alone
                self.rejected += 1
                continue
            if self.remote_prefill_ms is None:
                self.route(int(rid))
            else:
                self.env.process(self.prefilled_elsewhere(int(rid)))

    def route(self, rid: int) -> None:
        rep = self.router.pick()
        self.requests.data["replica"][rid] = rep.index
        rep.enqueue(rid)

    def prefilled_elsewhere(self, rid: int):
        """Disaggregated prefill: a separate pool (not counted in this deployment's GPUs) computes the prompt's KV
        in one forward and emits the first token, then the request joins a decode replica's queue."""
        req = self.requests.data
        yield self.env.timeout(self.remote_prefill_ms(int(req["prompt"][rid])) * 1e-3)
        req["first_token"][rid] = self.env.now
        req["generated"][rid] = 1
        req["kv_ready"][rid] = True
        self.remote_tokens += 1
        if req["output"][rid] <= 1:
            req["finish"][rid] = self.env.now
            self.source.detach(np.array([rid]))
            self.on_finish(1)
        else:
            self.route(rid)

    def closed_loop(self, users: int, draw: Callable[[int], tuple]) -> None:
        self.on_finish = lambda count: self.submit(*draw(count))
        self.submit(*draw(users))

    def open_loop(self, times: np.ndarray, prompt: np.ndarray, output: np.ndarray, mix: np.ndarray) -> None:
        def arrivals():
            i, n = 0, len(times)
            while i < n:
                t = times[i]
                if t > self.env.now:
                    yield self.env.timeout(t - self.env.now)
                j = int(np.searchsorted(times, self.env.now, side="right"))  # everything due by now, at once
                self.submit(prompt[i:j], output[i:j], mix[i:j])
                i = j

        self.env.process(arrivals())

    def run(self, until: float) -> None:
        self.env.run(until=until)
        for rep in self.replicas:  # requests still running keep their counts in the log too
            rep.save(slice(0, rep.n))
