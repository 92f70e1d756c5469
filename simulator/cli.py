"""The `simulate` command.

    simulate SCENARIO.yaml [--out DIR] [--quick] [--seed S] [--jobs N] [--set path=value]... [--records DIR2] [--fresh]
             [--check-invariants] [--backend local|ray [--address auto|HOST:PORT]]
    simulate plan SCENARIO.yaml [--sla TPS] [--attainment A] [--ttft-p99 S] [--gpu-hour-cost USD] [--max-gpus N]
             [--hardware NAME=TABLE.csv:USD_PER_GPU_HOUR]... [--force] [--out DIR] [--check-invariants] [--backend ...]
             [--set path=value]... [--per-segment [--segment-s S] [--segment-run-s S]] [--probe-replicas R]
    simulate check SCENARIO.yaml [--set path=value]...
    simulate bench PROFILE --table TABLE.csv [--gpus N] [--replicas R] [--max-running N] [--max-batch-tokens N]
             [--kv-capacity-tokens N] [--seed S] [--drain-s S] [--out DIR] [--write-scenario FILE]
    simulate break-even SCENARIO.yaml [--systems A,B] [--concurrency N]... [--range LOW HIGH] [--tolerance T]
             [--seed S] [--replicates N] [--quick] [--jobs N] [--out DIR] [--set path=value]...
    simulate fit-profile TRACE --out PROFILE.yaml
    simulate list

User mistakes (a bad scenario, a missing file, an unknown policy) print one line and exit with code 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from simulator.errors import UserError
from simulator.runs.progress import PlanProgress, progress_bar

if TYPE_CHECKING:
    from simulator.inputs.inference_perf import BenchProfile

# plan seeds per candidate: three, the fewest with a usable interval (t = 4.3); a plan of peak.yaml stays a few
# minutes on 2 cores
PLAN_REPLICATES = 3


class ScenarioFirst(click.Group):
    """`simulate FILE ...` means `simulate run FILE ...`; `simulate --from-inference-perf PROFILE ...` (or
    `--from-vllm-bench RESULT.json`) means `simulate bench ...`: a benchmark replayed in one command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        elif args and args[0].split("=")[0] in ("--from-inference-perf", "--from-vllm-bench"):
            args = ["bench", *args]
        return super().parse_args(ctx, args)


@click.group(cls=ScenarioFirst, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Simulate speculative decoding under load: `simulate SCENARIO.yaml` runs every system at every load point
    of the scenario and writes results/<scenario>/runs.csv. Add --debug anywhere to see the traceback behind a
    plug-in's one-line error."""


overrides = click.option("--set", "sets", multiple=True, metavar="PATH=VALUE",
                         help="override a scenario field (value parsed as YAML), e.g. --set run.duration_s=60")


def backend_options(f):
    f = click.option("--address", metavar="auto|HOST:PORT",
                     help="--backend ray: an existing Ray cluster [default: start a local Ray]")(f)
    f = click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                     help="where runs execute: a local process pool or Ray tasks")(f)
    return f


def default_out(scenario: Path, sets: tuple[str, ...], plan_options: tuple[str, ...] = ()) -> Path:
    """results/<stem>; results/<stem>-set-<hash of the overrides> so that overrides never overwrite the base
    scenario's results; results/<stem>-plan-<hash of the overrides and plan options> for a plan with options
    other than the defaults (``--sla 300`` and ``--sla 200`` plans never overwrite each other)."""
    out = Path("results") / scenario.stem
    if not sets and not plan_options:
        return out
    import hashlib

    kind = "plan" if plan_options else "set"
    digest = hashlib.sha256(chr(0).join((*sets, *plan_options)).encode()).hexdigest()[:8]
    return out.with_name(f"{scenario.stem}-{kind}-{digest}")


def output_dir(scenario: Path, sets: tuple[str, ...], out: Path | None, plan_options: tuple[str, ...] = ()) -> Path:
    """``--out`` when given, else the default folder (saying so when overrides or plan options moved it)."""
    if out is not None:
        return out
    out = default_out(scenario, sets, plan_options)
    if sets or plan_options:
        given = "overrides" if not plan_options else ("plan options" if not sets else "overrides and plan options")
        click.echo(f"{given} given: writing to {out} (--out to choose)", err=True)
    return out


def keep_outputs(out: Path) -> Path:
    """``out``, whose earlier outputs come back as they were if this command fails (simulator/outputs/kept.py)."""
    from simulator.outputs.kept import kept_on_failure

    click.get_current_context().with_resource(kept_on_failure(out))
    return out


def table_warnings(scn) -> list[str]:
    """What the scenario's step-time tables say against themselves (the table invariants T-1 ... T-4 of
    hw_profile.tables.checks): warned once before a run or a plan, as `simulate check` does."""
    from simulator.inputs.hardware import scenario_table_warnings
    from simulator.inputs.systems import resolve_systems

    return scenario_table_warnings(scn, {s.drafter for s in resolve_systems(scn)})


def echo_wrapped(line: str) -> None:
    """A line of the terminal's, folded at its width (a table's path is never split: a checkout's own path can
    make the line longer than any test of it assumed)."""
    from simulator.outputs.summary import fold

    click.echo("\n".join(fold(line)))


