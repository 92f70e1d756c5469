"""Telemetry of a deployed system, read into observations of its mean decode step (for ``hw_profile.calibrate.calibrate``).

An observation is one operating point: ``requests`` R running per replica, ``batch_tokens`` B = R x verification
budget verified per step, ``kv_tokens`` K = R x mean context read per step, and ``step_ms``. Telemetry rarely
states the step time; it follows from what dashboards do show, given what they cannot (the system's tau, its
verification budget per request, the mean context; per-row columns or the ``Assumptions``):

- throughput per GPU X against concurrent requests per GPU C:  step = C x tau / X, R = C x GPUs per replica;
- throughput per GPU X against per-user speed S (tok/s/user):   step = tau / S,     C = X / S;
- per-step batch tokens and step times:                           taken as they are.

Readers (``read_telemetry`` picks by content):

- **plain CSV**, one row per point, columns ``throughput_per_gpu`` with ``concurrency`` (per GPU) or
  ``tps_per_user``; or ``batch_tokens`` and ``step_ms`` (optional ``kv_tokens``, ``requests``). Optional per-row
  ``tau``, ``verify_budget``, ``context``, ``weight``. A long CSV with columns ``x_name, x, y_name, y`` (one
  curve point per row, as digitised figures come) is read the same way after pivoting each row to
  ``{x_name: x, y_name: y}``; ``where`` filters rows on other columns first (``figure=fig8``).
- **runs.csv** of this project (``simulate``): columns ``policy``, ``mean_running``, ``throughput_per_gpu``,
  ``tau``, ``mean_verify_budget``, ``mean_kv_tokens``, ``gpus``, ``replicas``; every row with running requests
  and throughput is an observation, R = ``mean_running`` (per replica), B = R x ``mean_verify_budget``, K =
  ``mean_kv_tokens``, step = R x ``tau`` / (``throughput_per_gpu`` x GPUs per replica). With several systems in
  the file, ``system`` names the one to read. The step so measured includes the system's drafting and any
  scheduling stall (see ``DraftShare`` in hw_profile.calibrate.calibrate).
- **a directory of ``vllm bench serve --save-result`` JSON files**, one per ``--max-concurrency``. Fields read:
  ``max_concurrency`` (R, per server), ``mean_tpot_ms`` (step = TPOT x tau: a request emits tau tokens a step) or
  with ``step_from="throughput"`` ``output_throughput`` (step = R x tau / throughput), ``completed``,
  ``total_input_tokens`` and ``total_output_tokens`` (mean context = input + output / 2 per request). With
  speculation, the server's counters, at the top level or under ``spec_decode``, with or without a
  ``spec_decode_`` prefix: ``num_drafts``, ``num_draft_tokens`` (or ``draft_tokens``), ``num_accepted_tokens``
  (or ``accepted_tokens``) and ``accepted_per_pos`` (or ``num_accepted_tokens_per_pos``: accepted counts per
  draft position; ``per_position_acceptance_rates`` as rates also reads). Then tau = 1 + accepted / drafts, the
  verification budget = 1 + draft tokens / drafts, and position j's acceptance = accepted_per_pos[j] / drafts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hw_profile.errors import HwProfileError

RUNS_COLUMNS = {"policy", "mean_running", "throughput_per_gpu", "tau", "mean_verify_budget"}


@dataclass(frozen=True)
class Assumptions:
    """What telemetry cannot say, for rows that do not carry it themselves."""

    tau: float | None = None  # mean emitted tokens per request-step of the system in service
    verify_budget: float | None = None  # mean verified tokens per request-step (MTP-1: 2)
    context: float | None = None  # mean KV tokens per running request
    gpus_per_replica: int = 1  # GPUs that step together on one batch (TP size; 1 for a DP rank)
    step_from: str = "tpot"  # vLLM files: "tpot" or "throughput"


def _fail(path: Path, field: str, expected: str, got=None) -> HwProfileError:
    tail = f", got {got!r}" if got is not None else ""
    return HwProfileError(f"{path}: {field}: expected {expected}{tail}")


def read_telemetry(path: str | Path, assume: Assumptions = Assumptions(), system: str | None = None,
                   where: dict[str, str] | None = None) -> tuple[pd.DataFrame, dict]:
    """Observations (columns requests, batch_tokens, kv_tokens, step_ms, weight, plus what they came from) and a
    description of the input for the sidecar."""
    path = Path(path)
    if assume.gpus_per_replica < 1:
        raise HwProfileError(f"--gpus-per-replica: expected a positive integer, got {assume.gpus_per_replica}")
    if path.is_dir():
        return read_vllm_dir(path, assume)
    if not path.is_file():
        raise HwProfileError(f"{path}: telemetry file not found")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise HwProfileError(f"{path}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    for key, value in (where or {}).items():
        if key not in df.columns:
            raise _fail(path, f"--where {key}", f"one of the columns {', '.join(map(str, df.columns))}")
        df = df[df[key].astype(str) == str(value)]
        if df.empty:
            raise _fail(path, f"--where {key}={value}", "rows matching it; none do")
    if RUNS_COLUMNS <= set(df.columns):
        return read_runs(path, df, system, assume)
    if {"x_name", "x", "y_name", "y"} <= set(df.columns):
        df = _pivot_long(path, df)
    return read_plain(path, df, assume)


def _pivot_long(path: Path, df: pd.DataFrame) -> pd.DataFrame:
    pairs = df[["x_name", "y_name"]].drop_duplicates()
    if len(pairs) != 1:
        listing = "; ".join(f"{a} vs {b}" for a, b in pairs.itertuples(index=False))
        raise _fail(path, "x_name/y_name", "one curve (select it with --where)", listing)
    x_name, y_name = pairs.iloc[0]
    return pd.DataFrame({str(x_name): pd.to_numeric(df["x"], errors="coerce").to_numpy(),
                         str(y_name): pd.to_numeric(df["y"], errors="coerce").to_numpy()})


def _column(path: Path, df: pd.DataFrame, name: str, default: float | None, flag: str,
            positive: bool = True) -> np.ndarray:
    """A per-row numeric column, or the flag's value for every row."""
    if name in df.columns:
        vals = pd.to_numeric(df[name], errors="coerce")
        bad = vals.isna() | ((vals <= 0) if positive else (vals < 0))
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise _fail(path, f"line {i + 2}: column {name}", "a positive number", df[name].iloc[i])
        return vals.to_numpy(float)
    if default is None:
        raise _fail(path, name, f"a column {name} or the flag {flag} (telemetry cannot say it)")
    return np.full(len(df), float(default))


