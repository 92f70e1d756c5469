"""A plan row above --max-gpus (both pools together, or a fleet probe's count) reads as what the system needs
beyond the limit, not as a size the search ran."""

from __future__ import annotations

from simulator.outputs.capacity_report import capacity_html, format_plan, terminal_plan
from simulator.outputs.verdicts import MET, UNMET


def entry(name, gpus, status, why=None):
    return {"system": name, "status": status, "gpus": gpus, "decode_gpus": gpus - 3, "prefill_gpus": 3,
            "replicas": gpus - 3, "prefill_replicas": 3, "max_rate_per_replica": 2.0, "headroom": 0.1,
            "attainment": 0.995, "ttft_p99": 0.4, "tps_per_user_p10": 210.0, "throughput_per_gpu": 9000.0,
            "throughput_per_deployed_gpu": 8600.0, "cost_per_mtok": 0.03, "why_unmet": why, "seeds": 3,
            "attainment_lo": 0.99, "attainment_hi": 0.999, "headroom_lo": 0.1, "headroom_hi": 0.15, "gpus_lo": gpus}


def test_a_row_above_max_gpus_shows_the_limit_beside_its_count():
    doc = {"target": {"tps_per_user": 200, "attainment": 0.99, "ttft_p99_s": 1.0, "max_gpus": 64,
                      "gpu_hour_cost_usd": 1.0, "rate_tolerance": 0.05},
           "traffic": {"kind": "poisson", "rate": 400.0}, "arrival_rate": 401.0, "baseline": "mtp-1",
           "gpus_per_replica": 1, "prefill": {"replicas": 3, "gpus_per_replica": 1, "met": True},
           "verdict": "No system meets the SLA within 64 GPUs.",
           "systems": {"mtp-1": entry("mtp-1", 67, UNMET, "67 GPUs (decode + prefill) exceed --max-gpus 64"),
                       "dspark": entry("dspark", 40, MET)}}
    table = format_plan(doc)
    assert list(table["GPUs"]) == ["67 > 64", "40"]
    text = terminal_plan(doc)
    assert "67 > 64" in text and "N > 64: it needs N GPUs, above --max-gpus 64, so unmet" in " ".join(text.split())
    assert "at most 64 GPUs a pool; a\ncount shown as N &gt; 64" in capacity_html(doc)
    # no such row: no such legend
    doc["systems"]["mtp-1"] = entry("mtp-1", 64, UNMET, "at 61 decode GPUs: the SLA fails")
    assert list(format_plan(doc)["GPUs"]) == ["64", "40"] and "N > 64" not in terminal_plan(doc)
