"""`dspark eval`: full-block speculative decoding (no scheduler, as the paper's Table 1) of held-out prompts with
each drafter, per domain: tau, conditional acceptance and prefix survival by position, confidence ECE / AUROC /
Brier raw and STS-calibrated, reliability diagrams; and the trace the simulator's trace source replays.

Outputs (in ``out_dir``, each written atomically):
- ``summary.csv``: drafter, domain, benchmark ("all" = the domain), blocks, tau, emitted tokens;
- ``positions.csv``: drafter, domain, position, conditional acceptance, prefix survival, ECE/AUROC/Brier;
- ``metrics.json``: everything above plus run settings and timing; ``summary.md``: the headline tables;
- ``trace.csv``: one row per request-step, columns ``domain, benchmark, drafter, gamma, accepted, c_1..c_gamma,
  raw_1..raw_gamma`` (``accepted`` excludes the bonus; c = STS-calibrated, raw = head output; both empty for a
  drafter without a confidence head);
- ``reliability_<drafter>.html``, ``acceptance.html``: self-contained plotly figures.
"""

from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atomic_files import atomic_write_text
from simulator.core.calibration import sts_apply

from .corpus import DOMAINS, Record
from .metrics import acceptance_metrics, confidence_metrics
from .progress import Progress
from .rollouts import Blocks, run_blocks


@dataclass
class DrafterUnderTest:
    name: str
    model: object
    temperatures: np.ndarray | None  # STS temperatures, None = uncalibrated


