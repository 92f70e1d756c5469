"""The column-declared containers: request log defaults, a running batch's admit/compact/evict/save, named step
records, and a field added the way docs/engine.md says, carried through preemption and readmission."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.core import engine
from simulator.core.columns import COPY, LIVE, Batch, ColumnLog, Field, RowLog
from tests.simulator.engine_helpers import simulate

FIELDS = {
    "t": Field(np.float64, np.nan),
    "size": Field(np.int64, batch=COPY),
    "count": Field(np.int64, batch=LIVE),
    "flag": Field(np.bool_, False),
    "owner": Field(np.int64, -1),
}


def test_log_fills_declared_defaults_and_grows():
    log = ColumnLog(FIELDS, capacity=2)
    ids = log.extend(3, size=[5, 6, 7])
    ids2 = log.extend(2, size=8, owner=4)
    assert ids.tolist() == [0, 1, 2] and ids2.tolist() == [3, 4]
    f = log.frame()
    assert np.isnan(f["t"]).all() and f["size"].tolist() == [5, 6, 7, 8, 8]
    assert f["owner"].tolist() == [-1, -1, -1, 4, 4] and f["count"].tolist() == [0] * 5
    assert f["flag"].dtype == np.bool_ and not f["flag"].any()
    with pytest.raises(KeyError, match="nope"):
        log.extend(1, nope=1)


def test_batch_admit_compact_evict_save_on_any_field():
    log = ColumnLog(FIELDS)
    log.extend(5, size=[10, 11, 12, 13, 14], count=[0, 1, 2, 3, 4])
    b = Batch(FIELDS, {"slot": np.int64}, capacity=8)
    assert set(b.names) == {"rid", "slot", "size", "count"}  # log-only fields stay out of the batch
    rows = b.admit(log, [3, 1, 4], slot=[7, 8, 9])
    assert rows == slice(0, 3) and b.col("size").tolist() == [13, 11, 14] and b.col("slot").tolist() == [7, 8, 9]
    b.count[:3] += 100
    b.size[:3] = 0  # COPY columns are never written back
    b.drop(np.array([1]))
    assert b.col("rid").tolist() == [3, 4] and b.col("count").tolist() == [103, 104]
    assert b.col("slot").tolist() == [7, 9]
    b.save(log, slice(0, b.n))
    assert log.data["count"][:5].tolist() == [0, 1, 2, 103, 104] and log.data["size"][3] == 13
    assert b.drop_last() == 4 and b.n == 1
    b.admit(log, [0])  # an unnamed local column starts at 0
    assert b.col("rid").tolist() == [3, 0] and b.col("slot").tolist() == [7, 0]
    for name in ("drop", "n", "_x"):  # a column may not shadow the container's own attributes
        with pytest.raises(ValueError, match="clash"):
            Batch({name: Field(np.int64, batch=COPY)}, {}, capacity=1)


def test_step_records_by_name():
    log = RowLog({"a": np.int64, "b": np.float64}, capacity=1)
    log.append(b=0.5, a=3)
    log.append(a=4, b=1.5)  # grows
    f = log.frame()
    assert f["a"].tolist() == [3, 4] and f["a"].dtype == np.int64 and f["b"].tolist() == [0.5, 1.5]
    with pytest.raises(KeyError, match="missing"):
        log.append(a=1)
    with pytest.raises(KeyError, match="unknown"):
        log.append(a=1, c=2)


def test_new_request_field_is_one_line_and_survives_preemption(scenario_file, monkeypatch):
    """docs/engine.md's recipe: one line declares a per-request counter, one line updates it; the generic
    admission, write-back on eviction, readmission and compaction carry it through recompute preemptions."""
    monkeypatch.setitem(engine.REQUEST_FIELDS, "verified", Field(np.int64, batch=LIVE))
    apply = engine.Replica.apply_outcomes

    def apply_and_count(self, plan):
        if plan.lengths is not None:
            self.batch.verified[plan.decode_rows] += plan.lengths
        apply(self, plan)

    monkeypatch.setattr(engine.Replica, "apply_outcomes", apply_and_count)
    path = scenario_file(engine={"kv_capacity_tokens": 3000}, frontier={"concurrency": [24]},
                         workload={"prompt": 200, "output": {"dist": "uniform", "low": 50, "high": 600}})
    row, sim = simulate(path, quick=True)
    assert row["preemptions"] > 0
    req, steps = sim.requests.frame(), sim.steps.frame()
    assert req["verified"].sum() == steps["verified"].sum() > 0