def table_lines(scn, path: str | None = None) -> list[str]:
    """The step-time tables a run or a plan prices with, each with its kind and typical error: a command's first
    lines, so that nobody reads a bound as a forecast (``path``: the table as the user named it, where that is
    not the scenario's own spelling)."""
    from simulator.inputs.hardware import load_table_set, read_table_set
    from simulator.outputs.table_error import table_line

    hw = scn.model.hardware
    facts = load_table_set(scn).provenance
    lines = [table_line(path or hw.table, facts.kind, facts.expected_error)]
    if hw.prefill_table and scn.resolve(hw.prefill_table) != scn.resolve(hw.table):
        pre = read_table_set(scn.resolve(hw.prefill_table), "hardware.prefill_table").provenance
        lines.append("prefill " + table_line(hw.prefill_table, pre.kind, pre.expected_error))
    if hw.clock == "live":
        lines[0] += " (hardware.clock live: a live source's forwards time the steps it runs)"
    return lines


def make_backend(backend: str, address: str | None, jobs: int | None):
    from simulator.runs.backends import Backend
    from simulator.runs.sweep import default_jobs

    return Backend(backend, jobs or default_jobs(), address)


@cli.command("run")
@click.argument("scenario", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="output directory [default: results/<scenario stem>]")
@click.option("--quick", is_flag=True, help="short runs for a smoke test (run.quick_duration_s)")
@click.option("--seed", type=int, help="seed of the first replicate [default: the scenario's]")
@click.option("--replicates", type=click.IntRange(min=1), help="seeds per load point [default: run.replicates]")
@click.option("--jobs", type=click.IntRange(min=1), help="parallel runs [default: all cores]")
@click.option("--records", type=click.Path(path_type=Path),
              help="also write per-request and per-step Parquet records here (stored runs are repeated to write them)")
@click.option("--fresh", is_flag=True, help="ignore stored runs: run everything again and overwrite them")
@click.option("--check-invariants", is_flag=True,
              help="check the engine's invariants (docs/model.md) on every run, stored ones run again; the first "
                   "broken one stops the command")
@click.option("--format", "formats", type=click.Choice(["vllm-bench"]), multiple=True,
              help="also write every run as a `vllm bench serve --save-result` JSON in DIR/vllm-bench/")
@backend_options
@overrides
def run_cmd(scenario: Path, out: Path | None, quick: bool, seed: int | None, replicates: int | None,
            jobs: int | None, records: Path | None, fresh: bool, check_invariants: bool, formats: tuple[str, ...],
            backend: str, address: str | None, sets: tuple[str, ...]) -> None:
    """Run a scenario (also: `simulate SCENARIO`)."""
    from simulator.inputs.config import load_scenario, unused_settings
    from simulator.inputs.hardware import load_target_table, scenario_grid_warnings
    from simulator.outputs.live_tables import write_live_tables
    from simulator.outputs.report import write_report
    from simulator.outputs.summary import flag_lines, terminal_headline, write_outputs
    from simulator.runs.plan import matching_plan
    from simulator.runs.sweep import Sweep

    scn = load_scenario(scenario, sets)
    for line in table_lines(scn):
        echo_wrapped(line)
    runner = make_backend(backend, address, jobs)
    out = keep_outputs(output_dir(scenario, sets, out))
    sweep = Sweep.plan(scn, out, quick, seed, replicates, records, fresh or check_invariants, check_invariants)
    for line in [*unused_settings(scn.model), *scenario_grid_warnings(scn), *table_warnings(scn)]:
        click.echo(f"warning: {line}", err=True)
    done_before = len(sweep.specs) - len(sweep.pending())
    if done_before:
        click.echo(f"resuming: {done_before} of {len(sweep.specs)} runs already in {out}", err=True)

    def progress(todo: int, total: int):
        return progress_bar(f"{scn.name}: runs", todo)

    try:
        sweep.execute(runner.jobs, progress, runner)
    except KeyboardInterrupt:
        kept = len(sweep.specs) - len(sweep.pending())
        click.echo(f"\ninterrupted: {kept} of {len(sweep.specs)} runs are stored in {out}; run the same command to resume",
                   err=True)
        sys.exit(130)
    runs = sweep.results()
    path = sweep.write_runs_csv(runs)
    for table in write_live_tables(out, runs):
        click.echo(f"measured step-time table: {table}", err=True)
    summary, frontier = write_outputs(out, scn, runs)
    bench = None
    if "vllm-bench" in formats:
        from simulator.outputs.vllm_bench import write_bench_results

        bench = write_bench_results(out, runs, scn.name, scn.model.traffic.kind if scn.model.traffic else None)
    capacity = matching_plan(out, scn, quick)
    report = write_report(out / "report.html", scn, runs, frontier, summary, load_target_table(scn), capacity)
    click.echo(terminal_headline(summary))
    for line in flag_lines(summary):
        click.echo(line)
    if summary["quick"]:
        click.echo("(--quick: short smoke runs; do not plan on these numbers)")
    if summary["overrides"]:
        click.echo("overrides: " + " ".join(f"--set {s}" for s in summary["overrides"]))
    click.echo(f"\nruns: {path}\nfrontier: {out / 'frontier.csv'}\nsummary: {out / 'summary.json'}\nreport: {report}")
    if bench is not None:
        click.echo(f"vllm bench serve results: {bench}")


@cli.command("plan")
@click.argument("scenario", type=click.Path(path_type=Path))
@click.option("--sla", "sla_tps", type=click.FloatRange(min=0, min_open=True), metavar="TPS",
              help="tok/s/user each request must reach [default: the scenario's first sla.tps_targets]")
@click.option("--attainment", type=click.FloatRange(0, 1, min_open=True), default=0.99, show_default=True,
              help="share of requests that must reach it")