def read_plain(path: Path, df: pd.DataFrame, assume: Assumptions) -> tuple[pd.DataFrame, dict]:
    cols = set(df.columns)
    g = assume.gpus_per_replica
    if {"batch_tokens", "step_ms"} <= cols:
        b = _column(path, df, "batch_tokens", None, "")
        t = _column(path, df, "step_ms", None, "")
        if "requests" in cols:
            r = _column(path, df, "requests", None, "")
        else:
            r = b / _column(path, df, "verify_budget", assume.verify_budget, "--verify-budget")
        if "kv_tokens" in cols:
            k = _column(path, df, "kv_tokens", None, "", positive=False)
        else:
            k = r * _column(path, df, "context", assume.context, "--context")
        kind = "per-step"
        conc = r / g
    elif "throughput_per_gpu" in cols and ("concurrency" in cols or "tps_per_user" in cols):
        x = pd.to_numeric(df["throughput_per_gpu"], errors="coerce").to_numpy(float)
        other = "concurrency" if "concurrency" in cols else "tps_per_user"
        v = pd.to_numeric(df[other], errors="coerce").to_numpy(float)
        for name, arr in (("throughput_per_gpu", x), (other, v)):
            bad = np.isnan(arr) | (arr < 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise _fail(path, f"line {i + 2}: column {name}", "a number >= 0", df[name].iloc[i])
        keep = (x > 0) & (v > 0)  # a zero point (curve origin) carries no step time
        df, x, v = df[keep], x[keep], v[keep]
        if df.empty:
            raise _fail(path, "throughput_per_gpu", "rows with positive throughput and concurrency/speed")
        tau = _column(path, df, "tau", assume.tau, "--tau")
        budget = _column(path, df, "verify_budget", assume.verify_budget, "--verify-budget")
        context = _column(path, df, "context", assume.context, "--context", positive=False)
        if other == "concurrency":
            conc, t = v, v * tau / x * 1e3
            kind = "throughput against concurrency per GPU"
        else:
            conc, t = x / v, tau / v * 1e3
            kind = "throughput against per-user speed"
        r = conc * g
        b, k = r * budget, r * context
    else:
        raise _fail(path, "columns", "throughput_per_gpu with concurrency or tps_per_user; or batch_tokens and "
                    "step_ms; or x_name, x, y_name, y", ", ".join(map(str, df.columns)))
    w = _column(path, df, "weight", 1.0, "", positive=False) if "weight" in cols else np.ones(len(r))
    obs = pd.DataFrame({"requests": r, "batch_tokens": b, "kv_tokens": k, "step_ms": t, "weight": w,
                        "concurrency_per_gpu": conc})
    return obs, {"file": str(path), "format": "csv", "kind": kind, "rows": len(obs)}


def read_runs(path: Path, df: pd.DataFrame, system: str | None, assume: Assumptions) -> tuple[pd.DataFrame, dict]:
    systems = sorted(df["policy"].astype(str).unique())
    if system is None and len(systems) > 1:
        raise _fail(path, "--system", f"one of the systems in the file ({', '.join(systems)})")
    system = system or systems[0]
    if system not in systems:
        raise _fail(path, "--system", f"one of the systems in the file ({', '.join(systems)})", system)
    df = df[df["policy"].astype(str) == system]
    num = {c: pd.to_numeric(df[c], errors="coerce").to_numpy(float)
           for c in ("mean_running", "throughput_per_gpu", "tau", "mean_verify_budget")}
    keep = (num["mean_running"] > 0) & (num["throughput_per_gpu"] > 0) & ~np.isnan(num["tau"])
    if not keep.any():
        raise _fail(path, "mean_running/throughput_per_gpu", f"rows of system {system} with running requests and "
                    "throughput")
    df = df[keep]
    num = {c: a[keep] for c, a in num.items()}
    if {"gpus", "replicas"} <= set(df.columns):
        g = pd.to_numeric(df["gpus"]).to_numpy(float) / pd.to_numeric(df["replicas"]).to_numpy(float)
    else:
        g = np.full(len(df), float(assume.gpus_per_replica))
    r = num["mean_running"]
    t = r * num["tau"] / (num["throughput_per_gpu"] * g) * 1e3
    if "mean_kv_tokens" in df.columns:
        k = pd.to_numeric(df["mean_kv_tokens"], errors="coerce").to_numpy(float)
    else:
        k = r * _column(path, df, "context", assume.context, "--context")
    obs = pd.DataFrame({"requests": r, "batch_tokens": r * num["mean_verify_budget"], "kv_tokens": k,
                        "step_ms": t, "weight": 1.0, "concurrency_per_gpu": r / g, "tau": num["tau"],
                        "verify_budget": num["mean_verify_budget"]})
    return obs, {"file": str(path), "format": "runs.csv", "system": system, "rows": len(obs)}


def _get(d: dict, *names: str):
    """The first of ``names`` present at the top level or under ``spec_decode``, with or without the
    ``spec_decode_`` prefix."""
    scopes = [d] + [d[k] for k in ("spec_decode", "spec_decode_metrics") if isinstance(d.get(k), dict)]
    for scope in scopes:
        for name in names:
            for key in (name, f"spec_decode_{name}"):
                if key in scope and scope[key] is not None:
                    return scope[key]
    return None


def speculation_stats(d: dict, path: Path) -> dict | None:
    """tau, verification budget and per-position acceptance from a vLLM result's speculation counters."""
    drafts = _get(d, "num_drafts")
    if drafts is None:
        return None
    draft_tokens = _get(d, "num_draft_tokens", "draft_tokens")
    accepted = _get(d, "num_accepted_tokens", "accepted_tokens")
    for name, value in (("num_drafts", drafts), ("num_draft_tokens", draft_tokens),
                        ("num_accepted_tokens", accepted)):
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0 or \
                (name == "num_drafts" and value == 0):
            raise _fail(path, name, "a non-negative count (num_drafts > 0)", value)
    per_pos = _get(d, "accepted_per_pos", "num_accepted_tokens_per_pos")
    rates = None
    if per_pos is not None:
        if not isinstance(per_pos, list) or not all(isinstance(v, int | float) for v in per_pos):
            raise _fail(path, "accepted_per_pos", "a list of accepted counts per draft position", per_pos)
        rates = [float(v) / drafts for v in per_pos]
    else:
        given = _get(d, "per_position_acceptance_rates")
        if isinstance(given, list):
            rates = [float(v) for v in given]
    return {"tau": 1.0 + accepted / drafts, "verify_budget": 1.0 + draft_tokens / drafts,
            "position_acceptance": rates}


def read_vllm_dir(path: Path, assume: Assumptions) -> tuple[pd.DataFrame, dict]:
    files = sorted(path.glob("*.json"))
    if not files:
        raise _fail(path, "files", "a directory of `vllm bench serve --save-result` JSON files, one per "
                    "--max-concurrency; found none")
    if assume.step_from not in ("tpot", "throughput"):
        raise HwProfileError(f"--step-from: expected tpot or throughput, got {assume.step_from!r}")
    rows, points, skipped = [], [], []
    for f in files:
        try:
            d = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise HwProfileError(f"{f}: not a readable JSON file ({exc})") from None
        if not isinstance(d, dict):
            raise _fail(f, "top level", "a JSON object (a vllm bench serve result)")
        conc = d.get("max_concurrency")
        if not isinstance(conc, int | float) or isinstance(conc, bool) or conc <= 0:
            raise _fail(f, "max_concurrency", "a positive number (run the sweep with --max-concurrency)", conc)
        spec = speculation_stats(d, f)
        tau = spec["tau"] if spec else (assume.tau or 1.0)
        budget = spec["verify_budget"] if spec else (assume.verify_budget or 1.0)
        field = "mean_tpot_ms" if assume.step_from == "tpot" else "output_throughput"
        value = d.get(field)
        if value is None:  # a point nothing finished at (an overloaded run's export leaves it empty): no step time
            skipped.append(f"{f.name}: {field} is empty (no request finished its run: an overloaded point), skipped")
            continue
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            raise _fail(f, field, "a positive number", value)
        step_ms = value * tau if field == "mean_tpot_ms" else conc * tau / value * 1e3
        done = d.get("completed")
        if assume.context is not None:
            context = assume.context
        elif isinstance(done, int | float) and done > 0 and all(
                isinstance(d.get(k), int | float) for k in ("total_input_tokens", "total_output_tokens")):
            context = (d["total_input_tokens"] + d["total_output_tokens"] / 2.0) / done
        else:
            raise _fail(f, "completed/total_input_tokens/total_output_tokens", "counts giving the mean context "
                        "(or the flag --context)")
        r = float(conc)
        rows.append({"requests": r, "batch_tokens": r * budget, "kv_tokens": r * context, "step_ms": step_ms,
                     "weight": 1.0, "concurrency_per_gpu": r / assume.gpus_per_replica, "tau": tau,
                     "verify_budget": budget})
        points.append({"file": f.name, "max_concurrency": conc, "tau": round(tau, 4),
                       "verify_budget": round(budget, 4), "context": round(context, 1),
                       "position_acceptance": spec["position_acceptance"] if spec else None,
                       "ttft_ms": {k: d.get(f"{k}_ttft_ms") for k in ("mean", "median", "p99") if
                                   d.get(f"{k}_ttft_ms") is not None},
                       "tpot_ms": {k: d.get(f"{k}_tpot_ms") for k in ("mean", "median", "p99") if
                                   d.get(f"{k}_tpot_ms") is not None}})
    if not rows:
        raise _fail(path, "files", "at least one result with a step time; every one was empty: "
                    + "; ".join(skipped))
    obs = pd.DataFrame(rows).sort_values("requests").reset_index(drop=True)
    if any(math.isnan(x) for x in obs["step_ms"]):
        raise _fail(path, "step", "finite step times")
    return obs, {"file": str(path), "format": "vllm bench serve results", "step_from": assume.step_from,
                 "points": points, "rows": len(obs), "skipped": skipped}
