"""Replay of recorded full-block verifications (CSV or Parquet), e.g. exported by ``dspark eval``.

One row per request-step: ``domain, benchmark, drafter, gamma, accepted, c_1 .. c_gamma, raw_1 .. raw_gamma``
(``accepted`` = draft tokens accepted, bonus excluded; ``c_j`` calibrated confidences; ``raw_j`` raw head outputs,
empty where the drafter has none). Each simulated request walks the rows of its mix entry in file order from a
random start (so consecutive steps keep whatever correlation the recording had, as when rows are written prompt
by prompt), wrapping around at the end.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.acceptance.base import AcceptanceSource, GrowingArrays, Proposal
from simulator.errors import UserError

TRACE_COLUMNS = ["domain", "benchmark", "drafter", "gamma", "accepted"]


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


class TraceSource(AcceptanceSource):
    draws_outcome = True

    def __init__(self, path: Path, drafter: str, gamma: int, mix: list[str], calibrated: bool,
                 rng: np.random.Generator, need_confidence: bool = True):
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
        has_confidence = not missing and not rows[cols].isna().any().any()
        if need_confidence and not has_confidence:
            what = "calibrated confidences c_j" if calibrated else "raw confidences raw_j"
            raise UserError(f"{path}: drafter {drafter!r} has no {what} for positions 1..{gamma}, which this "
                            "system's policy reads (a drafter without a confidence head records none)")
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
        # a policy that reads no confidences gets zeros where the recording has none
        self.confidence = (np.clip(table[cols].to_numpy(dtype=float), 0.0, 1.0) if has_confidence
                           else np.zeros((len(table), gamma)))
        self.accepted = np.minimum(table["accepted"].to_numpy(dtype=np.int64), gamma)
        self.start = np.array(starts)
        self.length = np.array(lengths)
        self.state = GrowingArrays(base=np.int64, span=np.int64, cursor=np.int64)

    def attach(self, ids: np.ndarray, mix_index: np.ndarray) -> None:
        if len(ids) == 0:
            return
        self.state.ensure(int(ids.max()))
        span = self.length[mix_index]
        self.state.base[ids] = self.start[mix_index]
        self.state.span[ids] = span
        self.state.cursor[ids] = (self.rng.random(len(ids)) * span).astype(np.int64)

    def propose(self, ids: np.ndarray) -> Proposal:
        s = self.state
        row = s.base[ids] + s.cursor[ids] % s.span[ids]
        s.cursor[ids] += 1
        return Proposal(confidence=self.confidence[row], outcome=self.accepted[row])

    def verify(self, proposal: Proposal, lengths: np.ndarray) -> np.ndarray:
        return np.minimum(lengths, proposal.outcome)