@click.option("--ttft-p99", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              metavar="SECONDS", help="limit on TTFT p99 (sizes the prefill pool when prefill is disaggregated)")
@click.option("--gpu-hour-cost", type=click.FloatRange(min=0), default=1.0, show_default=True, metavar="USD",
              help="price of one GPU-hour, for the cost per million output tokens")
@click.option("--max-gpus", type=click.IntRange(min=1), default=64, show_default=True,
              help="largest deployment (prefill + decode) the search tries")
@click.option("--rate-tolerance", type=click.FloatRange(min=0.001, max=1.0), default=0.05, show_default=True,
              help="relative precision of the headroom search")
@click.option("--force", is_flag=True, help="plan for an --sla under 1 tok/s/user or a --ttft-p99 over 60 s (refused "
              "otherwise: most likely a unit slip)")
@click.option("--out", type=click.Path(path_type=Path), help="output directory [default: results/<scenario stem>]")
@click.option("--quick", is_flag=True, help="short runs for a smoke test (run.quick_duration_s)")
@click.option("--seed", type=int, help="seed of the first replicate [default: the scenario's]")
@click.option("--replicates", type=click.IntRange(min=1), default=PLAN_REPLICATES, show_default=True,
              help="seeds per candidate: a size meets when the 95% interval of its attainment clears the target")
@click.option("--jobs", type=click.IntRange(min=1), help="parallel runs [default: all cores]")
@click.option("--check-invariants", is_flag=True,
              help="check the engine's invariants (docs/model.md) on every run the plan reads, stored ones run "
                   "again; the first broken one stops the command")
@click.option("--probe-replicas", type=click.IntRange(min=1), metavar="R",
              help="fleet plan: measure each system's capacity per replica on R replicas, derive the full-size "
                   "counts from it and confirm them with one full-size run each (for hundreds of GPUs; raise "
                   "--max-gpus)")
@click.option("--per-segment", is_flag=True,
              help="plan each segment of a tide (traffic.segments) or a replayed trace at its own rate: GPUs per "
                   "segment and GPU-hours per day per system (day_plan.csv)")
@click.option("--segment-s", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="--per-segment, trace traffic: cut the recording into segments of about this long [default: 3600]")
@click.option("--segment-run-s", type=click.FloatRange(min=0, min_open=True), default=40.0, show_default=True,
              metavar="SECONDS", help="--per-segment: simulated seconds of each stationary run (warm-up a fifth; "
                                      "--quick: run.quick_duration_s)")
@click.option("--hardware", "hardware", multiple=True, metavar="NAME=TABLE.csv:USD_PER_GPU_HOUR",
              help="plan on this step-time table at this price per GPU-hour, repeatable: each option's plan in "
                   "OUT/hardware/NAME/, the (hardware, system) pairs ranked by cost in OUT/hardware.csv")
@click.option("--rank-bounds-together", is_flag=True,
              help="--hardware: rank roofline options (speed bounds) by cost with the others instead of after them")
@backend_options
@overrides
def plan_cmd(scenario: Path, sla_tps: float | None, attainment: float, ttft_p99: float, gpu_hour_cost: float,
             max_gpus: int, rate_tolerance: float, force: bool, out: Path | None, quick: bool, seed: int | None,
             replicates: int, jobs: int | None, check_invariants: bool, probe_replicas: int | None,
             per_segment: bool, segment_s: float | None, segment_run_s: float, hardware: tuple[str, ...],
             rank_bounds_together: bool, backend: str, address: str | None, sets: tuple[str, ...]) -> None:
    """The fewest GPUs per system at which the scenario's open-loop traffic meets the SLA."""

    from simulator.inputs.config import load_scenario
    from simulator.outputs.capacity_report import binds_line, terminal_plan, unmet_lines
    from simulator.runs.plan import Planner, Target, check_plausible, write_plan

    check_plausible(sla_tps, ttft_p99, force)
    scn = load_scenario(scenario, sets)
    runner = make_backend(backend, address, jobs)
    target = Target(tps=sla_tps or scn.model.sla.tps_targets[0], attainment=attainment, ttft_p99=ttft_p99,
                    max_gpus=max_gpus, gpu_hour_cost=gpu_hour_cost, rate_tolerance=rate_tolerance)
    options = plan_options(target, scn.model.sla.tps_targets[0])
    if replicates != PLAN_REPLICATES:
        options += (f"plan.replicates={replicates}",)
    if probe_replicas is not None:
        options += (f"plan.probe_replicas={probe_replicas}",)
    if probe_replicas is not None and (hardware or per_segment):
        raise UserError("--probe-replicas plans one fleet on the scenario's hardware; expected it without --hardware "
                        "and --per-segment")
    if per_segment:
        options += (f"plan.per_segment={segment_s!r},{segment_run_s!r}",)
    elif segment_s is not None:
        raise UserError("--segment-s cuts a trace for --per-segment; give --per-segment too")
    if hardware and per_segment:
        raise UserError("--hardware and --per-segment: a day plan runs on the scenario's hardware; expected one or "
                        "the other")
    if hardware:
        from simulator.runs.hardware_choice import check_options, option_line, parse_options

        if gpu_hour_cost != 1.0:
            raise UserError("--gpu-hour-cost: each --hardware option names its own price; expected one or the other")
        choices, warnings = check_options(scn, parse_options(hardware))
        for i, choice in enumerate(choices, 1):
            echo_wrapped(option_line(i, len(choices), choice))
        for line in warnings:
            click.echo(f"warning: {line}", err=True)
        out = keep_outputs(output_dir(scenario, sets, out, (*options, *(f"plan.hardware={h}" for h in hardware))))
        return plan_hardware_cmd(scn, out, target, runner, choices, quick, seed, replicates, check_invariants,
                                 bounds_apart=not rank_bounds_together)
    if rank_bounds_together:
        raise UserError("--rank-bounds-together ranks --hardware options; expected it with --hardware")
    for line in table_lines(scn):
        echo_wrapped(line)
    out = keep_outputs(output_dir(scenario, sets, out, options))
    for line in table_warnings(scn):
        click.echo(f"warning: {line}", err=True)
    if per_segment:
        return day_plan(scn, out, target, runner, quick, seed, replicates, check_invariants, segment_s, segment_run_s)
    bar = PlanProgress(f"{scn.name}: plan runs")
    if probe_replicas is not None:
        from simulator.runs.fleet import FleetPlanner, fleet_lines, write_fleet_plan

        planner = FleetPlanner(scn, out, target, runner, probe_replicas, quick, seed, on_stored=bar.stored,
                               replicates=replicates, check_invariants=check_invariants, on_queued=bar.queued)
        writer = write_fleet_plan  # plan.csv gains the fleet columns
    else:
        planner = Planner(scn, out, target, runner, quick, seed, on_stored=bar.stored, replicates=replicates,
                          check_invariants=check_invariants, on_queued=bar.queued)
        bar.follow([("", planner.outlook)], replicates)
        writer = write_plan
    doc = run_plan(bar, out, planner.run)
    csv, js = writer(out, doc)
    report = write_plan_report(out, scn, doc, quick, seed)
    lines = [terminal_plan(doc), *unmet_lines(doc), *binds_line(doc)]
    if "fleet" in doc:
        lines.append("\nfull-size confirmations:\n" + "\n".join(fleet_lines(doc)))
    echo_plan_end(doc, lines, quick, planner.runs, runner, f"plan: {csv}\n      {js}\nreport: {report}")


