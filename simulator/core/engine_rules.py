"""The engine's replaceable rules: where a request goes (router), which waiting requests join a running batch
(admission) and which running request leaves when the KV cache overflows (preemption).

Each is a small class with a ``name``, registered here like the verification policies, and named in a scenario
(``hardware.router``, ``engine.admission``, ``engine.preemption``) by its name, by an entry point of the groups
below, or by import string ``package.module:Class`` (simulator/core/plugins.py). The built-ins are vLLM's defaults:
least-loaded routing, first-come first-served admission without skipping, recompute preemption of the newest
request. docs/extending.md says what a rule may read and what it must return; the engine checks the answer
(``Router.pick``, ``Admission.checked``, ``Preemption.pick``), and a broken answer is one line naming the rule and
what was expected (a run adds the system, the load point and the seed: ``simulator.runs.run.in_run``).
"""

from __future__ import annotations

import inspect
from collections import deque
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from simulator.core.columns import Batch
from simulator.core.kv_cache import AdmissionClaims
from simulator.core.plugins import load_plugin
from simulator.errors import UserError

ROUTER_GROUP = "dspark_sim.routers"
ADMISSION_GROUP = "dspark_sim.admission"
PREEMPTION_GROUP = "dspark_sim.preemption"


@dataclass(frozen=True)
class RoutedRequest:
    """What a router may know of the request it routes, as a real router does when the request reaches it: no
    output length, no acceptance."""

    rid: int
    prompt_tokens: int
    prefix_group: int  # its shared-prefix group (workload.shared_prefix), -1 for none
    mix: int  # its entry in the workload's mix (a domain or benchmark)
    arrival: float  # simulated seconds


class Router:
    """Sends each new request to a replica. The base class counts each replica's load (requests running or queued
    there) as requests are routed and finish, so that a rule reads ``self.loads`` instead of scanning replicas (the
    invariant checker holds the counts to what the replicas hold). A subclass implements ``choose``; one that
    declares a parameter ``request`` is given the ``RoutedRequest`` it routes (the engine builds it only then)."""

    name: ClassVar[str] = ""

    def __init__(self, replicas: int):
        self.loads = np.zeros(replicas, dtype=np.int64)
        self.wants_request = "request" in inspect.signature(self.choose).parameters

    def choose(self) -> int:
        """The replica (index) of the next request; called only with two or more replicas."""
        raise NotImplementedError

    def pick(self, request: RoutedRequest | None = None) -> int:
        """The next request's replica (index), counted in; a ``choose`` that names no replica is one line naming
        the rule."""
        n = len(self.loads)
        i = 0 if n == 1 else self.choose(request=request) if self.wants_request else self.choose()
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= i < n:
            raise UserError(f"router {type(self).__name__}: choose() returned {i!r}; expected a replica index "
                            f"0..{n - 1} ({n} replicas)")
        self.loads[i] += 1
        return int(i)

    def sent(self, replica: int, count: int) -> None:
        """``count`` requests went to ``replica`` without a pick (it is the only one)."""
        self.loads[replica] += count

    def finished(self, replica: int, count: int) -> None:
        self.loads[replica] -= count


class RoundRobin(Router):
    name = "round-robin"

    def __init__(self, replicas: int):
        super().__init__(replicas)
        self._next = 0

    def choose(self) -> int:
        i = self._next % len(self.loads)
        self._next += 1
        return i


class LeastLoaded(Router):
    """The replica with the fewest requests running or queued; ties: the lowest index."""

    name = "least-loaded"

    def choose(self) -> int:
        return int(self.loads.argmin())  # argmin: the first of equal loads


class Admission:
    """Which waiting requests join a replica's running batch, called before every step."""

    name: ClassVar[str] = ""

    def take(self, queue: deque[int], room: int, free_kv: int, requests: dict[str, np.ndarray],
             lookahead: int) -> list[int]:
        """Remove from ``queue`` (request ids, oldest first) the requests that join now and return them in the
        order they join: at most ``room`` of them, whose contexts plus ``lookahead`` slots each fit in ``free_kv``
        KV slots. A request's context is ``requests["prompt"][rid] + requests["generated"][rid]`` (what it generated
        before a preemption is recomputed with its prompt); ``requests`` is the request log, read only.

        A rule may also take a keyword ``kv``: the engine then passes the cache's ``AdmissionClaims``
        (simulator/core/kv_cache.py), or None when no prefix is cached, and ``kv.need(rid)`` is what a request
        needs, which is less than its context plus lookahead when it shares a prefix already held; call
        ``kv.take(rid)`` for each request taken, in order. A rule without it counts whole contexts, which never
        takes more than fits (``free_kv`` counts unreferenced cached prefixes as room: the engine evicts them)."""
        raise NotImplementedError

    def checked(self, rids, removed: int, room: int, logged: int) -> list[int]:
        """``take``'s answer, held to its contract: request ids (integers, each once, of requests the log holds:
        ``logged`` of them), as many as it removed from the queue (``removed``), at most ``room``. Anything else
        is one line naming the rule; whether the ids fit the KV cache the engine checks with the cache's claims."""
        who = f"admission rule {type(self).__name__}: take()"
        try:
            if isinstance(rids, str | bytes | dict):
                raise TypeError
            out = list(rids)
        except TypeError:  # not a sequence at all (None from a missing return), or a 0-d array
            raise UserError(f"{who} returned {_shown(rids)}; expected a list of the request ids it took from the "
                            "queue") from None
        for rid in out:
            if isinstance(rid, bool) or not isinstance(rid, int | np.integer) or not 0 <= rid < logged:
                raise UserError(f"{who} returned {_shown(rid)} among its ids; expected request ids from the queue "
                                f"(integers 0..{logged - 1})")
        if len(set(out)) != len(out):
            raise UserError(f"{who} returned a request id twice ({_shown(out)}); expected each id once")
        if len(out) != removed:
            raise UserError(f"{who} returned {len(out)} request id(s) but removed {removed} from the queue; "
                            "expected it to return exactly the ids it removed")
        if len(out) > room:
            raise UserError(f"{who} took {len(out)} requests into a batch with room for {room}; expected at most "
                            f"{room}")
        return [int(r) for r in out]


