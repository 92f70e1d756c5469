"""The engine's invariants, checked on a finished simulation. Each has a number and a name (docs/model.md,
"Invariants", lists them with the tests that check them); a violation message starts with them. Every engine test
runs ``check_invariants`` on what it simulated, whatever the run's shape.

- INV-1 clock: per replica, steps do not overlap and each ends after it starts; the step log is in time order;
- INV-2 work-conserving: a replica only waits between steps when it has nothing running and nothing queued,
  and the router's count of each replica's load (what least-loaded routing balances) is what it holds;
- INV-3 step-tokens: emitted = accepted drafts + one target token per request-step + one per completed prefill;
- INV-4 verify-bounds: accepted <= verified <= gamma x decoding requests;
- INV-5 batch-cap: B never exceeds the batch-token cap;
- INV-6 kv-capacity: KV use never exceeds the capacity;
- INV-7 held-tokens: every token a request holds was emitted by some step (or, with disaggregated prefill, is
  the first token the prefill pool emitted);
- INV-8 lengths: no request emits past its length, and a finished one holds exactly its length;
- INV-9 request-times: arrival <= routed to a replica <= admission <= finish, first token <= finish, and (prefill
  on the replica) admission <= first token; a disaggregated prefill emits the first token before routing.
"""

from __future__ import annotations

import numpy as np

from simulator.engine import Simulation


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
    if np.any(st["accepted"] > st["verified"]) or np.any(st["verified"] > sim.config.gamma * st["decoding"]):
        bad.append("INV-4 verify-bounds: accepted <= verified <= gamma x decoding violated")
    if np.any(st["batch_tokens"] > sim.config.max_batch_tokens):
        bad.append(f"INV-5 batch-cap: batch tokens above the cap {sim.config.max_batch_tokens}: max {st['batch_tokens'].max()}")
    if np.any(st["kv_used"] > sim.config.kv_capacity):
        bad.append(f"INV-6 kv-capacity: KV use above capacity {sim.config.kv_capacity}: max {st['kv_used'].max()}")

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
    if bad:
        raise InvariantViolation("; ".join(bad))
