"""Real vLLM benchmark runs predicted end to end: plain serving (system ``ar``), uncalibrated.

Each of the sixteen runs in ``benchmarks/data/serving-runs/measured.csv`` (vLLM v0.15.1 on H100 SXM, driven by
inference-perf; provenance in that folder's README) is rebuilt as a scenario, as a planner would: the table from
``hw-profile estimate --model CONFIG.json --gpu H100 --gpus TP --engine vllm --drafters ''`` at its defaults, the
benchmark's engine limits (max_num_seqs 128 -> ``max_running``, max_num_batched_tokens 2048 ->
``max_batch_tokens``, no per-request chunk cap as vLLM V1 runs), its traffic (constant-rate Poisson stages that
stop sending at their end) and its workload (fixed prompt and output lengths, shared system prompts). Nothing is
fitted to these runs. Per run and stage it prints the simulator's E2E, TTFT and TPOT (mean; E2E and TTFT p90 and
p99) against the measured ones with signed errors, BLIS's trained model beside ours where its records have the run,
the MAPE per metric over the runs and over the stages vLLM served, and whether each run came out overloaded (vLLM's
four reasoning runs timed most of their requests out).

Each run goes through the path a planner takes, `simulate bench PROFILE --table TABLE`: the run's inference-perf
profile (rebuilt from its recorded settings) is read by ``simulator.inputs.inference_perf``, replayed by
``simulator.runs.bench`` and reported per stage by ``simulator.outputs.bench_table``. TPOT is (E2E - TTFT) /
(output_len - 1) per request with the profile's output_len, on both sides (the client's re-tokenised output count
is not what vLLM generated). Overloaded, vLLM: more than 5% of requests failed (timed out) or TTFT p90 over 10 s;
the simulator: ``simulate bench``'s own verdict (more than 5% unfinished, or a queue growing through a stage), or
TTFT p90 over 10 s.

    ./run python benchmarks/sim_to_real_serving.py [--runs SUBSTRING] [--csv OUT.csv]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "serving-runs"
sys.path.insert(0, str(HERE.parent))

from hw_profile.calibrate.prior_fit import apply_fit, fit_on_prior  # noqa: E402
from hw_profile.estimate.engine_costs import engine_defaults  # noqa: E402
from hw_profile.estimate.estimate import Deployment, write_estimate_set  # noqa: E402
from hw_profile.hardware.gpus import get_gpu  # noqa: E402
from hw_profile.hardware.shapes import get_shape  # noqa: E402
from hw_profile.tables.step_table import StepTable  # noqa: E402
from simulator.inputs.inference_perf import bench_scenario, read_profile  # noqa: E402
from simulator.runs.bench import run_bench, scenario_from_doc  # noqa: E402

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


def profile(run: pd.DataFrame, out: Path) -> Path:
    """The run's inference-perf profile, rebuilt from its recorded settings (the fields ``simulate bench`` reads)."""
    r = run.iloc[0]
    stages = [{"rate": float(rate), "duration": float(d)}
              for rate, d in (s.split("x") for s in r["stages"].split(";"))]
    doc = {"load": {"type": "constant", "stages": stages},
           "data": {"type": "shared_prefix",
                    "shared_prefix": {"num_unique_system_prompts": int(r["prefix_groups"]),
                                      "num_users_per_system_prompt": int(r["users_per_prefix"]),
                                      "system_prompt_len": int(r["system_prompt_len"]),
                                      "question_len": int(r["question_len"]), "output_len": int(r["output_len"])}},
           "server": {"type": "vllm", "ignore_eos": True}}
    path = out / f"{r['run']}.json"
    path.write_text(json.dumps(doc))
    return path


def simulate(run: pd.DataFrame, table: Path, work: Path, request_ms: float | None = None) -> pd.DataFrame:
    """``simulate bench`` on the run's profile and table with its engine limits: the per-stage table
    (``request_ms``: the scenario's ``engine.request_ms``, else the table's)."""
    r = run.iloc[0]
    bench = read_profile(profile(run, work))
    doc = bench_scenario(bench, str(table), gpus_per_replica=int(r["tp"]), max_running=int(r["max_num_seqs"]),
                         max_batch_tokens=int(r["max_num_batched_tokens"]), drain_s=DRAIN_S)
    if request_ms is not None:
        doc["engine"]["request_ms"] = request_ms
    scn = scenario_from_doc(doc, bench, work / f"{r['run']}.yaml")
    return run_bench(scn, bench.stages, seed=0).table


