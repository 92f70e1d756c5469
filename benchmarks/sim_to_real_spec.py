"""Public speculative-decoding A/B runs predicted as scenario runs: the ratio of two arms, measured against predicted.

Each comparison in ``benchmarks/data/spec-runs/spec_runs.yaml`` (public runs, each with its source; provenance in
that folder's README) that the project can build is rebuilt as a planner would rebuild it, nothing fitted to it:

- step times from ``hw-profile estimate --model M --gpu G --engine E`` with the drafter tables it writes
  (``--drafters``) and the deployment's published options (``--gpus``, ``--ep``, ``--parallel``,
  ``--expert-dtype``, ``--cost``), written once and cached (``--cache``);
- each arm a closed loop at its measured concurrency (``frontier.concurrency``) on that table, with the arm's
  system (``ar``, ``static-k`` on the drafter...) and the run's workload: a steady one, or, where the source gives
  the arm's prompt count (``requests``), the finite run its benchmark client made, measured from the first request
  to the last as the client measures it (``simulator.runs.batch``);
- acceptance: the profile named in the data scaled to the measured acceptance length (AL) of ONE arm
  (``acceptance.acceptance_length`` at that arm's verified drafts, ``simulator/core/acceptance/scaling.py``), the
  number a planner reads from their engine's logs. Both arms run on that one scaling; the other arm's AL, where
  the source gives it, is never read. Another block length then gets its acceptance from the profile's shape.

Speculation against none where the source publishes no acceptance length but says which way it went (DSpark
"helps" or "loses"), and the data give the range of lengths that drafter was published at (``al_range``), is
predicted as the length at which the two arms break even: the ratio at the range's two ends, then bisection. The
sign agrees where the prediction has the measured sign at every published length, disagrees where it has the
other sign at every one, and is open where it changes sign inside the range.

The predicted ratio is arm b's throughput per GPU over arm a's. Where both arms serve the same workload, total
(input + output) and output throughput have the same ratio, so the ratio of a "total tok/s" source is predicted
from output throughput; a finite run counts its own prompts. A comparison the project cannot build (a model
shape, a GPU or an engine the estimate does not have) or that lacks a number the prediction needs (an arm's AL,
concurrency, draft length or figure) is listed with what is missing instead of a number.

    ./run python benchmarks/sim_to_real_spec.py [--markdown] [--runs SUBSTRING] [--seeds N] [--cache DIR]

Run lengths are small (one to three simulated minutes per arm, two seeds by default) to keep the whole script to a
few minutes on 2 cores; ``--seeds`` trades time for noise.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data" / "spec-runs" / "spec_runs.yaml"
sys.path.insert(0, str(ROOT))

from hw_profile.errors import HwProfileError  # noqa: E402
from hw_profile.estimate.estimate import ESTIMATE_DRAFTERS  # noqa: E402
from hw_profile.hardware.gpus import get_gpu  # noqa: E402
from hw_profile.hardware.shapes import SHAPES  # noqa: E402
from simulator.errors import UserError  # noqa: E402
from simulator.inputs.config import LoadedScenario, load_scenario  # noqa: E402
from simulator.inputs.systems import SystemSpec, resolve_systems  # noqa: E402
from simulator.runs.batch import run_batch  # noqa: E402
from simulator.runs.break_even import TOLERANCE, crossing, crossing_text  # noqa: E402
from simulator.runs.run import LoadPoint, RunSpec, run_one  # noqa: E402

ENGINES = ("vllm", "sglang", "trtllm")  # what `hw-profile estimate --engine` prices
WITHIN = 0.15  # the summary counts predicted ratios within this of the measured one
DEFAULT_RUN = {"duration_s": 60.0, "warmup_s": 15.0}


class DataError(ValueError):
    """A mistake in the data file: one line naming the file, the field and what was expected."""


# --- the data --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    run: dict
    a: str
    b: str
    kind: str
    al_from: str
    note: str = ""
    excluded: str = ""

    @property
    def key(self) -> str:
        return f"{self.run['id']}: {self.b} / {self.a}"

    def arm(self, name: str) -> dict:
        return self.run["arms"][name]

    def measured(self) -> float | None:
        """Arm b over arm a where the source gives both figures, else None."""
        va, vb = self.arm(self.a).get("value"), self.arm(self.b).get("value")
        return None if va is None or vb is None else float(vb) / float(va)

    @property
    def breaks_even(self) -> bool:
        """Speculation against none where the source gives no acceptance length but the data give the range of
        lengths the drafter was published at (``al_range``): predicted as the length at which the arms break even."""
        plain = [self.arm(n)["system"] == "ar" for n in (self.a, self.b)]
        if sum(plain) != 1 or self.run.get("al_range") is None:
            return False
        drafting = self.arm(self.b if plain[0] else self.a)
        return drafting.get("system") is not None and self.arm(self.al_from).get("al") is None

    def measured_sign(self) -> int | None:
        """+1 where arm b is faster, -1 where slower: from the figures, or from a sign the source states alone."""
        m = self.measured()
        if m is not None:
            return 0 if m == 1.0 else (1 if m > 1.0 else -1)
        sign = self.arm(self.b).get("sign")
        return None if sign is None else int(sign)


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise DataError(f"{where}: expected {what}")


def load(path: Path = DATA) -> list[Comparison]:
    """Every comparison of the data file, checked: each run names a public source, each comparison two of its arms
    and the arm whose AL sets the acceptance."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise DataError(f"{path}: expected a readable YAML file ({exc.__class__.__name__})") from None
    _need(isinstance(doc, dict) and isinstance(doc.get("runs"), list), f"{path}: runs", "a list of runs")
    out: list[Comparison] = []
    ids: set[str] = set()
    for i, run in enumerate(doc["runs"]):
        where = f"{path}: runs[{i}]"
        _need(isinstance(run, dict), where, "a mapping")
        for field in ("id", "what", "source", "model", "engine", "metric"):
            _need(isinstance(run.get(field), str) and run[field].strip() != "", f"{where}.{field}", "a non-empty text")
        _need(run["id"] not in ids, f"{where}.id", f"an id not used before ({run['id']!r} is)")
        ids.add(run["id"])
        _need("gpu" in run and (run["gpu"] is None or isinstance(run["gpu"], str)), f"{where}.gpu",
              "a GPU name, or null where the source does not state one")
        rng = run.get("al_range")
        _need(rng is None or (isinstance(rng, list) and len(rng) == 2
                              and all(isinstance(x, int | float) and not isinstance(x, bool) for x in rng)
                              and 1.0 < rng[0] < rng[1]), f"{where}.al_range",
              "two acceptance lengths [low, high] with 1 < low < high")
        arms = run.get("arms")
        _need(isinstance(arms, dict) and len(arms) >= 2, f"{where}.arms", "a mapping of at least two arms")
        for name, arm in arms.items():
            aw = f"{where}.arms.{name}"
            _need(isinstance(arm, dict) and isinstance(arm.get("label"), str), aw, "a mapping with a 'label'")
            for field in ("value", "al", "tpot_ms", "ttft_ms"):
                v = arm.get(field)
                _need(v is None or (isinstance(v, int | float) and not isinstance(v, bool) and v > 0),
                      f"{aw}.{field}", "a positive number or null")
            c = arm.get("concurrency")
            _need(c is None or (isinstance(c, int) and not isinstance(c, bool) and c > 0), f"{aw}.concurrency",
                  "a positive whole number or null")
            n = arm.get("requests")
            _need(n is None or (isinstance(n, int) and not isinstance(n, bool) and isinstance(c, int) and n >= c),
                  f"{aw}.requests", "the prompts the benchmark sent, a whole number no smaller than the concurrency")
            _need(arm.get("sign") in (None, 1, -1), f"{aw}.sign", "+1, -1 or absent")
            if arm.get("system") not in (None, "ar"):
                g = arm.get("gamma")
                _need(isinstance(g, int) and not isinstance(g, bool) and g > 0, f"{aw}.gamma",
                      f"the draft tokens of system {arm['system']!r}, a positive whole number")
        abs_ = run.get("ab")
        _need(isinstance(abs_, list) and abs_, f"{where}.ab", "a non-empty list of comparisons")
        for j, ab in enumerate(abs_):
            aw = f"{where}.ab[{j}]"
            _need(isinstance(ab, dict), aw, "a mapping")
            for field in ("a", "b"):
                _need(ab.get(field) in arms, f"{aw}.{field}", f"one of the run's arms ({', '.join(arms)})")
            _need(ab.get("al_from") in ("a", "b"), f"{aw}.al_from", "a or b (the arm whose AL sets the acceptance)")
            _need(isinstance(ab.get("kind"), str), f"{aw}.kind", "a text")
            out.append(Comparison(run, ab["a"], ab["b"], ab["kind"], ab[ab["al_from"]], ab.get("note", "") or "",
                                  ab.get("excluded", "") or ""))
    return out