def run_plan(bar, out: Path, plan: Callable[[], dict]) -> dict:
    """Run a plan under its progress bar; Ctrl-C keeps the finished runs and says how to resume. The plan's
    document gains its wall time."""
    import time

    t0 = time.perf_counter()
    try:
        doc = plan()
    except KeyboardInterrupt:
        bar.close()
        click.echo(f"\ninterrupted: finished runs are stored in {out / '.runs'}; run the same command to resume",
                   err=True)
        sys.exit(130)
    bar.close()
    doc["wall_seconds"] = round(time.perf_counter() - t0, 1)
    return doc


def echo_plan_end(doc: dict, lines: list[str], quick: bool, runs: int, runner, files: str) -> None:
    """A plan's table lines, verdict, the policy the engine should run (per segment of a day plan), the --quick
    caveat, and what ran where."""
    from simulator.outputs.verdicts import engine_lines

    for line in lines:
        click.echo(line)
    click.echo("\n" + doc["verdict"])
    for line in engine_lines(doc):
        click.echo(line)
    if quick:
        click.echo("(--quick: short smoke runs; do not plan on these numbers)")
    click.echo(f"\n{runs} runs in {doc['wall_seconds']:.0f} s ({runner.kind}, {runner.jobs} jobs)\n{files}")


def day_plan(scn, out: Path, target, runner, quick: bool, seed: int | None, replicates: int,
             check_invariants: bool, segment_s: float | None, segment_run_s: float) -> None:
    """`simulate plan --per-segment`: the plan of every segment of the day and GPU-hours per day per system.
    Not automatic for segmented traffic: the plan without it (one fleet through the whole tide, its peak and
    transitions included) keeps its meaning and its numbers, and a day plan costs many more runs."""

    from simulator.inputs.hardware import load_target_table
    from simulator.outputs.day_report import terminal_day, unmet_day_lines
    from simulator.outputs.report import write_report
    from simulator.runs.day_plan import DayPlanner, write_day_plan

    bar = PlanProgress(f"{scn.name}: day plan runs")

    def say(line: str) -> None:
        click.echo(f"{scn.name}: {line}", err=True)

    planner = DayPlanner(scn, out, target, runner, quick, seed, on_stored=bar.stored,
                         replicates=replicates, segment_s=segment_s, segment_run_s=segment_run_s, say=say,
                         check_invariants=check_invariants, on_queued=bar.queued)
    doc = run_plan(bar, out, planner.run)
    csv, js = write_day_plan(out, doc)
    report = write_report(out / "report.html", scn, None, None, None, load_target_table(scn), None, doc)
    echo_plan_end(doc, [terminal_day(doc), *unmet_day_lines(doc)], quick, planner.planner.runs, runner,
                  f"day plan: {csv}\n          {js}\nreport: {report}")


def plan_hardware_cmd(scn, out: Path, target, runner, choices: list, quick: bool, seed: int | None,
                      replicates: int, check_invariants: bool, bounds_apart: bool = True) -> None:
    """`simulate plan --hardware ...`: the plan per hardware option, then the ranked (hardware, system) pairs."""

    from simulator.inputs.hardware import load_target_table
    from simulator.outputs.hardware_report import terminal_hardware, unmet_pair_lines
    from simulator.outputs.report import write_report
    from simulator.runs.hardware_choice import plan_hardware, shown_scenario, write_hardware
    from simulator.runs.plan import write_plan

    bar = PlanProgress(f"{scn.name}: plan runs")

    def option_done(option, variant, folder: Path, doc: dict) -> None:
        write_plan(folder, doc)
        write_plan_report(folder, variant, doc, quick, seed)
        click.echo(f"{option.name}: {doc['verdict']}", err=True)

    doc = run_plan(bar, out, lambda: plan_hardware(
        scn, out, target, runner, choices, quick, seed, replicates, check_invariants,
        on_stored=bar.stored, on_queued=bar.queued, on_plan=option_done, bounds_apart=bounds_apart,
        on_start=lambda planners: bar.follow([(f"{name}/", p.outlook) for name, p in planners], replicates)))
    csv, js = write_hardware(out, doc)
    report = write_report(out / "report.html", shown_scenario(scn, choices), None, None, None,
                          load_target_table(scn), hardware=doc)
    echo_plan_end(doc, [terminal_hardware(doc), *unmet_pair_lines(doc)], quick, doc["runs_executed"], runner,
                  f"hardware: {csv}\n          {js}\nplans: {out / 'hardware'}/*/plan.csv\nreport: {report}")