def calibrate(measured: pd.DataFrame, table: Path, work: Path) -> tuple[Path, float, str]:
    """What a planner could fit on their own deployment from its lightest benchmark stage alone: the per-step cost
    of the table (``hw-profile calibrate --prior TABLE --point B,K,MS``) from that stage's TPOT at its running
    requests (Little's law: rate x E2E) and their mean context, then ``engine.request_ms`` from its TTFT on the
    calibrated table. Returns the calibrated table, request_ms and the stage's name."""
    stages = measured[(measured["stage"] >= 0) & (measured["failures"] == 0)]
    light = stages.sort_values(["rate", "run"]).iloc[0]
    running = light["rate"] * light["e2e_mean_ms"] / 1e3
    context = light["system_prompt_len"] + light["question_len"] + light["output_len"] / 2
    tpot = (light["e2e_mean_ms"] - light["ttft_mean_ms"]) / (light["output_len"] - 1)
    prior = StepTable.read(table)
    fit = fit_on_prior(prior, np.array([running]), np.array([running * context]), np.array([tpot]))
    path = apply_fit(prior, fit, name=f"{table.stem}-cal").write(work / f"{table.stem}-cal.csv")
    run = measured[measured["run"] == light["run"]]
    stage = simulate(run, path, work, request_ms=0.0)
    ttft = float(stage.loc[stage["stage"] == str(int(light["stage"])), "ttft_mean_s"].iloc[0]) * 1e3
    return path, max(light["ttft_mean_ms"] - ttft, 0.0), f"{light['run'][16:]} stage {int(light['stage'])}"


def predict(measured: pd.DataFrame, work: Path, calibrated: bool = True) -> pd.DataFrame:
    rows = []
    for (config, tp), deployment in measured.groupby(["config", "tp"], sort=False):
        table = estimate(config, int(tp), work)
        cal = calibrate(deployment, table, work) if calibrated else None
        for run, grp in deployment.groupby("run", sort=False):
            sim = simulate(grp, table, work)
            fitted = simulate(grp, cal[0], work, request_ms=cal[1]) if cal is not None else None
            for i, row in sim.iterrows():
                stage = -1 if row["stage"] == "all" else int(row["stage"])
                real = grp[grp["stage"] == stage]
                if not len(real):
                    continue
                got = {"sim_requests": int(row["requests"]), "sim_unfinished": int(row["unfinished"]),
                       "sim_bench_overloaded": bool(row["overloaded"]),
                       **{f"sim_{k}_{q}_ms": row[f"{k}_{q}_s"] * 1e3 for k in ("e2e", "ttft", "tpot")
                          for q in ("mean", "p90", "p99")}}
                if fitted is not None:
                    got.update({f"cal_{k}_mean_ms": fitted.loc[i, f"{k}_mean_s"] * 1e3 for k in ("e2e", "ttft", "tpot")})
                    got.update(cal_overloaded=bool(fitted.loc[i, "overloaded"]), cal_on=cal[2], cal_request_ms=cal[1])
                rows.append({**real.iloc[0].to_dict(), **got})
            print(f"  {run}: simulated", file=sys.stderr)
    out = pd.DataFrame(rows)
    out["tpot_mean_ms"] = (out["e2e_mean_ms"] - out["ttft_mean_ms"]) / (out["output_len"] - 1)
    out["overloaded"] = ((out["failures"] > 0.05 * (out["successes"] + out["failures"]))
                         | (out["ttft_p90_ms"] > OVERLOAD_TTFT_MS))
    out["sim_overloaded"] = out["sim_bench_overloaded"] | (out["sim_ttft_p90_ms"] > OVERLOAD_TTFT_MS)
    for k in ("e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99", "tpot_mean"):
        out[f"err_{k}"] = out[f"sim_{k}_ms"] / out[f"{k}_ms"] - 1.0
    if "cal_e2e_mean_ms" in out:
        for k in ("e2e_mean", "ttft_mean", "tpot_mean"):
            out[f"cal_err_{k}"] = out[f"cal_{k}_ms"] / out[f"{k}_ms"] - 1.0
    blis_tpot = (out["blis_e2e_mean_ms"] - out["blis_ttft_mean_ms"]) / (out["output_len"] - 1)
    out["blis_err_e2e_mean"] = pd.to_numeric(out["blis_e2e_mean_ms"], errors="coerce") / out["e2e_mean_ms"] - 1.0
    out["blis_err_ttft_mean"] = pd.to_numeric(out["blis_ttft_mean_ms"], errors="coerce") / out["ttft_mean_ms"] - 1.0
    out["blis_err_tpot_mean"] = pd.to_numeric(blis_tpot, errors="coerce") / out["tpot_mean_ms"] - 1.0
    return out


def pct(x: float) -> str:
    return "" if pd.isna(x) else f"{x:+.0%}"