class FirstComeFirstServed(Admission):
    """Oldest first, stopping at the first that does not fit: a long prompt at the head is not overtaken (vLLM)."""

    name = "fcfs"

    def take(self, queue: deque[int], room: int, free_kv: int, requests: dict[str, np.ndarray],
             lookahead: int, kv: AdmissionClaims | None = None) -> list[int]:
        prompt, generated = requests["prompt"], requests["generated"]
        rids: list[int] = []
        while queue and len(rids) < room:
            rid = queue[0]
            need = int(prompt[rid] + generated[rid]) + lookahead if kv is None else kv.need(rid)
            if need > free_kv:
                break
            rids.append(queue.popleft())
            free_kv -= need
            if kv is not None:
                kv.take(rid)
        return rids


class Preemption:
    """Which running request is evicted (its KV dropped, recomputed when it is admitted again) while the cache
    overflows. It returns to the front of its replica's queue."""

    name: ClassVar[str] = ""

    def victim(self, batch: Batch) -> int:
        """The row (0..batch.n - 1) to evict. Rows are in admission order, the last the most recently admitted;
        ``batch``'s columns (``rid``, ``prompt``, ``generated``, ``to_prefill``, ...) are read only."""
        raise NotImplementedError

    def pick(self, batch: Batch) -> int:
        """``victim``'s row, held to its contract (a row index of the batch); anything else is one line naming the
        rule."""
        i = self.victim(batch)
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= i < batch.n:
            raise UserError(f"preemption rule {type(self).__name__}: victim() returned {_shown(i)}; expected a row "
                            f"index 0..{batch.n - 1} of the running batch ({batch.n} rows)")
        return int(i)


def _shown(value, limit: int = 60) -> str:
    """A rule's answer as an error shows it: its repr, cut short (a rule may return a whole array)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Newest(Preemption):
    """The most recently admitted request (vLLM's recompute preemption)."""

    name = "newest"

    def victim(self, batch: Batch) -> int:
        return batch.n - 1


class PrefixAffinity(Router):
    """Cache-aware routing: a request of a shared-prefix group goes where its group went before, so the prefix is
    computed once per replica rather than on every one, unless that replica holds ``balance`` requests more than
    the least loaded (then the least loaded, which becomes the group's home); a request of no group goes to the
    least loaded. The trade the routers of serving stacks make (SGLang's cache-aware router, llm-d's prefix-aware
    scheduling): cache hits against load balance."""

    name = "prefix-affinity"
    balance = 32  # requests more than the least loaded replica before a group's home is given up

    def __init__(self, replicas: int):
        super().__init__(replicas)
        self.home: dict[int, int] = {}

    def choose(self, request: RoutedRequest | None = None) -> int:
        least = int(self.loads.argmin())
        if request is None or request.prefix_group < 0:
            return least
        home = self.home.get(request.prefix_group)
        if home is None or self.loads[home] - self.loads[least] > self.balance:
            self.home[request.prefix_group] = home = least
        return home


ROUTERS: dict[str, type[Router]] = {c.name: c for c in (LeastLoaded, RoundRobin, PrefixAffinity)}
ADMISSIONS: dict[str, type[Admission]] = {c.name: c for c in (FirstComeFirstServed,)}
PREEMPTIONS: dict[str, type[Preemption]] = {c.name: c for c in (Newest,)}
_KINDS = {"router": (ROUTERS, Router, ROUTER_GROUP), "admission": (ADMISSIONS, Admission, ADMISSION_GROUP),
          "preemption": (PREEMPTIONS, Preemption, PREEMPTION_GROUP)}


def resolve_rule(kind: str, spec: str | type, what: str | None = None) -> type:
    """The class of a rule (``kind``: router, admission or preemption) from a built-in name, an entry point,
    ``package.module:Class`` or the class itself. Unknown names raise a UserError that starts with ``what``."""
    registry, base, group = _KINDS[kind]
    if isinstance(spec, type):
        if not issubclass(spec, base):
            raise UserError(f"{what or kind}: {spec.__qualname__} is not a subclass of {base.__qualname__}")
        return spec
    if spec in registry:
        return registry[spec]
    return load_plugin(spec, group=group, base=base, what=what or f"{kind} {spec!r}", noun=kind,
                       known=sorted(registry))