def write_plan_report(out: Path, scn, doc: dict, quick: bool, seed: int | None) -> Path:
    """report.html with the capacity section: the whole report when the scenario's sweep is stored in ``out``,
    else the capacity section alone (``simulate`` on the same scenario adds the rest)."""
    import json

    from simulator.inputs.hardware import load_target_table
    from simulator.outputs.report import write_report
    from simulator.outputs.summary import plain, write_outputs
    from simulator.runs.sweep import Sweep

    doc = json.loads(json.dumps(plain(doc)))  # as plan.json has it (NaN as null)
    sweep = Sweep.plan(scn, out, quick, seed, None)
    table = load_target_table(scn)
    if sweep.specs and not sweep.pending():
        runs = sweep.results()
        sweep.write_runs_csv(runs)
        summary, frontier = write_outputs(out, scn, runs)
        return write_report(out / "report.html", scn, runs, frontier, summary, table, doc)
    return write_report(out / "report.html", scn, None, None, None, table, doc)


def plan_options(target, scenario_sla: float) -> tuple[str, ...]:
    """The plan options that differ from their defaults, as ``name=value`` (they name the output folder)."""
    from dataclasses import fields

    from simulator.runs.plan import Target

    given = []
    for f in fields(Target):
        value = getattr(target, f.name)
        default = scenario_sla if f.name == "tps" else f.default
        if value != default:
            given.append(f"plan.{f.name}={value!r}")
    return tuple(given)


def staircase_line(graphs) -> str:
    """How the table's steps run on the engine's captured CUDA graphs (``hw_profile.tables.cuda_graphs``)."""
    if graphs is None:
        return ("step times: each step priced at its own size (the table records no CUDA-graph capture: measured "
                "steps, or a bound)")
    sizes = graphs.sizes
    shown = ", ".join(map(str, sizes[:6])) + (f", ..., {sizes[-1]}" if len(sizes) > 6 else "")
    return (f"step times: a staircase, steps padded to the next of {len(sizes)} captured CUDA-graph sizes in "
            f"{graphs.counts} ({shown}); past {sizes[-1]} eager, at least {graphs.eager_floor_ms:.3g} ms a step")


def speculative_line(mode, engine) -> str:
    """What the scenario's speculative systems run differently from its plain ones (``SpeculativeMode``)."""
    from dataclasses import replace

    if engine.speculative_max_running is not None:
        mode = replace(mode, max_running=engine.speculative_max_running)
    if not mode.changes:
        return ("speculative mode: as plain decoding (the table records no change when the engine speculates"
                + (f": {mode.engine} {mode.version})" if mode.engine else ")"))
    own_cap = engine.speculative_max_running is not None  # the scenario's own cap, not the engine's default
    return f"speculative mode (speculative systems only): {mode.describe('engine.speculative_max_running' if own_cap else None)}"


