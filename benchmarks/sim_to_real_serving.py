"""Real vLLM benchmark runs predicted end to end: plain serving (system ``ar``), uncalibrated.

Each of the sixteen runs in ``benchmarks/data/serving-runs/measured.csv`` (vLLM v0.15.1 on H100 SXM, driven by
inference-perf; provenance in that folder's README) is rebuilt as a scenario, as a planner would: the table from
``hw-profile estimate --model CONFIG.json --gpu H100 --gpus TP --engine vllm --drafters ''`` at its defaults, the
benchmark's engine limits (max_num_seqs 128 -> ``max_running``, max_num_batched_tokens 2048 ->
``max_batch_tokens``, no per-request chunk cap as vLLM V1 runs), its traffic (constant-rate Poisson stages that
stop sending at their end) and its workload (fixed prompt and output lengths, shared system prompts). Nothing is
fitted to these runs. Per run and stage it prints the simulator's E2E, TTFT and TPOT (mean; E2E and TTFT p90)
against the measured ones with signed errors, BLIS's trained model beside ours where its records have the run, the
MAPE per metric over the runs vLLM served, and whether each run came out overloaded (vLLM's four reasoning runs
timed most of their requests out).

TPOT here is (E2E - TTFT) / (output_len - 1) per request with the profile's output_len, on both sides (the
client's re-tokenised output count is not what vLLM generated).

    ./run python benchmarks/sim_to_real_serving.py [--runs SUBSTRING] [--csv OUT.csv]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "serving-runs"
sys.path.insert(0, str(HERE.parent))

from hw_profile.engine_costs import engine_defaults  # noqa: E402
from hw_profile.estimate import Deployment, write_estimate_set  # noqa: E402
from hw_profile.gpus import get_gpu  # noqa: E402
from hw_profile.shapes import get_shape  # noqa: E402
from simulator.inputs.config import Traffic, Workload, load_scenario  # noqa: E402
from simulator.inputs.systems import resolve_systems  # noqa: E402
from simulator.runs.run import LoadPoint, RunSpec, run_one  # noqa: E402

DRAIN_S = 300.0  # inference-perf's request timeout: a request unfinished this long after the last stage failed
OVERLOAD_TTFT_MS = 10_000.0


def estimate(config: str, tp: int, out: Path) -> Path:
    """The planner's table: ``hw-profile estimate`` at its defaults for vLLM on H100."""
    path = out / f"{Path(config).stem}-tp{tp}.csv"
    if not path.exists():
        shape = get_shape(str(DATA / config))
        dep = Deployment(gpu=get_gpu("H100"), gpus=tp, engine="vllm", costs=engine_defaults("vllm"))
        write_estimate_set(shape, dep, path, drafters=[])
    return path


def scenario(run: pd.DataFrame, table: Path, out: Path) -> Path:
    """The run rebuilt as a scenario file."""
    r = run.iloc[0]
    stages = [tuple(float(x) for x in s.split("x")) for s in r["stages"].split(";")]
    total = sum(d for _, d in stages)
    traffic = {"kind": "poisson", "segments": [{"rate": rate, "duration_s": d} for rate, d in stages]}
    if "repeat" in Traffic.model_fields:  # stages stop at their end, exactly rate x duration each
        traffic.update(repeat=False, exact_counts=True)
    workload = {"prompt": {"dist": "fixed", "value": int(r["system_prompt_len"] + r["question_len"])},
                "output": {"dist": "fixed", "value": int(r["output_len"])}}
    if "shared_prefix" in Workload.model_fields:
        workload["shared_prefix"] = {"tokens": int(r["system_prompt_len"]), "groups": int(r["prefix_groups"])}
    scn = {
        "name": r["run"], "seed": 0,
        "hardware": {"table": str(table), "replicas": 1, "gpus_per_replica": int(r["tp"])},
        "engine": {"max_running": int(r["max_num_seqs"]), "max_batch_tokens": int(r["max_num_batched_tokens"]),
                   "prefill_chunk": int(r["max_num_batched_tokens"]), "schedule": "mixed", "prefill": "colocated"},
        "systems": ["ar"], "workload": workload, "traffic": traffic,
        "run": {"duration_s": total, "warmup_s": 0.0, "drain_cap_s": DRAIN_S},
        "sla": {"tps_targets": [10]},
    }
    path = out / f"{r['run']}.yaml"
    path.write_text(yaml.safe_dump(scn, sort_keys=False))
    return path