def _known_gpu(name: str) -> bool:
    """Whether the estimate has ``name``, under any of its spellings (``get_gpu``'s aliases)."""
    try:
        get_gpu(name)
    except KeyError:
        return False
    return True


def missing(c: Comparison) -> list[str]:
    """What the project lacks to predict ``c`` (empty: it can): the deployment first (model shape, GPU, engine),
    then the numbers the prediction needs from the source, then a comparison left out on purpose."""
    run, out = c.run, []
    if run["model"] not in SHAPES:
        gap = run.get("shape_gap") or "its layer, attention and expert fields are not pinned here"
        out.append(f"model shape: no {run['model']} in hw_profile.hardware.shapes.SHAPES ({gap})")
    gpus = {arm.get("gpu", run["gpu"]) for arm in (c.arm(c.a), c.arm(c.b))}
    for gpu in sorted(gpus, key=str):
        if gpu is None:
            out.append("GPU: not stated in the source")
        elif not _known_gpu(gpu):
            out.append(f"GPU: no {gpu} in hw_profile.hardware.gpus.GPUS")
    if run["engine"] not in ENGINES:
        out.append(f"engine: {run['engine']} (hw-profile estimate prices {', '.join(ENGINES)})")
    for name in (c.a, c.b):
        arm = c.arm(name)
        if arm.get("value") is None and not (name == c.b and arm.get("sign") is not None):
            out.append(f"arm {arm['label']!r}: no measured figure")
        if arm.get("concurrency") is None:
            out.append(f"arm {arm['label']!r}: concurrency not published")
        if arm.get("system") is None:
            out.append(f"arm {arm['label']!r}: draft length or verify policy not published")
        drafter = arm.get("drafter") or (run.get("acceptance") or {}).get("drafter")
        tables = run.get("drafter_tables", {})
        if arm.get("system") not in (None, "ar") and drafter is not None and drafter not in ESTIMATE_DRAFTERS \
                and drafter not in tables:
            out.append(f"arm {arm['label']!r}: no {drafter} drafter table (hw-profile estimate writes "
                       f"{', '.join(ESTIMATE_DRAFTERS)} only)")
    ref = c.arm(c.al_from)
    if ref.get("system") != "ar" and ref.get("al") is None and not c.breaks_even:
        out.append(f"arm {ref['label']!r}: acceptance length not published")
    if not out:  # the source has everything; the data file must then say how to build it
        out += [f"the data file gives no {field!r} for this run" for field in ("estimate", "acceptance")
                if not isinstance(run.get(field), dict)]
    if c.excluded:
        out.append(c.excluded)
    if out and c.note:
        out.append(c.note)
    return out


