"""Replay of recorded full-block verifications (CSV or Parquet), e.g. exported by ``dspark eval``.

One row per request-step: ``domain, benchmark, drafter, gamma, accepted, c_1 .. c_gamma, raw_1 .. raw_gamma``
(``accepted`` = draft tokens accepted, bonus excluded; ``c_j`` calibrated confidences; ``raw_j`` raw head outputs,
empty where the drafter has none). Each simulated request walks the rows of its mix entry in file order from a
random start (so consecutive steps keep whatever correlation the recording had, as when rows are written prompt
by prompt), wrapping around at the end.

A trace written by a live run (``source: live`` with ``--records``) also says where each request ended:
``request`` (the live run's request id), ``output`` (the tokens it emitted), ``eos`` (1: it ended at its
end-of-sequence token; 0: at its drawn length, or it was still running when the run stopped) and ``finished``
(0: still running), the same on every row of the request. A replay then ends requests as live did (``end_positions``): simulated request i takes the
end of recorded request i when that one is of the same mix entry (a replay of the same scenario and seed draws
the same requests, so their ends are the recorded ones), else of a recorded request of its mix entry drawn at
random; a recorded end token ends it there (or at its own drawn length if that comes first), and a recorded
request that stopped without one (censored at ``output``) continues with a draw from the mix entry's end model
(``ends.fit_ends``) conditioned on passing ``output``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from simulator.core.acceptance.base import AcceptanceSource, GrowingArrays, Proposal, register
from simulator.core.acceptance.ends import EndModel, fit_ends
from simulator.errors import UserError

if TYPE_CHECKING:
    from simulator.inputs.config import LoadedScenario

TRACE_COLUMNS = ["domain", "benchmark", "drafter", "gamma", "accepted"]
END_COLUMNS = ["request", "output", "eos"]


def recorded_ends(rows: pd.DataFrame) -> pd.DataFrame | None:
    """One row per recorded request (request, domain, benchmark, output, eos), or None for a trace that does not
    say where its requests ended."""
    if any(c not in rows.columns for c in END_COLUMNS) or rows[END_COLUMNS].isna().any().any():
        return None
    first = rows.drop_duplicates("request")
    out = pd.DataFrame({"request": first["request"].to_numpy(dtype=np.int64),
                        "domain": first["domain"].astype(str).to_numpy(),
                        "benchmark": first["benchmark"].astype(str).to_numpy(),
                        "output": first["output"].to_numpy(dtype=np.int64),
                        "eos": first["eos"].to_numpy(dtype=np.int64) > 0})
    if "finished" in first.columns and not first["finished"].isna().any():
        out["finished"] = first["finished"].to_numpy(dtype=np.int64) > 0
    return out


def read_trace(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise UserError(f"{path}: acceptance trace not found")
    try:
        df = pd.read_parquet(path) if path.suffix in (".parquet", ".pq") else pd.read_csv(path)
    except Exception as exc:  # pandas raises many kinds for unreadable files
        raise UserError(f"{path}: not a readable trace ({type(exc).__name__}: {exc})") from None
    missing = [c for c in TRACE_COLUMNS if c not in df.columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)}; a trace needs {', '.join(TRACE_COLUMNS)}, c_1..c_gamma")
    return df


@register
class TraceSource(AcceptanceSource):
    """Replays recorded full-block verifications (the scenario's acceptance.trace), each request walking its mix
    entry's rows in order (see the module docstring)."""

    name = "trace"
    draws_outcome = True

    def __init__(self, *, scenario: LoadedScenario, drafter: str, gamma: int, mix: list[str], calibrated: bool,
                 rng: np.random.Generator):
        path = scenario.resolve(scenario.model.acceptance.trace)
        df = read_trace(path)
        rows = df[df["drafter"].astype(str) == drafter]
        if rows.empty:
            have = ", ".join(sorted(df["drafter"].astype(str).unique()))
            raise UserError(f"{path}: no rows for drafter {drafter!r} (the trace has: {have})")
        rec_gamma = int(rows["gamma"].max())
        if gamma > rec_gamma:
            raise UserError(f"{path}: recorded blocks have gamma {rec_gamma}; a system cannot verify {gamma} tokens from them")
        prefix = "c" if calibrated else "raw"
        cols = [f"{prefix}_{j}" for j in range(1, gamma + 1)]
        missing = [c for c in cols if c not in rows.columns]
        # a drafter without a confidence head records none: policies that read none can still replay it
        self.has_confidence = not missing and not rows[cols].isna().any().any()
        self.gamma = int(gamma)
        self.rng = rng
        blocks, starts, lengths = [], [], []
        offset = 0
        for key in mix:
            sel = rows[(rows["domain"].astype(str) == key) | (rows["benchmark"].astype(str) == key)]
            if sel.empty:
                raise UserError(f"{path}: no rows for workload mix entry {key!r} with drafter {drafter!r}")
            blocks.append(sel)
            starts.append(offset)
            lengths.append(len(sel))
            offset += len(sel)
        table = pd.concat(blocks)
        self.confidence = (np.clip(table[cols].to_numpy(dtype=float), 0.0, 1.0) if self.has_confidence
                           else np.zeros((len(table), gamma)))
        self.accepted = np.minimum(table["accepted"].to_numpy(dtype=np.int64), gamma)
        self.start = np.array(starts)
        self.length = np.array(lengths)
        self.state = GrowingArrays(base=np.int64, span=np.int64, cursor=np.int64, key=np.int64)
        ends = recorded_ends(rows)
        self.ends = None
        if ends is not None and ends["eos"].any():  # (a trace of requests run to their drawn length has no ends)  # per mix entry: its recorded requests by id, and the end model fitted to them
            self.ends = []
            for key in mix:
                sel = ends[(ends["domain"] == key) | (ends["benchmark"] == key)]
                self.ends.append((dict(zip(sel["request"].tolist(), range(len(sel)), strict=True)),
                                  sel["output"].to_numpy(), sel["eos"].to_numpy(),
                                  EndModel(fit_ends(sel["output"].to_numpy(), sel["eos"].to_numpy()))))

    def attach(self, ids: np.ndarray, mix_index: np.ndarray) -> None:
        if len(ids) == 0:
            return
        self.state.ensure(int(ids.max()))
        span = self.length[mix_index]
        self.state.base[ids] = self.start[mix_index]
        self.state.span[ids] = span
        self.state.cursor[ids] = (self.rng.random(len(ids)) * span).astype(np.int64)
        self.state.key[ids] = mix_index

    def end_positions(self, ids: np.ndarray) -> np.ndarray | None:
        if self.ends is None:
            return None
        out = np.empty(len(ids), dtype=np.int64)
        keys = self.state.key[ids]
        for k in np.unique(keys).tolist():  # mix entries, a handful
            at = np.flatnonzero(keys == k)
            index, output, eos, model = self.ends[k]
            rec = np.array([index.get(int(i), -1) for i in ids[at].tolist()], dtype=np.int64)
            other = rec < 0
            rec[other] = self.rng.integers(0, len(output), int(other.sum()))
            out[at] = np.where(eos[rec], output[rec], model.draw(len(at), self.rng, survived=output[rec]))
        return out

    def propose(self, ids: np.ndarray) -> Proposal:
        s = self.state
        row = s.base[ids] + s.cursor[ids] % s.span[ids]
        s.cursor[ids] += 1
        return Proposal(confidence=self.confidence[row], outcome=self.accepted[row])

    def verify(self, proposal: Proposal, lengths: np.ndarray) -> np.ndarray:
        return np.minimum(lengths, proposal.outcome)