def simulate(path: Path) -> tuple[pd.DataFrame, float]:
    """Every request of the run's one open-loop simulation, and the time its last stage ended."""
    scn = load_scenario(path)
    system = resolve_systems(scn)[0]
    _, sim = run_one(scn, RunSpec(system, LoadPoint(None), 0, False))
    return pd.DataFrame(sim.requests.frame()), float(scn.model.run.duration_s)


def stage_metrics(req: pd.DataFrame, edges: list[float], output_len: int, end: float) -> list[dict]:
    """Per stage (by arrival) and for the whole run: E2E, TTFT, TPOT of the finished requests, in ms, and the
    share of the stage's requests unfinished ``DRAIN_S`` after the last stage (inference-perf's failures)."""
    arrived = req["arrival"].to_numpy()
    sent = arrived < end
    done = ~np.isnan(req["finish"].to_numpy()) & (req["finish"].to_numpy() <= end + DRAIN_S)
    e2e = (req["finish"] - req["arrival"]).to_numpy() * 1e3
    ttft = (req["first_token"] - req["arrival"]).to_numpy() * 1e3
    tpot = (e2e - ttft) / (output_len - 1)
    out = []
    bounds = [*zip(edges[:-1], edges[1:], strict=True), (edges[0], edges[-1])]
    for i, (lo, hi) in enumerate(bounds):
        inside = sent & (arrived >= lo) & (arrived < hi)
        ok = inside & done
        stage = i if i < len(edges) - 1 else -1
        out.append({"stage": stage, "sim_requests": int(inside.sum()),
                    "sim_unfinished": float(1 - ok.sum() / max(inside.sum(), 1)),
                    "sim_e2e_mean_ms": float(np.mean(e2e[ok])) if ok.any() else np.nan,
                    "sim_e2e_p90_ms": float(np.percentile(e2e[ok], 90)) if ok.any() else np.nan,
                    "sim_ttft_mean_ms": float(np.mean(ttft[ok])) if ok.any() else np.nan,
                    "sim_ttft_p90_ms": float(np.percentile(ttft[ok], 90)) if ok.any() else np.nan,
                    "sim_tpot_mean_ms": float(np.mean(tpot[ok])) if ok.any() else np.nan})
    return out


def predict(measured: pd.DataFrame, work: Path) -> pd.DataFrame:
    rows = []
    for run, grp in measured.groupby("run", sort=False):
        r = grp.iloc[0]
        table = estimate(r["config"], int(r["tp"]), work)
        req, end = simulate(scenario(grp, table, work))
        durations = [float(s.split("x")[1]) for s in r["stages"].split(";")]
        edges = list(np.concatenate([[0.0], np.cumsum(durations)]))
        for m in stage_metrics(req, edges, int(r["output_len"]), end):
            real = grp[grp["stage"] == m["stage"]]
            if len(real):
                rows.append({**real.iloc[0].to_dict(), **m})
        print(f"  {run}: simulated", file=sys.stderr)
    out = pd.DataFrame(rows)
    out["tpot_mean_ms"] = (out["e2e_mean_ms"] - out["ttft_mean_ms"]) / (out["output_len"] - 1)
    # overloaded: more than 5% of the requests failed (timed out), or the queue held them past any interactive
    # bound (TTFT p90 over 10 s); the simulator's verdict by the same rule, its unfinished requests as failures
    out["overloaded"] = ((out["failures"] > 0.05 * (out["successes"] + out["failures"]))
                         | (out["ttft_p90_ms"] > OVERLOAD_TTFT_MS))
    out["sim_overloaded"] = (out["sim_unfinished"] > 0.05) | (out["sim_ttft_p90_ms"] > OVERLOAD_TTFT_MS)
    for k in ("e2e_mean", "e2e_p90", "ttft_mean", "ttft_p90", "tpot_mean"):
        out[f"err_{k}"] = out[f"sim_{k}_ms"] / out[f"{k}_ms"] - 1.0
    blis_tpot = (out["blis_e2e_mean_ms"] - out["blis_ttft_mean_ms"]) / (out["output_len"] - 1)
    out["blis_err_e2e_mean"] = pd.to_numeric(out["blis_e2e_mean_ms"], errors="coerce") / out["e2e_mean_ms"] - 1.0
    out["blis_err_ttft_mean"] = pd.to_numeric(out["blis_ttft_mean_ms"], errors="coerce") / out["ttft_mean_ms"] - 1.0
    out["blis_err_tpot_mean"] = pd.to_numeric(blis_tpot, errors="coerce") / out["tpot_mean_ms"] - 1.0
    return out


