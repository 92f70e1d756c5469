"""The step-time tables a ``clock: live`` run measured, written beside the scenario's results.

A live source returns, per run, its binned measurements (hw_profile's table rows) of the target's verification
forward and of the drafter's forward, with metadata. They are stored with the run (so a resumed sweep keeps them)
and written here as ``OUT/live-tables/<system>__<load point>__seed<S>.csv`` plus the JSON sidecar (``kind: live``),
whose ``drafter_tables`` names the drafter's table (``...drafter-<name>.csv``) as hw_profile's sidecars do, so a
measured table can serve as a scenario's ``hardware.table``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hw_profile.tables.step_table import StepTable
from hw_profile.tables.table_set import DrafterTable, TableSet


def write_live_tables(out: Path, runs: pd.DataFrame) -> list[Path]:
    if "live_tables" not in runs.columns:
        return []
    written = []
    for _, run in runs.iterrows():
        tables = run["live_tables"]
        if not isinstance(tables, dict) or not tables.get("target"):
            continue
        quick = "-quick" if run.get("quick") else ""
        stem = f"{run['policy']}__{run['load_point']}__seed{run['seed']}{quick}"
        folder = out / "live-tables"
        meta = {**tables["meta"], "system": run["policy"], "load_point": run["load_point"]}
        drafters = ({str(run["drafter"]): DrafterTable(StepTable.from_points(tables["drafter"], {**meta, "role": "drafter"}))}
                    if tables.get("drafter") else {})
        target = StepTable.from_points(tables["target"], {**meta, "role": "target"})
        written.append(TableSet(target, drafters).write(folder / f"{stem}.csv")[-1])
    return written
