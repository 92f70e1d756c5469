"""A plan says what its GPU counts rest on: plan.csv names the table's kind and expected error, and a verdict whose
headroom is smaller than the table's typical step-time error says the count is limited by the table."""

from __future__ import annotations

from hw_profile.estimate.accuracy import DECODE_MEDIAN_ERROR
from hw_profile.tables.table_set import TableSet
from simulator.outputs.verdicts import table_error_caveat
from simulator.runs.plan import table_facts
from tests.conftest import ROOT

HARDWARE = ROOT / "scenarios" / "hardware"


def facts(name: str) -> dict:
    return table_facts(name, TableSet.read(HARDWARE / name).provenance)


def test_an_estimates_error_larger_than_the_headroom_limits_the_count():
    doc = {"table": facts("h200-qwen3-8b-bf16-vllm.csv")}
    sentence = table_error_caveat(doc, 0.04)
    assert f"a typical step-time error ({DECODE_MEDIAN_ERROR:.0%}) is larger than this headroom (+4%)" in sentence
    assert "limited by the table, not by the seeds" in sentence and "hw-profile calibrate --prior" in sentence
    # headroom beyond the table's typical error: the seeds, not the table, are what the count rests on
    assert table_error_caveat(doc, DECODE_MEDIAN_ERROR + 0.01) == ""
    assert table_error_caveat(doc, None) == ""


def test_tables_without_a_typical_error_add_nothing():
    for name in ("h200-qwen3-8b-bf16.csv", "cpu-qwen3-0.6b.csv"):
        assert table_error_caveat({"table": facts(name)}, 0.0) == ""
    assert table_error_caveat({}, 0.0) == ""