def pct(x: float) -> str:
    return "" if pd.isna(x) else f"{x:+.0%}"


def report(out: pd.DataFrame) -> None:
    cols = ["e2e_mean", "e2e_p90", "ttft_mean", "ttft_p90", "tpot_mean"]
    print("| run | stage | vLLM E2E ms | sim | err | E2E p90 err | vLLM TTFT ms | sim | err | TTFT p90 err | "
          "vLLM TPOT ms | sim | err | BLIS E2E / TTFT / TPOT err | overloaded: vLLM / sim |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for _, r in out.iterrows():
        stage = "all" if r["stage"] == -1 else str(int(r["stage"]))
        blis = " / ".join(pct(r[f"blis_err_{k}"]) for k in ("e2e_mean", "ttft_mean", "tpot_mean"))
        print(f"| {r['run'][16:]} | {stage} | {r['e2e_mean_ms']:,.0f} | {r['sim_e2e_mean_ms']:,.0f} | "
              f"{pct(r['err_e2e_mean'])} | {pct(r['err_e2e_p90'])} | {r['ttft_mean_ms']:,.1f} | "
              f"{r['sim_ttft_mean_ms']:,.1f} | {pct(r['err_ttft_mean'])} | {pct(r['err_ttft_p90'])} | "
              f"{r['tpot_mean_ms']:.2f} | {r['sim_tpot_mean_ms']:.2f} | {pct(r['err_tpot_mean'])} | {blis} | "
              f"{'yes' if r['overloaded'] else 'no'} / {'yes' if r['sim_overloaded'] else 'no'} |")
    whole = out[out["stage"] == -1]
    served = whole[~whole["overloaded"]]
    print()
    print(f"Whole runs vLLM served ({len(served)}), uncalibrated: MAPE " + ", ".join(
        f"{k} {served[f'err_{k}'].abs().mean():.1%}" for k in cols))
    blis = served.dropna(subset=["blis_err_e2e_mean"])
    if len(blis):
        print(f"  the {len(blis)} of them in BLIS's records: ours E2E {blis['err_e2e_mean'].abs().mean():.1%}, "
              f"TTFT {blis['err_ttft_mean'].abs().mean():.1%}, TPOT {blis['err_tpot_mean'].abs().mean():.1%}; "
              f"BLIS (trained) E2E {blis['blis_err_e2e_mean'].abs().mean():.1%}, "
              f"TTFT {blis['blis_err_ttft_mean'].abs().mean():.1%}, TPOT {blis['blis_err_tpot_mean'].abs().mean():.1%}")
    false_sat = int((served["sim_overloaded"]).sum())
    flagged = int((whole["overloaded"] & whole["sim_overloaded"]).sum())
    print(f"Overload verdicts: {false_sat} run(s) vLLM served came out overloaded; {flagged} of "
          f"{int(whole['overloaded'].sum())} vLLM overloads flagged overloaded")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="", help="only runs whose name contains this")
    ap.add_argument("--csv", type=Path, help="write every row with its errors here")
    args = ap.parse_args(argv)
    measured = pd.read_csv(DATA / "measured.csv")
    measured = measured[measured["run"].str.contains(args.runs, regex=False)]
    with tempfile.TemporaryDirectory() as tmp:
        out = predict(measured, Path(tmp))
    report(out)
    if args.csv:
        out.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
