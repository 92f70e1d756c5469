"""The engine's invariants, checked on a finished simulation. Each has a number and a name; a violation message
starts with them. docs/model.md, "Invariants", states each in the words below (a test compares the two) and names
the tests that check it. Every engine test runs ``check_invariants`` on what it simulated, whatever the run's shape,
and ``simulate SCENARIO --check-invariants`` runs it on every run of a command.

- INV-1 clock: per replica, steps do not overlap and end after they start; the step log is in time order;
- INV-2 work-conserving: a replica waits between steps only when it has nothing running and nothing queued; the
  router's count of each replica's load is what the replica holds;
- INV-3 step-tokens: per step, emitted = accepted drafts + decoding requests + completed prefills;
- INV-4 verify-bounds: accepted <= verified <= drafted = gamma x decoding requests (the drafter proposes the whole
  gamma the system asks for, every decoding request, every step);
- INV-5 batch-cap: B never exceeds ``max_batch_tokens``;
- INV-6 kv-capacity: KV use (contexts + lookahead slots, a shared prefix once, cached prefixes until evicted) never
  exceeds the capacity; (when the run stops) each replica's KV cache totals equal their recount from its batch;
- INV-7 held-tokens: the tokens requests hold equal the tokens steps emitted (plus a prefill pool's first tokens);
- INV-8 lengths: no request emits past its output length; a finished one holds exactly it;
- INV-9 request-times: arrival <= routed <= admitted <= finish; first token <= finish; admitted <= first token when
  prefill is on the replica, first token <= routed when a prefill pool emits it;
- INV-10 request-conservation: arrived = finished + unfinished + rejected: at the end every request is finished,
  rejected, held once by the replica it was routed to (running or queued), still prefilling in the pool or, having
  arrived less than ``request_ms`` before the run stopped, still with the API server; at every
  step a replica's running + queued = requests routed to it - requests finished there.

How INV-10 is read at every step: the step log records each replica's running and queued requests as the step
ends, and the request log when each request was routed and finished; a request routed at the very instant a step
ends may have joined the queue before or after that step's record (SimPy orders simultaneous events), so the count
is held between the requests routed strictly before and those routed up to that instant. The counts cannot tell
which requests a replica holds; the end of the run, where the engine's own queues and batches can be read, checks
the identities.
"""

from __future__ import annotations

import numpy as np

from simulator.core.engine import Simulation


class InvariantViolation(AssertionError):
    pass


def check_invariants(sim: Simulation) -> None:
    bad: list[str] = []
    st = sim.steps.frame()
    rq = sim.requests.frame()
    eps = 1e-9

    for rep in sim.replicas:
        mine = st["replica"] == rep.index
        start, end = st["start"][mine], st["end"][mine]
        if np.any(end < start - eps):
            bad.append(f"INV-1 clock: replica {rep.index}: a step ends before it starts")
        gaps = start[1:] - end[:-1]
        if np.any(gaps < -eps):
            bad.append(f"INV-1 clock: replica {rep.index}: steps overlap (the clock went back)")
        idle_times = np.array([t for t, _ in rep.idle_checks])
        waited = np.flatnonzero(gaps > eps)
        if len(waited) and not np.all(np.isin(end[:-1][waited], idle_times)):
            bad.append(f"INV-2 work-conserving: replica {rep.index}: paused between steps without being idle")
        if any(q > 0 for _, q in rep.idle_checks):
            bad.append(f"INV-2 work-conserving: replica {rep.index}: went idle while holding work")
        if sim.router.loads[rep.index] != rep.load:  # the router balances on its own count of each replica's load
            bad.append(f"INV-2 work-conserving: replica {rep.index}: the router counts {sim.router.loads[rep.index]} "
                       f"requests there, it holds {rep.load}")
    if np.any(np.diff(st["end"]) < -eps):
        bad.append("INV-1 clock: step log is not in time order")

    if not np.array_equal(st["emitted"], st["accepted"] + st["decoding"] + st["prefill_done"]):
        bad.append("INV-3 step-tokens: emitted != accepted + decoding requests + completed prefills in some step")
    if np.any(st["accepted"] > st["verified"]) or np.any(st["verified"] > st["drafted"]):
        bad.append("INV-4 verify-bounds: accepted <= verified <= drafted violated")
    if np.any(st["drafted"] != sim.config.gamma * st["decoding"]):
        bad.append(f"INV-4 verify-bounds: a step drafted other than gamma ({sim.config.gamma}) x decoding requests")
    if np.any(st["batch_tokens"] > sim.config.max_batch_tokens):
        bad.append(f"INV-5 batch-cap: batch tokens above the cap {sim.config.max_batch_tokens}: max {st['batch_tokens'].max()}")
    if np.any(st["kv_used"] > sim.config.kv_capacity):
        bad.append(f"INV-6 kv-capacity: KV use above capacity {sim.config.kv_capacity}: max {st['kv_used'].max()}")
    for rep in sim.replicas:
        recount = kv_recount(rep)
        if recount != rep.kv_used():
            bad.append(f"INV-6 kv-capacity: replica {rep.index}: the KV cache counts {rep.kv_used()} slots in use, its "
                       f"batch and cached prefixes hold {recount}")

    # every token a request holds came from a step
    held = rq["generated"].copy()
    for rep in sim.replicas:
        held[rep.batch.col("rid")] = rep.batch.col("generated")  # running requests hold their live count
    if held.sum() != st["emitted"].sum() + sim.remote_tokens:
        bad.append(f"INV-7 held-tokens: tokens held by requests ({held.sum()}) != tokens emitted by steps ({st['emitted'].sum()}) "
                   f"+ first tokens of remote prefills ({sim.remote_tokens})")
    if np.any(held > rq["output"]):
        bad.append("INV-8 lengths: a request emitted past its output length")
    done = ~np.isnan(rq["finish"])
    if np.any(held[done] != rq["output"][done]):
        bad.append("INV-8 lengths: a finished request does not hold exactly its output length")

    def ordered(a: str, b: str) -> None:
        both = ~np.isnan(rq[a]) & ~np.isnan(rq[b])
        if np.any(rq[b][both] < rq[a][both] - eps):
            bad.append(f"INV-9 request-times: {b} before {a} for some request")

    ordered("arrival", "admitted")
    ordered("arrival", "routed")
    ordered("routed", "admitted")
    ordered("arrival", "first_token")
    ordered("admitted", "finish")
    ordered("first_token", "finish")
    if sim.config.prefill is None:  # co-located: the first token comes from this replica's own prefill
        ordered("admitted", "first_token")
    else:  # disaggregated: the pool emits the first token, then the request is routed to a decode replica
        ordered("first_token", "routed")

    bad += conservation_at_steps(sim, st, rq) + conservation_at_end(sim, rq)
    if bad:
        raise InvariantViolation("; ".join(bad))


