"""The datasheet entries: their ratios are those the datasheets state, lookups accept the documented spellings,
and an unknown name lists the known ones."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hw_profile.errors import HwProfileError
from hw_profile.hardware.gpus import ALIASES, GPUS, PLACEMENT, VENDORS, get_gpu, gpu_from_file, gpu_names
from hw_profile.hardware.shapes import get_shape
from hw_profile.kernels.roofline import step_time_ms

FP4_PARTS = {"B200", "B300", "GB300", "MI350X", "MI355X", "GB200", "RTX-PRO-6000"}


@pytest.mark.parametrize("name", sorted(GPUS))
def test_entry_ratios_are_the_datasheets(name):
    g = GPUS[name]
    assert g.name == name and g.bf16_tflops > 0 and g.hbm_tb_s > 0 and g.memory_gb > 0
    assert 0 < g.idle_w < g.tdp_w
    assert g.idle_w / g.tdp_w == pytest.approx(0.13, abs=0.005)
    if g.fp8_tflops is not None:  # every FP8 part doubles its dense 16-bit rate (A100 has no FP8)
        assert g.fp8_tflops == pytest.approx(2 * g.bf16_tflops, rel=1e-3)
    if name.startswith(("A", "H", "B", "GB")) and name != "B60":  # NVIDIA (B60 is Intel's): TF32 is half the 16-bit rate (Blackwell rounds 1.125 to 1.1)
        assert g.tf32_tflops == pytest.approx(g.bf16_tflops / 2, rel=0.03)
    assert (g.fp4_tflops is not None) == (name in FP4_PARTS)
    if g.fp4_tflops is not None:
        assert g.fp4_tflops > g.fp8_tflops and g.peak_tflops("fp4") == g.fp4_tflops
        assert g.fp4_tflops / g.fp8_tflops in (pytest.approx(2.0, rel=1e-3), pytest.approx(3.0, rel=1e-3))
    # HBM per datasheet: no part streams faster than 8 TB/s per GPU or holds more than 288 GB
    assert g.hbm_tb_s <= 8.0 and g.memory_gb <= 288


def test_fp4_falls_back_to_fp8_then_16_bit():
    assert get_gpu("H200").peak_tflops("fp4") == get_gpu("H200").fp8_tflops
    assert get_gpu("A100").peak_tflops("fp4") == get_gpu("A100").bf16_tflops == get_gpu("A100").peak_tflops("fp8")
    b300, b200 = get_gpu("B300"), get_gpu("B200")
    # Blackwell Ultra: B200's FP8 and 16-bit rates, 1.5x its dense FP4, 1.6x its memory
    assert b300.peak_tflops("fp8") == b200.peak_tflops("fp8") and b300.fp4_tflops == 1.5 * b200.fp4_tflops
    assert b300.memory_gb / b200.memory_gb == pytest.approx(1.6)


def test_h20_141g_is_an_h20_with_h200_memory():
    h20, big, h200 = get_gpu("H20"), get_gpu("H20-141G"), get_gpu("H200")
    assert big.peak_tflops("bf16") == h20.peak_tflops("bf16") and big.peak_tflops("fp8") == h20.peak_tflops("fp8")
    assert (big.hbm_tb_s, big.memory_gb) == (h200.hbm_tb_s, h200.memory_gb)
    # so its ridge point (B where decode turns compute-bound) sits lower than the 96 GB part's: more bandwidth,
    # the same FLOPs. 148 x 0.6 / (4.8 x 0.8) = 23.1 and 148 x 0.6 / (4.0 x 0.8) = 27.75 tokens: at B = 25 the
    # 141 GB part's step is already compute-bound (slower than at B = 1), the 96 GB part's still memory-bound
    for gpu, compute_bound in ((big, True), (h20, False)):
        ms, _ = step_time_ms(get_shape("qwen3-8b"), gpu, np.array([1, 25]), 0)
        assert (ms[1] > ms[0]) == compute_bound


@pytest.mark.parametrize("spelling", ["H20-141G", "h20_141g", "H20_141G", "h20-141gb", "H20 141G"])
def test_aliases(spelling):
    assert get_gpu(spelling) is GPUS["H20-141G"]


def test_case_insensitive_names():
    assert get_gpu("mi355x") is GPUS["MI355X"] and get_gpu("gb300") is GPUS["GB300"]


def test_unknown_name_lists_the_known_ones_and_aliases():
    with pytest.raises(KeyError) as exc:
        get_gpu("H300")
    message = exc.value.args[0]
    assert "'H300'" in message
    for name in [*GPUS, *ALIASES]:
        assert name in message
    assert gpu_names() == sorted([*GPUS, *ALIASES])


def test_where_each_part_sits_is_data_on_its_entry():
    """Vendor, NVLink domain and kernel-database system are fields of every entry: the NVL72 parts share a rack of
    72, every other part a board (or, PCIe-only, a node) of 8; the AMD parts are the MI ones; no two entries claim
    one database system."""
    for name, g in GPUS.items():
        assert g.vendor in VENDORS
        assert g.nvlink_domain == (72 if name in ("GB200", "GB300") else 8), name
    assert {n for n, g in GPUS.items() if g.vendor == "amd"} == {"MI300X", "MI325X", "MI350X", "MI355X"}
    assert {n for n, g in GPUS.items() if g.vendor == "intel"} == {"B60"}
    systems = [g.kernel_db_system for g in GPUS.values() if g.kernel_db_system]
    assert len(systems) == len(set(systems))


def test_a_sidecars_gpu_block_holds_the_datasheet_and_a_device_file_can_say_where_it_sits(tmp_path):
    """``to_dict`` (what a sidecar records) leaves the placement out, so a device file written from it is a part
    of its own; a device file may state its vendor and NVLink domain, each checked, but not a database system."""
    h200 = GPUS["H200"].to_dict()
    assert not set(PLACEMENT) & set(h200) and h200["hbm_tb_s"] == 4.8
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(h200))
    plain = gpu_from_file(path)
    assert (plain.vendor, plain.nvlink_domain, plain.kernel_db_system) == (None, 8, None)
    path.write_text(json.dumps({**h200, "vendor": "amd", "nvlink_domain": 16}))
    assert (gpu_from_file(path).vendor, gpu_from_file(path).nvlink_domain) == ("amd", 16)
    for bad, field in (({"vendor": "acme"}, "vendor"), ({"nvlink_domain": 0}, "nvlink_domain"),
                       ({"nvlink_domain": 2.5}, "nvlink_domain"), ({"kernel_db_system": "h200_sxm"}, "kernel_db_system")):
        path.write_text(json.dumps({**h200, **bad}))
        with pytest.raises(HwProfileError, match=f"dev.json: field '{field}'"):
            gpu_from_file(path)


def test_the_amd_refreshes_are_their_siblings_compute_with_their_own_memory_and_clock():
    """MI325X: the MI300X's rates with 256 GB at 6 TB/s; MI350X: the MI355X's die at 2.2 GHz against 2.4 (every
    rate x 11/12) with the same 288 GB at 8 TB/s; the name a public run uses, MI325, reads as the MI325X."""
    mi300, mi325, mi350, mi355 = (get_gpu(n) for n in ("MI300X", "MI325", "MI350X", "MI355X"))
    assert mi325.name == "MI325X" and (mi325.memory_gb, mi325.hbm_tb_s) == (256, 6.0)
    assert (mi325.bf16_tflops, mi325.fp8_tflops, mi325.fp4_tflops) == (mi300.bf16_tflops, mi300.fp8_tflops, None)
    for field in ("bf16_tflops", "fp8_tflops", "fp4_tflops", "tf32_tflops"):
        assert getattr(mi350, field) == pytest.approx(getattr(mi355, field) * 2.2 / 2.4, abs=0.05), field
    assert (mi350.memory_gb, mi350.hbm_tb_s, mi350.tdp_w) == (288, 8.0, 1000)
