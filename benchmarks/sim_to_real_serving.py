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

import pandas as pd

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "serving-runs"
sys.path.insert(0, str(HERE.parent))

from hw_profile.engine_costs import engine_defaults  # noqa: E402
from hw_profile.estimate import Deployment, write_estimate_set  # noqa: E402
from hw_profile.gpus import get_gpu  # noqa: E402
from hw_profile.shapes import get_shape  # noqa: E402
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


def simulate(run: pd.DataFrame, table: Path, work: Path) -> pd.DataFrame:
    """``simulate bench`` on the run's profile and table with its engine limits: the per-stage table."""
    r = run.iloc[0]
    bench = read_profile(profile(run, work))
    doc = bench_scenario(bench, str(table), gpus_per_replica=int(r["tp"]), max_running=int(r["max_num_seqs"]),
                         max_batch_tokens=int(r["max_num_batched_tokens"]), drain_s=DRAIN_S)
    scn = scenario_from_doc(doc, bench, work / f"{r['run']}.yaml")
    return run_bench(scn, bench.stages, seed=0).table


def predict(measured: pd.DataFrame, work: Path) -> pd.DataFrame:
    rows = []
    for run, grp in measured.groupby("run", sort=False):
        r = grp.iloc[0]
        table = simulate(grp, estimate(r["config"], int(r["tp"]), work), work)
        for _, sim in table.iterrows():
            stage = -1 if sim["stage"] == "all" else int(sim["stage"])
            real = grp[grp["stage"] == stage]
            if len(real):
                rows.append({**real.iloc[0].to_dict(), "sim_requests": int(sim["requests"]),
                             "sim_unfinished": int(sim["unfinished"]), "sim_bench_overloaded": bool(sim["overloaded"]),
                             **{f"sim_{k}_{q}_ms": sim[f"{k}_{q}_s"] * 1e3
                                for k in ("e2e", "ttft", "tpot") for q in ("mean", "p90")}})
        print(f"  {run}: simulated", file=sys.stderr)
    out = pd.DataFrame(rows)
    out["tpot_mean_ms"] = (out["e2e_mean_ms"] - out["ttft_mean_ms"]) / (out["output_len"] - 1)
    out["overloaded"] = ((out["failures"] > 0.05 * (out["successes"] + out["failures"]))
                         | (out["ttft_p90_ms"] > OVERLOAD_TTFT_MS))
    out["sim_overloaded"] = out["sim_bench_overloaded"] | (out["sim_ttft_p90_ms"] > OVERLOAD_TTFT_MS)
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