def kv_recount(rep) -> int:
    """A replica's KV use recounted from its batch and its cache's table of prefixes (``KVCache.used`` keeps it as
    running totals): contexts, less the shared prefixes the rows hold by reference, plus every cached prefix once,
    plus the lookahead slots."""
    b, kv = rep.batch, rep.kv
    context = int((b.col("prompt") + b.col("generated")).sum())
    by_reference = kv.cached * int(np.count_nonzero(b.col("kv_shared") == kv.cached)) if kv.active else 0
    return context - by_reference + kv.cached * len(kv.refs) + b.n * kv.lookahead


def conservation_at_steps(sim: Simulation, st: dict[str, np.ndarray], rq: dict[str, np.ndarray]) -> list[str]:
    """INV-10 in counts, at the end of every step: what the replica logged as running + queued against the requests
    routed to it and not finished before that instant (module docstring: the bounds)."""
    bad = []
    for rep in sim.replicas:
        mine = st["replica"] == rep.index
        if not mine.any():
            continue
        ends = st["end"][mine]
        logged = st["running"][mine] + st["queued"][mine]
        here = rq["replica"] == rep.index
        routed = np.sort(rq["routed"][here])
        finished = np.sort(rq["finish"][here & ~np.isnan(rq["finish"])])
        gone = np.searchsorted(finished, ends, side="left")  # finished strictly before the step ended
        low = np.searchsorted(routed, ends, side="left") - gone
        high = np.searchsorted(routed, ends, side="right") - gone
        off = np.flatnonzero((logged < low) | (logged > high))
        if len(off):
            i = off[0]
            expect = f"{low[i]}" if low[i] == high[i] else f"{low[i]}..{high[i]}"
            bad.append(f"INV-10 request-conservation: replica {rep.index}, step ending at {ends[i]:.6f} s: it held "
                       f"{logged[i]} requests (running + queued) where {expect} were routed there and not finished "
                       f"({len(off)} steps off)")
    return bad


def conservation_at_end(sim: Simulation, rq: dict[str, np.ndarray]) -> list[str]:
    """INV-10 by identity, when the run stops: each request that arrived is in exactly one place."""
    bad = []
    n = len(rq["arrival"])
    finished = ~np.isnan(rq["finish"])
    rejected = rq["rejected"].astype(bool)
    holder = np.full(n, -1, dtype=np.int64)  # the replica holding each request, -1 for none
    times_held = np.zeros(n, dtype=np.int64)
    for rep in sim.replicas:
        rids = np.concatenate([rep.batch.col("rid"), np.fromiter(rep.queue, dtype=np.int64, count=len(rep.queue))])
        np.add.at(times_held, rids, 1)
        holder[rids] = rep.index
    in_pool = np.zeros(n, dtype=bool)
    if sim.prefill_pool is not None:
        pooled = [item[0] for queue in sim.prefill_pool.queues for item in queue]
        np.add.at(times_held, pooled, 1)
        in_pool[pooled] = True
    elif sim.remote_prefill_ms is not None:  # an unbounded pool keeps no list: what it holds is not routed yet
        in_pool = np.isnan(rq["routed"]) & np.isnan(rq["first_token"]) & ~finished & ~rejected
    held = times_held > 0
    # the API server holds a request request_ms before the engine sees it (EngineConfig.request_ms): one that
    # arrived that little before the run stopped is there
    front = (np.isnan(rq["routed"]) & ~finished & ~rejected & ~held
             & (rq["arrival"] > sim.env.now - sim.config.request_ms * 1e-3))

    def first(mask: np.ndarray) -> str:
        where = np.flatnonzero(mask)
        return f"{len(where)} requests (first: request {where[0]})"

    if np.any(times_held > 1):
        bad.append(f"INV-10 request-conservation: {first(times_held > 1)} held more than once")
    if np.any(rejected & (finished | held | ~np.isnan(rq["routed"]))):
        bad.append(f"INV-10 request-conservation: {first(rejected & (finished | held | ~np.isnan(rq['routed'])))} "
                   "rejected and yet routed, held or finished")
    if np.any(finished & held):
        bad.append(f"INV-10 request-conservation: {first(finished & held)} finished and still held")
    wrong = (holder >= 0) & (holder != rq["replica"])
    if np.any(wrong):
        bad.append(f"INV-10 request-conservation: {first(wrong)} held by a replica they were not routed to")
    lost = ~(finished | rejected | held | in_pool | front)
    if np.any(lost):
        bad.append(f"INV-10 request-conservation: {first(lost)} arrived and are neither finished, rejected nor held "
                   "by the API server, a replica or the prefill pool")
    return bad
