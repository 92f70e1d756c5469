"""A replica's KV cache as one object: its capacity, what the running requests hold, and a prefix cache.

What it counts, in tokens (slots of the cache):

- ``tokens``: the context the running requests hold, prompt + generated each (the K a step reads: every request
  attends over its whole context, shared prefix included);
- ``shared``: the part of ``tokens`` that lies in shared prefix blocks (held once, in ``resident``);
- ``resident``: the tokens of the prefixes held in the cache, each once, whether a running request uses it or not;
- ``evictable``: the part of ``resident`` that no running request uses (kept for the next request of its group,
  evicted least-recently-released first when the cache needs the room);
- ``running``: the running requests, each reserving ``lookahead`` (gamma + 1) slots beyond its context.

KV use is ``tokens - shared + resident + running x lookahead``: a request's own context, its shared prefix once,
and prefixes nobody uses until they are evicted (they are counted as used, so "KV use never exceeds the capacity"
holds of the blocks really in memory; admission counts them as room it may take, by evicting). Without shared
prefixes ``shared`` and ``resident`` stay 0 and the use is the engine's old sum, context + lookahead per request.

**The prefix cache** (vLLM V1's automatic prefix caching, SGLang's radix cache, both on by default). Requests may
belong to a prefix group g >= 0 (``prefix``, -1 for none): each begins with the same ``shared_prefix_tokens`` T
tokens as every other request of g. The cache keeps only full blocks (vLLM hashes full blocks only), so a group's
cacheable prefix is P = floor(T / block_tokens) x block_tokens tokens, and nothing is cached when P is 0. Block
granularity applies to the prefix alone; a request's own tokens are counted exactly, as before (so runs without
prefixes give the same numbers as the engine always did).

- A request admitted while its group's prefix is resident is a *hit*: it prefills P fewer tokens (but always its
  last prompt token, as vLLM recomputes at least one: when the prompt is exactly the prefix, the last block is
  recomputed, written over the shared block rather than counted twice) and holds the prefix by reference.
- A request of a group whose prefix is not resident is a *miss*: it computes the prefix itself. At the end of the
  step whose prefill chunk takes it past P tokens the prefix becomes resident, held by that request. A second
  miss of the same group admitted before that keeps its own copy of the prefix (as vLLM keeps duplicate blocks)
  until it leaves.
- When the last request using a prefix finishes or is preempted, the prefix stays resident, unreferenced. It is
  evicted, whole, least recently released first, when admission or a growing batch needs the room, before any
  request is preempted.

Counters (per replica; ``Simulation.kv_stats`` sums them): ``hits``, ``misses`` (per admission: a preempted
request admitted again is looked up again), ``hit_tokens`` (prefill tokens the hits skipped) and ``evictions``.

Hot path: a decode step touches only the running totals (``Replica.apply_outcomes`` adds the emitted tokens to
``tokens``); per-request work happens when requests join or leave, and the prefill check runs only while some
running miss is still computing its prefix (``computing``).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

#: ``kv_shared`` of a running row that is a miss still prefilling its group's prefix (until it passes P)
COMPUTING = -1


class KVCache:
    """One replica's KV cache. ``prefix_tokens``: T, the shared prefix of every prefix group (0: none); with
    ``prefix_cache`` false, or with T below one block, prefixes are computed and held by every request alone."""

    def __init__(self, capacity: int, lookahead: int, *, block_tokens: int = 16, prefix_tokens: int = 0,
                 prefix_cache: bool = True):
        self.capacity = capacity
        self.lookahead = lookahead
        self.block_tokens = block_tokens
        self.cached = (prefix_tokens // block_tokens) * block_tokens if prefix_cache else 0  # P
        self.active = self.cached > 0
        self.tokens = 0
        self.shared = 0
        self.resident = 0
        self.evictable = 0
        self.running = 0
        self.computing = 0  # running misses not yet past P
        self.refs: dict[int, int] = {}  # resident group -> running requests holding it by reference
        self.lru: OrderedDict[int, None] = OrderedDict()  # unreferenced resident groups, least recently released first
        self.hits = 0
        self.misses = 0
        self.hit_tokens = 0
        self.evictions = 0

    # --- what is used ------------------------------------------------------------------------------------------
    def used(self) -> int:
        """KV slots in use: the running requests' own context and lookahead, and every resident prefix once."""
        return self.tokens - self.shared + self.resident + self.running * self.lookahead

    def room(self) -> int:
        """Slots admission may give out: free ones plus those of unreferenced prefixes (evicted if taken)."""
        return self.capacity - self.used() + self.evictable

    def stats(self) -> dict[str, int]:
        return {"prefix_hits": self.hits, "prefix_misses": self.misses, "prefix_hit_tokens": self.hit_tokens,
                "prefix_evictions": self.evictions}

    # --- admission ---------------------------------------------------------------------------------------------
    def claims(self, requests: dict[str, np.ndarray]) -> AdmissionClaims | None:
        """What each waiting request would need to join now, for an admission rule (None when nothing is cached:
        every request then needs its context plus the lookahead)."""
        return AdmissionClaims(self, requests) if self.active else None

    def join(self, context: np.ndarray, to_prefill: np.ndarray, groups: np.ndarray, held: int) -> np.ndarray:
        """Requests join the batch holding ``context`` tokens each (prompt + generated; ``held`` in all),
        ``to_prefill`` of them still to compute here; ``groups`` their prefix groups. Hits have ``to_prefill``
        reduced in place. Returns each one's ``kv_shared``: P for a hit, ``COMPUTING`` for a miss, 0 otherwise.
        Evict with ``make_room``."""
        n = len(context)
        self.tokens += held
        self.running += n
        shared = np.zeros(n, dtype=np.int64)
        if not self.active:
            return shared
        p, bt = self.cached, self.block_tokens
        # a request whose KV arrived whole (to_prefill 0) computes nothing here and looks nothing up
        for i, g, left in zip(range(n), groups.tolist(), to_prefill.tolist(), strict=True):
            if g < 0 or left == 0:
                continue
            refs = self.refs.get(g)
            if refs is None:
                shared[i] = COMPUTING
                self.misses += 1
                self.computing += 1
                continue
            if refs == 0:  # unreferenced until now: no longer evictable
                del self.lru[g]
                self.evictable -= p
            self.refs[g] = refs + 1
            # vLLM always computes at least the last prompt token: a hit covers whole blocks before it
            hit = min(p, (int(context[i]) - 1) // bt * bt)
            to_prefill[i] -= hit
            shared[i] = p
            self.shared += p
            self.hits += 1
            self.hit_tokens += hit
        return shared

    # --- progress and leaving ----------------------------------------------------------------------------------
    def prefill_progress(self, kv_shared: np.ndarray, groups: np.ndarray, prefilled: np.ndarray,
                         chunks: np.ndarray) -> None:
        """After a step's prefill chunks (before they are applied): rows 0..n-1 of the batch, ``prefilled`` the
        prompt tokens each held before this step. A computing miss whose chunk takes it past P makes its group's
        prefix resident, held by it, unless another request did so first (it then keeps its own copy). Called
        only while ``computing``."""
        rows = np.flatnonzero(kv_shared == COMPUTING)
        rows = rows[prefilled[rows] + chunks[rows] >= self.cached]
        p = self.cached
        for i in rows.tolist():
            g = int(groups[i])
            self.computing -= 1
            if g in self.refs:
                kv_shared[i] = 0
                continue
            self.refs[g] = 1
            self.resident += p
            self.shared += p
            kv_shared[i] = p

    def leave(self, freed: int, count: int, kv_shared: np.ndarray | None = None,
              groups: np.ndarray | None = None) -> None:
        """``count`` requests holding ``freed`` context tokens leave (finished or preempted); ``kv_shared`` and
        ``groups`` are theirs (needed only when the cache is active). A prefix nobody holds any more stays
        resident, the most recently released."""
        self.tokens -= freed
        self.running -= count
        if not self.active:
            return
        p = self.cached
        self.computing -= int(np.count_nonzero(kv_shared == COMPUTING))
        for g in groups[kv_shared == p].tolist():
            self.shared -= p
            refs = self.refs[g] - 1
            self.refs[g] = refs
            if refs == 0:
                self.lru[g] = None
                self.evictable += p

    # --- eviction ----------------------------------------------------------------------------------------------
    def evict_lru(self) -> int:
        """Evict the least recently released unreferenced prefix; returns its group."""
        g, _ = self.lru.popitem(last=False)
        del self.refs[g]
        self.resident -= self.cached
        self.evictable -= self.cached
        self.evictions += 1
        return g

    def make_room(self) -> bool:
        """Evict unreferenced prefixes, least recently released first, while the use is over the capacity.
        Returns whether it now fits."""
        while self.evictable and self.used() > self.capacity:
            self.evict_lru()
        return self.used() <= self.capacity


class AdmissionClaims:
    """For an admission rule: ``need(rid)`` is the KV slots request ``rid`` needs to join now, out of the ``free_kv``
    the rule is given, after the requests already ``take``-n in this round. A request of a group whose prefix is
    resident and held (by a running request or one taken before it) needs its context less the prefix, plus the
    lookahead; every other request its context plus the lookahead (the first to use an unreferenced resident prefix
    too: ``free_kv`` counts that prefix as room, which it takes)."""

    def __init__(self, cache: KVCache, requests: dict[str, np.ndarray]):
        self.cache = cache
        self.prompt = requests["prompt"]
        self.generated = requests["generated"]
        self.prefix = requests["prefix"]
        self.taken: set[int] = set()

    def need(self, rid: int) -> int:
        c = self.cache
        need = int(self.prompt[rid] + self.generated[rid]) + c.lookahead
        g = int(self.prefix[rid])
        if g >= 0 and (c.refs.get(g, 0) > 0 or g in self.taken):
            need -= c.cached
        return need

    def take(self, rid: int) -> None:
        """Request ``rid`` joins in this round."""
        g = int(self.prefix[rid])
        if g in self.cache.refs:
            self.taken.add(g)
