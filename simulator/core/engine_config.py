"""What an engine is, in one object: the limits and rules of each replica, how many replicas, and where prompts are
prefilled. A scenario's ``engine`` and ``hardware`` sections become one (simulator/runs/run.py); a test or a notebook
writes one in a line (docs/extending.md)."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.core.engine_rules import resolve_rule
from simulator.core.prefill import Disaggregated

SCHEDULES = ("mixed", "prefill-first")  # engine.schedule (simulator/inputs/config.py)


@dataclass(frozen=True)
class EngineConfig:
    """One deployment's engine.

    max_running: requests in one replica's running batch; max_batch_tokens: tokens in one forward (decode, verify
    and prompt chunks); kv_capacity: KV-cache slots of one replica; gamma: draft tokens proposed per request and
    step (0: no drafter); every running request reserves gamma + 1 lookahead slots beyond its context.
    prefill_chunk: most prompt tokens of one request per step (``schedule`` mixed); schedule: ``mixed`` (prompt
    chunks ride in decode steps) or ``prefill-first`` (prefill-only steps while any prompt waits); stall_ms:
    scheduling stall of policies that read this step's confidences before the verify can launch.
    replicas, router, admission, preemption: how many replicas and the rules (simulator/core/engine_rules.py, by name,
    import string or class; held as the class once built, so a run finds each rule once). prefill: None (prompts
    prefill on the decode replica, colocated) or a ``Disaggregated`` pool.
    request_ms: what a request spends outside the forwards before it joins a queue (API server, tokenisation; the
    first token's trip back is counted here too, since it adds the same to TTFT and E2E).
    schedule_ahead: the engine schedules each step while the one before it runs (vLLM's asynchronous scheduling,
    SGLang's and TensorRT-LLM's overlap schedulers): a request that joins the queue during a step can join the
    batch only in the step after the next, except when nothing runs.
    shared_prefix_tokens: T, the tokens every request of a prefix group (``Simulation.submit``'s ``prefix``) shares
    with the others of its group; prefix_cache: keep computed prefixes (their full blocks of ``block_tokens``) in
    the KV cache for later requests of the group, as vLLM V1 and SGLang do by default (simulator/core/kv_cache.py;
    only where prompts are prefilled: with a disaggregated pool the decode replicas cache nothing).
    """

    max_running: int
    max_batch_tokens: int
    kv_capacity: int
    gamma: int = 0
    prefill_chunk: int = 2048
    schedule: str = "mixed"
    stall_ms: float = 0.0
    replicas: int = 1
    router: str | type = "least-loaded"
    admission: str | type = "fcfs"
    preemption: str | type = "newest"
    prefill: Disaggregated | None = None
    request_ms: float = 0.0
    schedule_ahead: bool = False
    shared_prefix_tokens: int = 0
    prefix_cache: bool = True
    block_tokens: int = 16

    def __post_init__(self):
        for name in ("max_running", "max_batch_tokens", "kv_capacity", "prefill_chunk", "replicas"):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineConfig.{name} must be at least 1, got {getattr(self, name)}")
        if self.request_ms < 0:
            raise ValueError(f"EngineConfig.request_ms must be >= 0, got {self.request_ms}")
        if self.block_tokens < 1:
            raise ValueError(f"EngineConfig.block_tokens must be at least 1, got {self.block_tokens}")
        if self.shared_prefix_tokens < 0:
            raise ValueError(f"EngineConfig.shared_prefix_tokens must be >= 0, got {self.shared_prefix_tokens}")
        if self.gamma < 0:
            raise ValueError(f"EngineConfig.gamma must be >= 0, got {self.gamma}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"EngineConfig.schedule {self.schedule!r}: expected one of {', '.join(SCHEDULES)}")
        for kind in ("router", "admission", "preemption"):
            object.__setattr__(self, kind, resolve_rule(kind, getattr(self, kind), what=f"EngineConfig.{kind}"))

    @property
    def lookahead(self) -> int:
        """KV slots each running request reserves beyond its context: gamma draft tokens + one target token."""
        return self.gamma + 1