@cli.command("check")
@click.argument("scenario", type=click.Path(path_type=Path))
@overrides
def check_cmd(scenario: Path, sets: tuple[str, ...]) -> None:
    """Validate a scenario (and the files it names) without running it."""
    import numpy as np

    from simulator.core.policies import make_policy
    from simulator.inputs.config import load_scenario, unused_settings
    from simulator.inputs.hardware import (
        kv_pool_of,
        load_hardware,
        load_table_set,
        pool_prompt_lines,
        scenario_grid_warnings,
        scenario_table_warnings,
    )
    from simulator.inputs.systems import resolve_systems, speculates
    from simulator.runs.run import (
        check_engine_limits,
        check_live_clock,
        check_rules,
        load_points,
        make_source,
        prefill_mode,
    )

    scn = load_scenario(scenario, sets)
    systems = resolve_systems(scn)
    hw = load_hardware(scn, {s.drafter for s in systems})
    rules = check_rules(scn)
    for s in systems:
        check_engine_limits(scn, s)
        make_policy(s.policy, s.params, s.name)  # its parameters, as a run builds it
        check_live_clock(scn, make_source(scn, s, np.random.default_rng(0)))  # loads the profile or trace and checks the mix
    prefill_mode(scn, hw)  # reads hardware.prefill_table when one is named
    points = load_points(scn)
    m = scn.model
    for line in [*unused_settings(m), *scenario_grid_warnings(scn), *pool_prompt_lines(scn, hw),
                 *scenario_table_warnings(scn, {s.drafter for s in systems})]:
        click.echo(f"warning: {line}", err=True)
    click.echo(f"{scenario}: ok")
    click.echo(f"  systems ({len(systems)}): " + ", ".join(f"{s.name} [{s.drafter}, gamma {s.gamma}, {s.policy}]" for s in systems))
    click.echo(f"  load points ({len(points)}): " + ", ".join(p.label for p in points))
    for line in rule_lines(scn, systems, rules):
        click.echo(f"  {line}")
    click.echo(f"  runs: {len(systems) * len(points) * m.run.replicates} (x{m.run.replicates} seeds), "
               f"{m.run.duration_s:g} s simulated each ({m.run.quick_duration_s:g} s with --quick)")
    click.echo(f"  hardware: {m.hardware.replicas} replica(s) x {m.hardware.gpus_per_replica} GPU(s), table "
               f"{m.hardware.table}, KV capacity {hw.kv_capacity:,} tokens per replica")
    tables = load_table_set(scn)
    if m.engine.kv_capacity_tokens is None and tables.memory is not None:
        click.echo(f"  KV pool sized by {kv_pool_of(scn, tables, {s.drafter for s in systems}).why}")
    caveat = tables.provenance.caveat
    if caveat is not None:  # an analytic table's step times are a speed bound: say so where the table is named
        click.echo(f"  hardware table is {caveat['kind']}: {caveat['text']}")
    click.echo(f"  {staircase_line(tables.cuda_graphs)}")
    speculating = [speculates(s) for s in systems]
    if any(speculating):  # what the speculative systems run differently
        click.echo(f"  {speculative_line(hw.speculative, m.engine)}")
        if all(speculating):
            # speculation can lose (an MoE verify, a capped running batch): a plan can only say so against `ar`
            click.echo("  no system without speculation: whether speculating pays here is not compared (add one: "
                       "--set 'systems+=ar')")
    if m.engine.prefill == "disaggregated":
        pool = (f"{m.hardware.prefill_replicas} replica(s) x {m.hardware.prefill_gpus_per_replica or m.hardware.gpus_per_replica}"
                f" GPU(s), table {m.hardware.prefill_table or m.hardware.table}" if m.hardware.prefill_replicas
                else "unbounded (hardware.prefill_replicas sizes it)")
        click.echo(f"  prefill: disaggregated, pool {pool}")
    else:
        click.echo(f"  prefill: colocated, schedule {m.engine.schedule}")
    if hw.chunk_attention is not None:
        cost = hw.chunk_attention
        own = (f", and {cost.ns_per_token:+,.0f} ns per prompt token beyond T's price of it" if cost.ns_per_token
               else "")
        click.echo("  a step is one forward over all its tokens; prompt chunks' attention priced apart (table sidecar): "
                   f"{cost.ns_per_token_kv:g} ns per (chunk token, token it attends to){own}"
                   + (f" ({cost.source})" if cost.source else ""))
    click.echo(f"  acceptance: {m.acceptance.source} {m.acceptance.profile if m.acceptance.source == 'profile' else m.acceptance.trace or ''}"
               f" ({m.acceptance.confidence} confidences); SLA targets {', '.join(f'{t:g}' for t in m.sla.tps_targets)} tok/s/user")


def rule_lines(scn, systems: list, rules: dict[str, type]) -> list[str]:
    """The rules each system runs by (its policy; the scenario's router, admission and preemption), each with
    where it comes from: built-in, or the plug-in's file."""
    from simulator.core.plugins import origin
    from simulator.core.policies import resolve

    m = scn.model
    shared = ", ".join(f"{kind} {spec} ({origin(rules[kind])})" for kind, spec in (
        ("router", m.hardware.router), ("admission", m.engine.admission), ("preemption", m.engine.preemption)))
    return [f"rules of {s.name}: policy {s.policy} ({origin(resolve(s.policy)[0])}), {shared}" for s in systems]


@cli.command("bench")
@click.argument("profile", type=click.Path(path_type=Path), required=False)
@click.option("--from-inference-perf", "inference_perf", type=click.Path(path_type=Path), metavar="PROFILE",
              help="the benchmark as an inference-perf profile (the same as giving PROFILE)")
@click.option("--from-vllm-bench", "vllm_result", type=click.Path(path_type=Path), metavar="RESULT.json",
              help="the benchmark behind a `vllm bench serve --save-result` JSON (its rate, prompt count and mean "
                   "lengths)")
@click.option("--table", required=True, metavar="TABLE.csv",
              help="step-time table of one replica (hw-profile; a bundled one by its library name, e.g. "
                   "hardware/h200-qwen3-8b-bf16.csv)")
@click.option("--gpus", type=click.IntRange(min=1), default=1, show_default=True, help="GPUs per replica")
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--max-running", type=click.IntRange(min=1), default=128, show_default=True,
              help="max requests in a replica's batch (vLLM --max-num-seqs)")
@click.option("--max-batch-tokens", type=click.IntRange(min=1), default=2048, show_default=True,
              help="max tokens in one step (vLLM --max-num-batched-tokens)")
@click.option("--kv-capacity-tokens", type=click.IntRange(min=1),
              help="KV cache per replica in tokens [default: from the table's GPU memory and model]")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--drain-s", type=click.FloatRange(min=0), default=120.0, show_default=True, metavar="SECONDS",
              help="after the last stage, follow its requests this long; those still unfinished count as such")
@click.option("--out", type=click.Path(path_type=Path), help="output directory [default: results/<profile stem>]")
@click.option("--write-scenario", type=click.Path(path_type=Path), metavar="FILE",
              help="also write the scenario built from the profile here (edit it, rerun it with `simulate FILE`)")