# --- the tables ------------------------------------------------------------------------------------------------


def estimate_args(run: dict, arm: dict) -> list[str]:
    """`hw-profile estimate` options of an arm's table (the arm's own options override the run's)."""
    opts = {**run["estimate"], **arm.get("estimate", {})}
    args = ["--model", run["model"], "--gpu", arm.get("gpu", run["gpu"]), "--engine", run["engine"],
            "--gpus", str(opts.get("gpus", 1))]
    for key in ("ep", "parallel", "dtype", "expert_dtype", "kv_dtype", "drafters", "kernels"):
        if key in opts:
            args += [f"--{key.replace('_', '-')}", str(opts[key])]
    for name, value in sorted(opts.get("costs", {}).items()):
        args += ["--cost", f"{name}={str(value).lower() if isinstance(value, bool) else value}"]
    for name, file in sorted(opts.get("drafter_config", {}).items()):  # files in the bundled data folder
        args += ["--drafter-config", f"{name}={(DATA.parent / file).relative_to(ROOT)}"]
    return args


def _code_stamp() -> str:
    """The estimate's code, so that a table cached before it changed is written again."""
    h = hashlib.sha256()
    for path in sorted((ROOT / "hw_profile").rglob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def table_key(args: list[str]) -> str:
    """The cache key of ``hw-profile estimate ARGS``: the options, the files they name (a drafter's config, whose
    content the estimate reads) and the estimate's code."""
    h = hashlib.sha256(" ".join(args).encode())
    for arg in args:
        path = ROOT / arg.partition("=")[2]
        if path.suffix == ".json" and path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()[:12] + "-" + _code_stamp()


def table(args: list[str], cache: Path) -> Path:
    """The target's table of ``hw-profile estimate ARGS`` (drafters' beside it), written once under ``cache``."""
    out = cache / table_key(args) / "table.csv"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "hw_profile.cli", "estimate", *args, "--out", str(out)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise HwProfileError(f"hw-profile estimate {' '.join(args)}: {last}")
        print(f"  hw-profile estimate {' '.join(args)}", file=sys.stderr)
    return out


# --- the arms --------------------------------------------------------------------------------------------------


def layout(run: dict, arm: dict) -> tuple[int, int]:
    """(replicas, GPUs per replica) of an arm: a data-parallel table prices one GPU a row, a tensor-parallel one the
    estimate's ``gpus``."""
    est = {**run["estimate"], **arm.get("estimate", {})}
    return int(run.get("replicas", 1)), 1 if est.get("parallel") == "dp" else int(est.get("gpus", 1))


def scenario_doc(c: Comparison, name: str, table_path: Path, al: float | None = None) -> dict:
    """The closed-loop scenario of arm ``name`` of ``c``: its table, concurrency and system, the run's workload,
    and acceptance scaled to the AL of arm ``c.al_from`` (or to ``al``, at that arm's drafts)."""
    run, arm, ref = c.run, c.arm(name), c.arm(c.al_from)
    replicas, gpus_per_replica = layout(run, arm)
    acc = run["acceptance"]
    drafter = arm.get("drafter") or acc["drafter"]
    gamma = int(arm.get("gamma") or ref.get("gamma") or 1)
    per_replica = math.ceil(arm["concurrency"] / replicas)
    max_running = max(256, per_replica)
    hardware = {"table": str(table_path), "replicas": replicas, "gpus_per_replica": gpus_per_replica}
    if run.get("drafter_tables"):  # a drafter kind priced on a table the estimate wrote under another name
        hardware["drafter_tables"] = {k: str(table_path.with_name(f"{table_path.stem}.drafter-{v}.csv"))
                                     for k, v in run["drafter_tables"].items()}
    acceptance = {"profile": acc["profile"]}
    if ref.get("system") != "ar":
        length = ref["al"] if al is None else al
        acceptance.update(acceptance_length=float(length), acceptance_length_at=int(ref["gamma"]))
    if arm["system"] == "ar":
        system: str | dict = "ar"
    else:
        system = {"name": name, "drafter": drafter, "gamma": gamma, "policy": arm["system"]}
    return {
        "name": f"{run['id']}-{name}",
        "seed": 0,
        "hardware": hardware,
        "engine": {"max_running": max_running, "max_batch_tokens": max(8192, max_running * (1 + gamma)),
                   "prefill": run.get("prefill", "colocated"),
                   "schedule": "prefill-first" if run["engine"] == "sglang" else "mixed"},
        "acceptance": acceptance,
        "drafter": {"name": acc["drafter"], "gamma": max(gamma, int(ref.get("gamma") or 1))},
        "systems": [system],
        "workload": run.get("workload", {}),
        "frontier": {"concurrency": [int(arm["concurrency"])]},
        "run": {**DEFAULT_RUN, **run.get("run", {}), "drain_cap_s": 0.0},
    }


@dataclass(frozen=True)
class ArmResult:
    throughput_per_gpu: float  # output tok/s per GPU, mean over seeds
    tau: float  # emitted tokens per request-step, mean over the seeds' runs
    tpot_ms: float  # mean time per output token after the first (``decode_times``), mean over the seeds' runs
    ttft_ms: float  # mean time to first token (``decode_times``), mean over the seeds' runs
    # a finite run's prompt tokens over its output tokens (None: a steady closed loop, whose workload's means say it)
    prompt_per_output: float | None = None

    def counted(self, metric: str) -> float:
        """The output throughput per GPU on the basis ``metric`` counts: with each request's prompt for a "total"
        metric where a finite run's own tokens say it (a steady loop's arms serve one workload: the ratio is the
        same either way)."""
        if metric.startswith("total") and self.prompt_per_output is not None:
            return self.throughput_per_gpu * (1.0 + self.prompt_per_output)
        return self.throughput_per_gpu


def decode_times(req: dict, warmup: float, end: float) -> tuple[float, float]:
    """(TPOT, TTFT) means in ms. TPOT over the requests decoding during the window [warmup, end] (a first token
    before its end, not finished before its start), each over the tokens it had when the run stopped, so the
    long requests still running count too (the runs here stop at the window's end, without a drain); requests
    with one token have none. TTFT over the requests whose first token came inside the window."""
    first, arrival, gen, finish = req["first_token"], req["arrival"], req["generated"], req["finish"]
    last = np.where(np.isnan(finish), end, finish)
    sel = ~np.isnan(first) & (first >= warmup) & (first < end)
    many = ~np.isnan(first) & (first < end) & (last > warmup) & (gen > 1)
    tpot = float(np.mean((last[many] - first[many]) / (gen[many] - 1))) * 1e3 if many.any() else float("nan")
    ttft = float(np.mean(first[sel] - arrival[sel])) * 1e3 if sel.any() else float("nan")
    return tpot, ttft


def simulate(c: Comparison, name: str, cache: Path, work: Path, seeds: int, al: float | None = None) -> ArmResult:
    """An arm as a steady closed loop at its concurrency, or, where the source gives its prompt count
    (``requests``), as the finite run its benchmark client made (``simulator.runs.batch``)."""
    arm = c.arm(name)
    path = table(estimate_args(c.run, arm), cache)
    doc = scenario_doc(c, name, path, al)
    scn_path = work / f"{doc['name']}-al-{c.al_from if al is None else al}.yaml"
    scn_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        scn = load_scenario(scn_path)
        system = resolve_systems(scn)[0]
        if arm.get("requests") is not None:
            return _finite_arm(scn, system, arm, seeds)
        rows, times = [], []
        for seed in range(seeds):
            row, sim = run_one(scn, RunSpec(system, LoadPoint(int(arm["concurrency"])), seed, False))
            rows.append(row)
            times.append(decode_times(sim.requests.frame(), row["warmup_s"], row["sim_seconds"]))
    except UserError as exc:  # named by the data's run and arm, not by the scenario written for it
        raise UserError(f"run {c.run['id']!r}, arm {name!r}: {str(exc).replace(f'{scn_path}: ', '')}") from None
    tpot, ttft = np.mean(times, axis=0)
    return ArmResult(float(np.mean([r["throughput_per_gpu"] for r in rows])), float(np.mean([r["tau"] for r in rows])),
                     float(tpot), float(ttft))


def _finite_arm(scn: LoadedScenario, system: SystemSpec, arm: dict, seeds: int) -> ArmResult:
    """Means over seeds of the finite runs of an arm's ``requests`` prompts at its concurrency."""
    runs = [run_batch(scn, system, int(arm["concurrency"]), int(arm["requests"]), seed)[0] for seed in range(seeds)]
    return ArmResult(float(np.mean([r.output_per_gpu for r in runs])), float(np.mean([r.tau for r in runs])),
                     float(np.mean([r.tpot_ms for r in runs])), float(np.mean([r.ttft_ms for r in runs])),
                     float(np.mean([r.prompt_tokens / r.output_tokens for r in runs])))


def break_even(c: Comparison, ratio) -> dict:
    """Where ``ratio(al)`` (arm b over arm a with the drafting arm at acceptance length ``al``) crosses 1 over the
    run's ``al_range`` (``simulator.runs.break_even.crossing``: its ends, then bisection; every run shares its
    seeds). The verdict: the measured sign against the predicted one at every published length ("yes", "no"), or
    "open" where the prediction changes sign inside the range."""
    lo, hi = (float(x) for x in c.run["al_range"])
    at_lo, at_hi, point = crossing(ratio, lo, hi, TOLERANCE)
    # the sign of b over a at every published length (0: it changes inside the range)
    predicted = 1 if min(at_lo, at_hi) > 1.0 else (-1 if max(at_lo, at_hi) < 1.0 else 0)
    sign = c.measured_sign()
    verdict = "open" if predicted == 0 or sign in (None, 0) else ("yes" if predicted == sign else "no")
    return {"comparison": c, "range": (lo, hi), "ratios": (at_lo, at_hi), "break_even": point, "verdict": verdict}


def predict(comparisons: list[Comparison], cache: Path, seeds: int) -> tuple[list[dict], list[dict], list[tuple]]:
    """(predicted rows, break-even rows, unpredicted (comparison, what is missing) pairs)."""
    done: dict[tuple, ArmResult] = {}
    rows, even, gaps = [], [], []
    with tempfile.TemporaryDirectory() as tmp:

        def arm_result(c: Comparison, name: str, al: float | None = None) -> ArmResult:
            ref = c.arm(c.al_from)
            # an arm's run depends on the AL it is given only when it drafts
            drafts = c.arm(name)["system"] != "ar"
            key = (c.run["id"], name, (ref.get("al") if al is None else al, ref.get("gamma")) if drafts else None)
            if key not in done:
                done[key] = simulate(c, name, cache, Path(tmp), seeds, al)
                at = f" at AL {al:.2f}" if al is not None and drafts else ""
                print(f"  {c.run['id']} {name}{at}: {done[key].throughput_per_gpu:,.1f} tok/s/GPU", file=sys.stderr)
            return done[key]

        for c in comparisons:
            lacks = missing(c)
            if lacks:
                gaps.append((c, lacks))
                continue
            metric = c.run["metric"]
            if c.breaks_even:
                even.append(break_even(c, lambda al, c=c, m=metric: (arm_result(c, c.b, al).counted(m)
                                                                     / arm_result(c, c.a, al).counted(m))))
                continue
            got = {name: arm_result(c, name) for name in (c.a, c.b)}
            predicted = got[c.b].counted(metric) / got[c.a].counted(metric)
            measured = c.measured()
            sign = c.measured_sign()
            rows.append({"comparison": c, "measured": measured, "predicted": predicted,
                         "error": None if measured is None else predicted / measured - 1.0,
                         "sign_agrees": None if sign in (None, 0) else (predicted > 1.0) == (sign > 0),
                         "a": got[c.a], "b": got[c.b]})
    return rows, even, gaps


# --- the report ------------------------------------------------------------------------------------------------


def _ratio(x: float | None, sign: int | None = None) -> str:
    if x is not None:
        return f"{x:.2f}x"
    return {1: "> 1", -1: "< 1"}.get(sign, "-")


def summary(rows: list[dict]) -> str:
    signed = [r for r in rows if r["sign_agrees"] is not None]
    numbered = [r for r in rows if r["error"] is not None]
    right = sum(bool(r["sign_agrees"]) for r in signed)
    close = sum(abs(r["error"]) <= WITHIN for r in numbered)
    return (f"Summary: sign right on {right} of {len(signed)} comparisons; ratio within {WITHIN:.0%} on {close} of "
            f"{len(numbered)}.")


def _mean_length(spec) -> float | None:
    if isinstance(spec, int):
        return float(spec)
    if isinstance(spec, dict) and spec.get("dist") == "fixed":
        return float(spec["value"])
    if isinstance(spec, dict) and spec.get("dist") == "uniform":
        return (spec["low"] + spec["high"]) / 2.0
    return None


def in_metric(run: dict, arm: dict, res: ArmResult) -> float | None:
    """An arm's simulated throughput in the source's metric: per GPU (or rank) where it says so, else over the
    deployment's GPUs; a "total" one also counts each request's prompt: a finite run's own
    (``ArmResult.counted``), else (prompt + output) / output times the output (Little's law over the closed loop's
    requests); None where the workload's mean lengths are not known in closed form."""
    metric = run["metric"]
    value = res.counted(metric)
    if not metric.endswith(("per GPU", "per rank")):
        replicas, gpus_per_replica = layout(run, arm)
        value *= replicas * gpus_per_replica
    if not metric.startswith("total") or res.prompt_per_output is not None:
        return value
    wl = run.get("workload", {})
    prompt, output = _mean_length(wl.get("prompt", 512)), _mean_length(wl.get("output", 256))
    return None if prompt is None or output is None else value * (prompt + output) / output


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None


def _num(x: float | None, fmt: str = ",.1f") -> str:
    return "-" if x is None else format(x, fmt)


def even_summary(even: list[dict]) -> str:
    count = {v: sum(r["verdict"] == v for r in even) for v in ("yes", "no", "open")}
    return (f"Break-even: the sign right at every published acceptance length on {count['yes']} of {len(even)}, wrong "
            f"at every one on {count['no']}, changing inside the range on {count['open']}.")


def _even_lines(even: list[dict]) -> list[str]:
    lines = ["", "Speculation against none where the source publishes no acceptance length: the predicted ratio at the "
             "two ends of the range of lengths the drafter was published at (al_range), and the length at which the "
             "arms break even:", "",
             "| run | arm A | arm B | measured ratio | published AL | predicted ratio over it | break-even AL | "
             "sign agrees |", "|---|---|---|---|---|---|---|---|"]
    for r in even:
        c, (lo, hi), (at_lo, at_hi) = r["comparison"], r["range"], r["ratios"]
        point = crossing_text(r["break_even"], lo, hi, at_lo)
        lines.append(f"| {c.run['id']} ({c.kind}) | {c.arm(c.a)['label']} | {c.arm(c.b)['label']} | "
                     f"{_ratio(c.measured(), c.measured_sign())} | {lo:g}-{hi:g} | {at_lo:.2f}x-{at_hi:.2f}x | {point} | "
                     f"{r['verdict']} |")
    return [*lines, "", even_summary(even)]


def speculation_call(ratio_lo: float, ratio_hi: float | None = None) -> str:
    """What a planner is told at this load from the predicted spec-against-none ratio (or its range over the
    published acceptance lengths): the plan's rule (``simulator.outputs.verdicts``: the fewest GPUs for the traffic,
    here the most output per GPU at the arms' load) reads "turn speculation off" where no speculative arm beats no
    speculation, with its margin."""
    hi = ratio_lo if ratio_hi is None else ratio_hi
    worst, best = min(ratio_lo, hi), max(ratio_lo, hi)
    if best < 1.0:
        return f"turn speculation off ({1.0 - best:.0%} more output per GPU without it)"
    if worst >= 1.0:
        return f"speculate ({worst - 1.0:+.0%} or more)"
    return "speculate only at the higher acceptance lengths"


def _call_lines(rows: list[dict], even: list[dict]) -> list[str]:
    """Every spec-against-none comparison: what a plan at this load says, against which way the run went."""
    lines = ["", "Should it speculate? Every spec-against-none comparison, what a plan at its load says from the "
             "prediction, and which way the run went:", "",
             "| run | arms | measured | plan says | agrees |", "|---|---|---|---|---|"]
    found = 0
    for r in [*rows, *even]:
        c = r["comparison"]
        if not c.kind.startswith("spec/none"):
            continue
        found += 1
        call = speculation_call(*(r["ratios"] if "ratios" in r else (r["predicted"],)))
        sign = c.measured_sign()
        agrees = "-" if sign in (None, 0) else (
            "yes" if call.startswith("turn") == (sign < 0) and not call.startswith("speculate only") else
            "open" if call.startswith("speculate only") else "no")
        went = "a loss" if sign == -1 else "a gain" if sign == 1 else "-"
        lines.append(f"| {c.run['id']} | {c.arm(c.b)['label']} / {c.arm(c.a)['label']} | "
                     f"{_ratio(c.measured(), sign)} ({went}) | {call} | {agrees} |")
    return lines if found else []


def report(rows: list[dict], gaps: list[tuple], markdown: bool = True, even: list[dict] = ()) -> str:
    lines = ["| run | arm A | arm B | measured ratio | predicted ratio | error | sign agrees |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["comparison"]
        err = "-" if r["error"] is None else f"{r['error']:+.0%}"
        agrees = "-" if r["sign_agrees"] is None else ("yes" if r["sign_agrees"] else "no")
        lines.append(f"| {c.run['id']} ({c.kind}) | {c.arm(c.a)['label']} | {c.arm(c.b)['label']} | "
                     f"{_ratio(r['measured'], c.measured_sign())} | {r['predicted']:.2f}x | {err} | {agrees} |")
    lines += ["", summary(rows), "", "Arms, each in its source's metric, once per AL it ran at (AL: the one marked * "
              "set the acceptance of its comparison; TPOT: mean ms per output token after the first):", "",
              "| run | arm | metric | measured | simulated | TPOT ms measured | simulated | TTFT ms measured | "
              "simulated | AL measured | simulated |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    seen = set()
    for r in rows:
        c = r["comparison"]
        for name, res in ((c.a, r["a"]), (c.b, r["b"])):
            arm = c.arm(name)
            ref = c.arm(c.al_from)
            key = (c.run["id"], name, None if arm["system"] == "ar" else (ref.get("al"), ref.get("gamma")))
            if key in seen:
                continue
            seen.add(key)
            mark = "*" if name == c.al_from and arm["system"] != "ar" else ""
            al = "-" if arm.get("al") is None else f"{arm['al']:g}{mark}"
            lines.append(f"| {c.run['id']} | {arm['label']} | {c.run['metric']} | {_num(arm.get('value'), ',g')} | "
                         f"{_num(in_metric(c.run, arm, res))} | "
                         f"{_num(arm.get('tpot_ms'), 'g')} | "
                         f"{res.tpot_ms:.2f} | {_num(arm.get('ttft_ms'), 'g')} | {_num(_finite(res.ttft_ms), ',.0f')} | "
                         f"{al} | {res.tau:.2f} |")
    if even:
        lines += _even_lines(even)
    lines += _call_lines(rows, list(even))
    lines += ["", "Not predicted (what is missing):", ""]
    for c, lacks in gaps:
        lines.append(f"- {c.run['id']} ({c.kind}: {c.arm(c.b)['label']} / {c.arm(c.a)['label']}): "
                     + "; ".join(lacks) + f". [{c.run['source']}]")
    if markdown:
        return "\n".join(lines)
    plain = [ln.strip("|").strip().replace(" | ", "  ") for ln in lines if not ln.startswith("|---")]
    return "\n".join(plain)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="print markdown tables (else plain text)")
    ap.add_argument("--runs", default="", help="only runs whose id contains this")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per arm (default 2)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "dspark-sim-spec-ab",
                    help="where the estimate tables are written once (default: the system's temp folder)")
    ap.add_argument("--data", type=Path, default=DATA, help="another data file of the same form (default: the bundled one)")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        print("sim_to_real_spec: --seeds: expected 1 or more", file=sys.stderr)
        return 2
    try:
        comparisons = [c for c in load(args.data) if args.runs in c.run["id"]]
    except DataError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        rows, even, gaps = predict(comparisons, args.cache, args.seeds)
    except (UserError, HwProfileError) as exc:  # a scenario or a table the data ask for that cannot be built
        print(f"sim_to_real_spec: {args.data}: {exc}", file=sys.stderr)
        return 2
    print(report(rows, gaps, args.markdown, even))
    return 0


if __name__ == "__main__":
    sys.exit(main())
