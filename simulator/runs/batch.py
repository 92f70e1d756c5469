"""A benchmark client's finite run: ``requests`` prompts, all ready at the start, sent at most ``concurrency`` at a
time (``vllm bench serve --max-concurrency C --num-prompts N``, SGLang's ``bench_serving`` likewise; an offline
batch of N prompts is C = N), measured as those clients report it: from the first request sent to the last one
finished, every request counted. The ramp-up while the first prompts prefill together and the drain while the
last requests finish with the batch thinning out are part of it; a steady closed loop (``run.run_one``) leaves
both out, which at a few waves of requests (SGLang's cookbook runs two: 32 requests at 16, 512 at 256) is most of
the difference between the two."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.core.engine import Simulation
from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario
from simulator.inputs.systems import SystemSpec
from simulator.outputs.metrics import percentile, step_metrics
from simulator.runs.run import LoadPoint, RunSpec, build, in_run, run_list


@dataclass(frozen=True)
class BatchResult:
    seconds: float  # first request sent (t = 0) to the last one finished
    requests: int  # served: every request of the list that fits the KV cache
    rejected: int  # requests that could never fit the KV cache, not served
    prompt_tokens: int
    output_tokens: int
    gpus: int
    tau: float  # emitted tokens per request-step over the run
    ttft_ms: float  # mean time to first token
    ttft_ms_p50: float
    tpot_ms: float  # mean over requests of (finish - first token) / (output - 1), requests of two tokens or more
    tpot_ms_p50: float

    @property
    def output_per_gpu(self) -> float:
        """Output tok/s per GPU over the whole run."""
        return self.output_tokens / self.seconds / self.gpus

    @property
    def total_per_gpu(self) -> float:
        """Prompt and output tok/s per GPU over the whole run (the clients' "total token throughput")."""
        return (self.prompt_tokens + self.output_tokens) / self.seconds / self.gpus


def run_batch(scn: LoadedScenario, system: SystemSpec, concurrency: int, requests: int,
              seed: int = 0) -> tuple[BatchResult, Simulation]:
    """Serve ``requests`` prompts of the scenario's workload at most ``concurrency`` at a time until the last has
    finished; ``run.duration_s`` caps the simulated time (a list unfinished by then is an error naming it)."""
    if concurrency < 1 or requests < 1:
        raise UserError(f"{scn.path}: a finite run needs concurrency >= 1 and requests >= 1, got {concurrency} and "
                        f"{requests}")
    spec = RunSpec(system, LoadPoint(concurrency, requests), seed, False)
    sim, hw, _, _ = build(scn, spec)
    with in_run(scn, spec):
        seconds = run_list(sim, scn, spec)
    req = sim.requests.data
    served = ~req["rejected"][:requests]
    first, finish = req["first_token"][:requests][served], req["finish"][:requests][served]
    arrival, out = req["arrival"][:requests][served], req["output"][:requests][served]
    many = out > 1
    tpot = (finish[many] - first[many]) / (out[many] - 1) * 1e3
    ttft = (first - arrival) * 1e3
    gpus = hw.replicas * hw.gpus_per_replica
    return BatchResult(
        seconds=seconds, requests=int(served.sum()), rejected=int((~served).sum()),
        prompt_tokens=int(req["prompt"][:requests][served].sum()), output_tokens=int(out.sum()), gpus=gpus,
        tau=step_metrics(sim.steps.frame(), 0.0, seconds, gpus)["tau"],
        ttft_ms=float(ttft.mean()), ttft_ms_p50=percentile(ttft, 50),
        tpot_ms=float(tpot.mean()) if many.any() else float("nan"), tpot_ms_p50=percentile(tpot, 50),
    ), sim