def bench_cmd(profile: Path | None, inference_perf: Path | None, vllm_result: Path | None, table: str, gpus: int,
              replicas: int, max_running: int, max_batch_tokens: int, kv_capacity_tokens: int | None, seed: int,
              drain_s: float, out: Path | None, write_scenario: Path | None) -> None:
    """Replay a benchmark (an inference-perf profile, or the settings of a `vllm bench serve` result) and report it
    per stage as the benchmark does: E2E, TTFT, TPOT and ITL (mean, p90, p99), throughput, and an overload verdict
    (docs/benchmarks.md)."""
    from simulator.inputs.config import read_yaml
    from simulator.inputs.inference_perf import bench_scenario, read_profile
    from simulator.inputs.vllm_bench_result import is_vllm_bench_result, read_vllm_result
    from simulator.runs.bench import (
        check_table,
        run_bench,
        scenario_from_doc,
        table_flag,
        terminal_table,
        write_bench_csv,
    )
    from simulator.runs.bench import write_scenario as write_scenario_file

    given = [p for p in (profile, inference_perf, vllm_result) if p is not None]
    if len(given) != 1:
        raise UserError("bench: expected one benchmark: PROFILE, --from-inference-perf PROFILE or --from-vllm-bench "
                        f"RESULT.json (got {len(given)})")
    profile = given[0]
    # a PROFILE that is a vllm bench result is read as one
    vllm = vllm_result is not None or (inference_perf is None and profile.suffix == ".json" and profile.is_file()
                                       and is_vllm_bench_result(read_yaml(profile, "JSON")))
    bench = read_vllm_result(profile) if vllm else read_profile(profile)
    for line in bench.notes:
        click.echo(f"note: {line}", err=True)
    doc = bench_scenario(bench, table_flag(table), gpus_per_replica=gpus, replicas=replicas,
                         max_running=max_running, max_batch_tokens=max_batch_tokens,
                         kv_capacity_tokens=kv_capacity_tokens, seed=seed, drain_s=drain_s)
    out = keep_outputs(out if out is not None else Path("results") / profile.stem)
    scn = scenario_from_doc(doc, bench, out / "scenario.yaml")  # validated before anything is written
    check_table(scn, table)
    for line in table_lines(scn, table):
        echo_wrapped(line)
    try:
        with bench_progress(scn.name, bench) as tick:
            result = run_bench(scn, bench.stages, seed, tick)
    except KeyboardInterrupt:
        click.echo("\ninterrupted: nothing written", err=True)
        sys.exit(130)
    # the scenario beside the table it made, both once the run succeeded: a failed run leaves the pair it found
    write_scenario_file(out / "scenario.yaml", doc, bench)
    if write_scenario is not None:
        write_scenario_file(write_scenario, doc, bench)
    path = write_bench_csv(out, result.table)
    click.echo(terminal_table(result.table))
    if result.table["overloaded"].any():
        click.echo("overloaded: requests left unfinished or a queue growing through a stage (docs/benchmarks.md)")
    click.echo(f"\nbench: {path}\nscenario: {out / 'scenario.yaml'}"
               + (f"\nscenario (--write-scenario): {write_scenario}" if write_scenario is not None else ""))


@contextmanager
def bench_progress(name: str, bench: BenchProfile) -> Iterator[Callable[[float], None] | None]:
    """What ``simulate bench`` shows while it runs, closed when the run ends or is interrupted: a bar over the send
    window's simulated seconds, fed by the tick it yields; for a finite prompt list (one closed-loop run of unknown
    length) one line, and no tick."""
    if bench.prompt_list is not None:
        click.echo(f"bench: {bench.prompt_list[0]} prompts, at most {bench.prompt_list[1]} at a time, to the last "
                   "request", err=True)
        yield None
        return
    bar = progress_bar(f"{name}: simulated seconds", round(bench.send_seconds), unit="s", units="simulated s")
    seen = [0]

    def tick(t: float) -> None:
        step = round(t) - seen[0]
        if step > 0:
            bar.update(step)
            seen[0] += step

    try:
        yield tick
    finally:
        bar.close()


@cli.command("break-even")
@click.argument("scenario", type=click.Path(path_type=Path))
@click.option("--systems", default="", metavar="A,B", help="only these systems [default: every one on the scenario's "
              "drafter]")
@click.option("--concurrency", "concurrency", type=click.IntRange(min=1), multiple=True, metavar="N",
              help="closed-loop users, repeatable [default: the scenario's frontier.concurrency]")
@click.option("--range", "length_range", type=(float, float), metavar="LOW HIGH",
              help="accepted lengths searched [default: 1.1 to the drafts verified a step + 0.9]")
@click.option("--tolerance", type=click.FloatRange(min=0.001, max=1.0), default=0.05, show_default=True,
              help="precision of a break-even length, in tokens")
@click.option("--seed", type=int, help="seed of the first replicate [default: the scenario's]")
@click.option("--replicates", type=click.IntRange(min=1), default=1, show_default=True,
              help="seeds per run (the ratio is their means' ratio)")
