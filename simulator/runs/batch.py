"""A benchmark client's finite run: ``requests`` prompts, all ready at the start, sent at most ``concurrency`` at a
time (``vllm bench serve --max-concurrency C --num-prompts N``, SGLang's ``bench_serving`` likewise; an offline
batch of N prompts is C = N), measured as those clients report it: from the first request sent to the last one
finished, every request counted. The ramp-up while the first prompts prefill together and the drain while the
last requests finish with the batch thinning out are part of it; a steady closed loop leaves both out, which at
a few waves of requests (SGLang's cookbook runs two: 32 requests at 16, 512 at 256) is most of the difference
between the two."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.core.engine import Simulation
from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario
from simulator.inputs.systems import SystemSpec
from simulator.runs.run import LoadPoint, RunSpec, run_one


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
    tpot_ms: float  # mean over requests of (finish - first token) / (output - 1), requests of two tokens or more

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
    finished; ``run.duration_s`` caps the simulated time (a list unfinished by then is an error naming it). The
    figures are the runs.csv row's of that point (``run.run_one``), whose window is the whole list."""
    if concurrency < 1 or requests < 1:
        raise UserError(f"{scn.path}: a finite run needs concurrency >= 1 and requests >= 1, got {concurrency} and "
                        f"{requests}")
    row, sim = run_one(scn, RunSpec(system, LoadPoint(concurrency, requests), seed, False))
    counts = row["bench"]
    return BatchResult(
        seconds=row["sim_seconds"], requests=counts["completed"],
        rejected=int(sim.requests.data["rejected"][:requests].sum()), prompt_tokens=counts["input_tokens"],
        output_tokens=counts["output_tokens"], gpus=row["gpus"], tau=row["tau"], ttft_ms=row["ttft_mean"] * 1e3,
        tpot_ms=row["tpot_mean"] * 1e3,
    ), sim