def report(out: pd.DataFrame) -> None:
    cols = ["e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99", "tpot_mean"]
    cal = "cal_err_e2e_mean" in out
    print("| run | stage | vLLM E2E ms | sim | err | E2E p90 / p99 err | vLLM TTFT ms | sim | err | "
          "TTFT p90 / p99 err | vLLM TPOT ms | sim | err | BLIS E2E / TTFT / TPOT err | overloaded: vLLM / sim |"
          + (" calibrated E2E / TTFT / TPOT err |" if cal else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if cal else ""))
    for _, r in out.iterrows():
        stage = "all" if r["stage"] == -1 else str(int(r["stage"]))
        blis = " / ".join(pct(r[f"blis_err_{k}"]) for k in ("e2e_mean", "ttft_mean", "tpot_mean"))
        fitted = " / ".join(pct(r[f"cal_err_{k}"]) for k in ("e2e_mean", "ttft_mean", "tpot_mean")) if cal else ""
        print(f"| {r['run'][16:]} | {stage} | {r['e2e_mean_ms']:,.0f} | {r['sim_e2e_mean_ms']:,.0f} | "
              f"{pct(r['err_e2e_mean'])} | {pct(r['err_e2e_p90'])} / {pct(r['err_e2e_p99'])} | "
              f"{r['ttft_mean_ms']:,.1f} | {r['sim_ttft_mean_ms']:,.1f} | {pct(r['err_ttft_mean'])} | "
              f"{pct(r['err_ttft_p90'])} / {pct(r['err_ttft_p99'])} | "
              f"{r['tpot_mean_ms']:.2f} | {r['sim_tpot_mean_ms']:.2f} | {pct(r['err_tpot_mean'])} | {blis} | "
              f"{'yes' if r['overloaded'] else 'no'} / {'yes' if r['sim_overloaded'] else 'no'} |"
              + (f" {fitted} |" if cal else ""))
    whole = out[out["stage"] == -1]
    served = whole[~whole["overloaded"]]
    print()
    print(f"Whole runs vLLM served ({len(served)}), uncalibrated: MAPE " + ", ".join(
        f"{k} {served[f'err_{k}'].abs().mean():.1%}" for k in cols))
    stages = out[(out["stage"] >= 0) & ~out["overloaded"]]
    print(f"Stages vLLM served ({len(stages)}), uncalibrated: MAPE " + ", ".join(
        f"{k} {stages[f'err_{k}'].abs().mean():.1%}" for k in cols))
    blis = served.dropna(subset=["blis_err_e2e_mean"])
    if len(blis):
        print(f"  the {len(blis)} of them in BLIS's records: ours E2E {blis['err_e2e_mean'].abs().mean():.1%}, "
              f"TTFT {blis['err_ttft_mean'].abs().mean():.1%}, TPOT {blis['err_tpot_mean'].abs().mean():.1%}; "
              f"BLIS (trained) E2E {blis['blis_err_e2e_mean'].abs().mean():.1%}, "
              f"TTFT {blis['blis_err_ttft_mean'].abs().mean():.1%}, TPOT {blis['blis_err_tpot_mean'].abs().mean():.1%}")
    if cal:
        print("Calibrated on each deployment's lightest stage alone (the table's per-step cost from its TPOT, "
              "engine.request_ms from its TTFT): MAPE " + ", ".join(
                  f"{k} {served[f'cal_err_{k}'].abs().mean():.1%}" for k in ("e2e_mean", "ttft_mean", "tpot_mean"))
              + "; calibrated on: " + "; ".join(
                  f"{on} (request_ms {ms:.1f})" for on, ms in
                  out[["cal_on", "cal_request_ms"]].drop_duplicates().itertuples(index=False)))
    false_sat = int((served["sim_overloaded"]).sum())
    flagged = int((whole["overloaded"] & whole["sim_overloaded"]).sum())
    print(f"Overload verdicts: {false_sat} run(s) vLLM served came out overloaded; {flagged} of "
          f"{int(whole['overloaded'].sum())} vLLM overloads flagged overloaded")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="", help="only runs whose name contains this")
    ap.add_argument("--csv", type=Path, help="write every row with its errors here")
    ap.add_argument("--no-calibrated", action="store_true", help="skip the column calibrated on the lightest stage")
    args = ap.parse_args(argv)
    measured = pd.read_csv(DATA / "measured.csv")
    measured = measured[measured["run"].str.contains(args.runs, regex=False)]
    with tempfile.TemporaryDirectory() as tmp:
        out = predict(measured, Path(tmp), calibrated=not args.no_calibrated)
    report(out)
    if args.csv:
        out.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