@click.option("--quick", is_flag=True, help="short runs for a smoke test (run.quick_duration_s)")
@click.option("--jobs", type=click.IntRange(min=1), help="parallel searches [default: all cores]")
@click.option("--out", type=click.Path(path_type=Path), help="output directory [default: results/<scenario stem>]")
@overrides
def break_even_cmd(scenario: Path, systems: str, concurrency: tuple[int, ...], length_range, tolerance: float,
                   seed: int | None, replicates: int, quick: bool, jobs: int | None, out: Path | None,
                   sets: tuple[str, ...]) -> None:
    """The acceptance length at which each speculative system stops beating no speculation, per load."""
    import pandas as pd

    from atomic_files import atomic_write
    from simulator.runs.break_even import plan_search, rows, run_search
    from simulator.runs.sweep import default_jobs

    low, high = length_range if length_range else (None, None)
    names = tuple(n.strip() for n in systems.split(",") if n.strip())
    search, pairs, left, at, own = plan_search(scenario, sets, names, concurrency, low, high, tolerance, seed,
                                               replicates, quick)
    for line in left:
        click.echo(f"left out: {line}", err=True)
    found = []
    for b in run_search(search, pairs, jobs or default_jobs()):
        found.append(b)
        click.echo(f"break-even: {len(found)} of {len(pairs)} ({b.system} at {b.concurrency} users: {b.verdict})",
                   err=True)
    click.echo(f"Accepted length: tokens a request-step (bonus included), as a fixed block of {at} drafts logs it.\n"
               f"Searched from {search.low:g} to {search.high:g}; the scenario's own: {own:.2f} ('as set').\n"
               "Ratio: output tok/s per GPU over no speculation's at the same users.")
    click.echo(f"{'system':16s} {'users':>6s} {'no spec tok/s/GPU':>18s} {'as set':>7s} {'at ' + format(search.low, 'g'):>7s}"
               f" {'at ' + format(search.high, 'g'):>7s}  break-even")
    table = rows(found, at, own)
    for r in table:
        click.echo(f"{r['system']:16s} {r['concurrency']:6d} {r['plain_tps_per_gpu']:18,.0f} {r['as_set']:6.2f}x "
                   f"{r['ratio_low']:6.2f}x {r['ratio_high']:6.2f}x  {r['break_even']}")
    if quick:
        click.echo("(--quick: short smoke runs; do not plan on these numbers)")
    path = atomic_write(keep_outputs(output_dir(scenario, sets, out)) / "break_even.csv",
                        lambda tmp: pd.DataFrame(table).to_csv(tmp, index=False))
    click.echo(f"\nbreak-even: {path}")


@cli.command("fit-profile")
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="the acceptance profile to write (YAML)")
def fit_profile_cmd(trace: Path, out: Path) -> None:
    """Fit an acceptance profile to a recorded trace (`simulate --records` of a live run, or `dspark eval`)."""
    from simulator.core.acceptance.trace_fit import fit_profile_file

    profile = fit_profile_file(trace, out)
    for name, d in profile["drafters"].items():
        taus = ", ".join(f"{k} {v['tau']:.3f}" for k, v in d["benchmarks"].items() if k in profile["domains"].values())
        click.echo(f"{name}: gamma {d['gamma']}, full-block tau {taus}")
    click.echo(f"profile: {out}")


@cli.command("list")
def list_cmd() -> None:
    """Show the built-in scenarios, policies, drafters, acceptance profiles and hardware tables, and the installed
    plug-ins."""
    from simulator.core.acceptance import REGISTRY as SOURCES
    from simulator.core.acceptance.profile import available_profiles, load_profile
    from simulator.core.drafters import DRAFTER_KINDS
    from simulator.core.plugins import ACCEPTANCE_GROUP, POLICY_GROUP, entry_points
    from simulator.core.policies import REGISTRY, display_name
    from simulator.inputs.library import builtin_scenarios, library_dir, scenario_description

    click.echo(f"scenarios ({library_dir()}; run one with `simulate NAME`):")
    for path in builtin_scenarios():
        click.echo(f"  {path.stem:18s} {scenario_description(path)}")
    click.echo("policies:")
    for name, cls in sorted(REGISTRY.items()):
        click.echo(f"  {display_name(name, cls):18s} {one_line(cls.__doc__ or '')}")
    for name, ep in sorted(entry_points(POLICY_GROUP).items()):
        click.echo(f"  {name:18s} plug-in {ep.value}")
    click.echo("  module:Class       a researcher's policy (docs/adding-a-policy.md)")
    click.echo("acceptance sources:")
    for name, cls in sorted(SOURCES.items()):
        click.echo(f"  {name:18s} {one_line(cls.__doc__ or '')}")
    for name, ep in sorted(entry_points(ACCEPTANCE_GROUP).items()):
        click.echo(f"  {name:18s} plug-in {ep.value}")
    click.echo("  module:Class       a researcher's source (docs/adding-an-acceptance-source.md)")
    click.echo("drafters:")
    for name, kind in DRAFTER_KINDS.items():
        click.echo(f"  {name:18s} {kind.description}")
    click.echo("acceptance profiles:")
    for name in available_profiles():
        try:
            p = load_profile(name)
            click.echo(f"  {name:18s} target {p.target}; drafters {', '.join(p.drafters)}; {len(p.domains)} benchmarks")
        except UserError as exc:
            click.echo(f"  {name:18s} (unreadable: {exc})")
    click.echo(f"hardware tables ({library_dir() / 'hardware'}):")
    for csv in sorted((library_dir() / "hardware").glob("*.csv")):
        click.echo(f"  {csv.name}")


def one_line(doc: str) -> str:
    """A docstring's first sentence without its leading ``name``: tag."""
    text = " ".join(doc.split())
    if text.startswith("``") and ": " in text:
        text = text.split(": ", 1)[1]
    first = text.split(". ")[0].rstrip(".")
    return first[:100] + ("..." if len(first) > 100 else "")


def main() -> None:
    # --debug, anywhere on the line (not an option of one command): a plug-in's traceback above its one-line error
    debug = "--debug" in sys.argv[1:]
    try:
        cli(args=[a for a in sys.argv[1:] if a != "--debug"], standalone_mode=False)
    except UserError as exc:
        if debug and getattr(exc, "detail", ""):
            click.echo(exc.detail.rstrip("\n"), err=True)
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2 if exc.exit_code == 2 else exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