def _csv(rows: list[dict], columns: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return buf.getvalue()


def _fmt(x) -> str:
    return "" if x is None or (isinstance(x, float) and x != x) else f"{x:.6g}"


def evaluate(runner, tokenizer, drafters: list[DrafterUnderTest], records: list[Record], *, max_new: int,
             temperature: float, batch: int, seed: int, out_dir: Path, progress: Progress,
             settings: dict | None = None) -> dict:
    out_dir = Path(out_dir)
    results: dict = {"settings": {"temperature": temperature, "max_new": max_new, "seed": seed,
                                  "prompts": {d: sum(r.domain == d for r in records) for d in DOMAINS},
                                  **(settings or {})}, "drafters": {}}
    summary_rows, position_rows, trace_rows = [], [], []
    curves: dict[str, dict[str, list[float]]] = {d: {} for d in (*DOMAINS, "all")}
    gammas = {d.model.gamma for d in drafters}
    max_gamma = max(gammas)
    for d in drafters:
        t0 = time.monotonic()
        blocks: Blocks = run_blocks(runner, d.model, tokenizer, records, max_new=max_new, temperature=temperature,
                                    batch=batch, seed=seed, progress=progress, label=f"eval {d.name}")
        g = blocks.gamma
        raw = blocks.confidence
        cal = None if raw is None else (sts_apply(raw, d.temperatures) if d.temperatures is not None else raw)
        res = {"gamma": g, "seconds": round(time.monotonic() - t0, 2), "emitted_tokens": blocks.emitted_tokens,
               "tokens_per_second": blocks.emitted_tokens / max(blocks.seconds, 1e-9),
               "calibrated": d.temperatures is not None,
               "sts_temperatures": None if d.temperatures is None else [float(t) for t in d.temperatures],
               "domains": {}}
        for dom in (*DOMAINS, "all"):  # "all": every domain pooled (what STS was fitted on)
            sel = blocks.domain == dom if dom != "all" else np.ones(len(blocks.accepted), dtype=bool)
            if not sel.any():
                continue
            m = acceptance_metrics(blocks.accepted[sel], g, blocks.request[sel])
            if raw is not None:
                m.update(confidence_metrics(raw[sel], cal[sel], blocks.accepted[sel]))
            m["benchmarks"] = {}
            for b in sorted(set(blocks.benchmark[sel])):
                sb = sel & (blocks.benchmark == b)
                mb = acceptance_metrics(blocks.accepted[sb], g, blocks.request[sb])
                m["benchmarks"][b] = {"tau": mb["tau"], "tau_se": mb["tau_se"], "blocks": mb["blocks"]}
            res["domains"][dom] = m
            curves[dom][d.name] = m["conditional_acceptance"]
            summary_rows.append({"drafter": d.name, "domain": dom, "benchmark": "all", "blocks": m["blocks"],
                                 "tau": _fmt(m["tau"]), "tau_se": _fmt(m["tau_se"]), "gamma": g})
            for b, mb in m["benchmarks"].items():
                summary_rows.append({"drafter": d.name, "domain": dom, "benchmark": b, "blocks": mb["blocks"],
                                     "tau": _fmt(mb["tau"]), "tau_se": _fmt(mb["tau_se"]), "gamma": g})
            for k in range(g):
                row = {"drafter": d.name, "domain": dom, "position": k + 1,
                       "conditional_acceptance": _fmt(m["conditional_acceptance"][k]),
                       "prefix_survival": _fmt(m["prefix_survival"][k]), "reached": m["reached"][k]}
                for key in ("ece_raw", "ece_calibrated", "auroc_raw", "brier_raw", "brier_calibrated"):
                    row[key] = _fmt(m[key][k]) if key in m else ""
                position_rows.append(row)
        for i in range(len(blocks.accepted)):
            row = {"domain": blocks.domain[i], "benchmark": blocks.benchmark[i], "drafter": d.name, "gamma": g,
                   "accepted": int(blocks.accepted[i])}
            for j in range(max_gamma):
                row[f"c_{j + 1}"] = _fmt(cal[i, j]) if cal is not None and j < g else ""
                row[f"raw_{j + 1}"] = _fmt(raw[i, j]) if raw is not None and j < g else ""
            trace_rows.append(row)
        if raw is not None:
            from .report import reliability_html

            panels = {dom: (raw[blocks.domain == dom], cal[blocks.domain == dom], blocks.accepted[blocks.domain == dom])
                      for dom in DOMAINS if (blocks.domain == dom).any()}
            panels["all"] = (raw, cal, blocks.accepted)
            positions = sorted({1, (g + 1) // 2, g} | ({3} if g >= 5 else set()))
            reliability_html(out_dir / f"reliability_{d.name}.html",
                             f"{d.name}: prefix-survival reliability, raw vs STS-calibrated", panels, positions)
        results["drafters"][d.name] = res
        taus = ", ".join(f"{dom} {res['domains'][dom]['tau']:.2f}" for dom in res["domains"])
        progress(f"eval {d.name}: tau {taus}")

    from .report import acceptance_html, markdown_summary

    atomic_write_text(out_dir / "summary.md", markdown_summary(results))
    acceptance_html(out_dir / "acceptance.html", "Conditional acceptance by draft position", curves)
    atomic_write_text(out_dir / "summary.csv", _csv(summary_rows, ["drafter", "domain", "benchmark", "blocks", "tau",
                                                                   "tau_se", "gamma"]))
    atomic_write_text(out_dir / "positions.csv", _csv(position_rows, [
        "drafter", "domain", "position", "conditional_acceptance", "prefix_survival", "reached", "ece_raw",
        "ece_calibrated", "auroc_raw", "brier_raw", "brier_calibrated"]))
    trace_cols = (["domain", "benchmark", "drafter", "gamma", "accepted"]
                  + [f"c_{j + 1}" for j in range(max_gamma)] + [f"raw_{j + 1}" for j in range(max_gamma)])
    atomic_write_text(out_dir / "trace.csv", _csv(trace_rows, trace_cols))
    atomic_write_text(out_dir / "metrics.json", json.dumps(results, indent=2))
    return results


# ----------------------------------------------------------------------------------------------------------- CLI

import click  # noqa: E402

from simulator.errors import UserError  # noqa: E402

from .user_errors import reports_user_errors  # noqa: E402


@click.command("eval")
@click.option("--size", default=None,
              help="Which built tiny world to evaluate [default: the one built; full when both are].")
@click.option("--data-dir", default=None, help="Data directory [default: $DSPARK_DATA or .dspark-data].")
@click.option("--drafters", default="dspark,dflash,eagle3", show_default=True,
              help="Comma-separated drafters of the tiny world (dspark, dflash, eagle3, dspark-gated, dspark-rnn).")
@click.option("--target", "target_dir", default=None, help="A local Qwen3 target directory instead of the tiny one.")
@click.option("--drafter", "drafter_dirs", multiple=True,
              help="A DeepSpec-format drafter directory (repeatable); replaces --drafters.")
@click.option("--per-domain", default=None, type=int, help="Held-out prompts per domain [default: world size's].")
@click.option("--max-new", default=None, type=int, help="Tokens generated per prompt [default: world size's].")
@click.option("--temperature", default=1.0, show_default=True, type=float, help="0 = greedy.")
@click.option("--batch", default=None, type=int, help="Requests decoded together [default: world size's].")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--device", default="cpu", show_default=True)
@click.option("--dtype", default="float32", show_default=True, help="float32, bfloat16, float16.")
@click.option("--out", "out_dir", default=None, help="Output directory [default: DATA_DIR/SIZE/eval].")
@click.option("--threads", default=None, type=int, help="CPU threads for torch [default: torch's choice].")
@click.option("--quiet", is_flag=True)
@reports_user_errors
def eval_command(size, data_dir, drafters, target_dir, drafter_dirs, per_domain, max_new, temperature, batch, seed,
                 device, dtype, out_dir, threads, quiet):
    """Full-block evaluation on held-out prompts: tau, acceptance by position, calibration, trace."""
    from .build import quiet_transformers, set_threads
    from .checkpoints import load_drafter
    from .corpus import load_corpus
    from .rollouts import eval_records
    from .target import TargetRunner, load_target
    from .world import size_to_use, world_paths, world_size

    quiet_transformers()
    set_threads(threads)
    size = size_to_use(size, data_dir)  # the held-out prompts always come from a built tiny world
    spec = world_size(size)
    paths = world_paths(data_dir, size)
    if temperature < 0:
        raise UserError(f"--temperature: {temperature} is negative; expected >= 0")
    target, tokenizer = load_target(target_dir or paths.target, device=device, dtype=dtype)
    if drafter_dirs:
        dirs = [Path(p) for p in drafter_dirs]
    else:
        dirs = [paths.drafter(k.strip()) for k in drafters.split(",") if k.strip()]
        for p in dirs:
            if not p.is_dir():
                raise UserError(f"--drafters: {p} not found; run `dspark build-tiny --size {size}` first "
                                "(add --variants for dspark-gated and dspark-rnn)")
    under_test: list[DrafterUnderTest] = []
    layer_ids = None
    for p in dirs:
        model, cal = load_drafter(p, target=target, device=device, dtype=dtype)
        ids = list(model.config.target_layer_ids)
        if layer_ids is not None and ids != layer_ids:
            raise UserError(f"{p / 'config.json'}: field target_layer_ids is {ids}; every drafter of one "
                            f"evaluation must read the same target layers ({layer_ids})")
        layer_ids = ids
        name = model.config.kind
        if any(u.name == name for u in under_test):
            name = f"{name}:{p.name}"
        temps = np.array(cal["temperatures"]) if cal else None
        under_test.append(DrafterUnderTest(name, model, temps))
    records = eval_records(load_corpus(paths.corpus), "eval", per_domain or spec.eval_prompts_per_domain)
    runner = TargetRunner(target, layer_ids)
    progress = Progress(quiet=quiet)
    out = Path(out_dir) if out_dir else paths.eval_dir
    results = evaluate(runner, tokenizer, under_test, records, max_new=max_new or spec.eval_max_new,
                       temperature=temperature, batch=batch or spec.eval_batch, seed=seed, out_dir=out,
                       progress=progress, settings={"device": device, "dtype": dtype,
                                                    "target": str(target_dir or paths.target)})
    brief = {name: {dom: round(m["tau"], 3) for dom, m in r["domains"].items()}
             for name, r in results["drafters"].items()}
    click.echo(json.dumps({"out": str(out), "tau": brief}))
