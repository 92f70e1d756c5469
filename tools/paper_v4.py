"""Step-time tables of the paper's DeepSeek-V4 deployments, calibrated on MTP-1's production telemetry only.

    python -m tools.paper_v4   # writes scenarios/hardware/paper-v4-{flash,pro}-calibrated.*

Input: the MTP-1 lines of the DSpark paper's Figure 8 (throughput per GPU against concurrent requests per GPU,
scenarios/reference/paper_fig7_fig8_mtp1.csv, provenance in the README beside it). What the figure cannot say is
assumed, each stated here and in the sidecar:

- MTP-1's tau: 1.875 emitted tokens per request-step. The DeepSeek-V3 technical report (section 5.4.3) measures
  85-90% acceptance of the second token; the midpoint is 0.875.
- verification budget: 2 tokens per request-step (Figure 8c/d shows MTP-1 at a constant 2);
- one GPU is one data-parallel rank that steps alone on its own batch (DeepSeek's DP attention + EP decode), so
  Figure 8's concurrency per GPU is the running batch R of one replica;
- mean context per running request: ``CONTEXT`` tokens, the time-average context of the scenarios' assumed
  workload (prompt lognormal median 2048, output lognormal median 1024; see the scenario files);
- per-KV-token cost: from the real V4 shape, its KV reads per context token (indexer keys and 128x-compressed rows,
  ``ModelShape.kv_read_bytes_per_token``) in fp8 over the H800's achieved HBM bandwidth; one curve at one context
  cannot separate it from the per-token cost, and it is small (under 3% of a step at the largest concurrency);
- the MTP module's share of the observed step: one V4 layer plus the shared LM head on one token per request,
  counted in layer-equivalents (the head's parameters over an average layer's active parameters) and reading at
  most the 128-token window (V4's MTP layer is window-only), so the calibrated table is the target alone.

Drafter tables are the same calibrated costs scaled to the drafter's layer-equivalents: the MTP module's (as
subtracted above) and DSpark's V4 drafter (paper 5.1: three MoE layers with 128-token sliding-window attention and
the shared head, gamma 5, plus the rank-256 Markov head whose cost the roofline gives per position). Everything
here is a function of the MTP-1 curves and the stated assumptions; DSpark's own curves are not read.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from hw_profile.calibrate.calibrate import Calibration, DraftShare, calibrated_table, fit
from hw_profile.calibrate.observations import Assumptions, read_telemetry
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import ModelShape, get_shape
from hw_profile.kernels.roofline import (
    DTYPE_BYTES,
    RooflineParams,
    markov_head_costs,
    stored_weight_bytes_per_gpu,
)
from hw_profile.tables.sidecar import memory_fields

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "scenarios" / "reference" / "paper_fig7_fig8_mtp1.csv"
HARDWARE_DIR = ROOT / "scenarios" / "hardware"
MTP1_TAU = 1.875  # DeepSeek-V3 report: 85-90% acceptance of the second token
MTP1_BUDGET = 2.0
CONTEXT = 4700  # mean context of a running request under the scenarios' workload (see the module docstring)
GPU = "H800"
KV_DTYPE = "fp8"
WINDOW = 128
DSPARK_LAYERS = 3
MARKOV_RANK = 256
MODELS = {"flash": "deepseek-v4-flash", "pro": "deepseek-v4-pro"}
# the target tables' K axis reaches past the scenarios' KV capacity (8M tokens for Flash), so that `simulate check`
# finds no step beyond the grid; the fit is linear in K, so the extra rows change no lookup
MAX_KV_TOKENS = 16_777_216


def head_layer_equivalents(shape: ModelShape) -> float:
    """The LM head's active parameters in units of an average layer's."""
    per_layer = (shape.matmul_params - shape.head_params) / shape.layers
    return shape.head_params / per_layer


def kv_ns_per_token(shape: ModelShape, gpu_name: str = GPU, dtype: str = KV_DTYPE) -> float:
    gpu = get_gpu(gpu_name)
    byts = shape.kv_read_bytes_per_token * DTYPE_BYTES[dtype] / 2.0
    return byts / (gpu.hbm_tb_s * 1e12 * RooflineParams().mem_eff) * 1e9


def calibrate_model(key: str, reference: Path = REFERENCE) -> tuple[Calibration, dict, ModelShape]:
    shape = get_shape(MODELS[key])
    assume = Assumptions(tau=MTP1_TAU, verify_budget=MTP1_BUDGET, context=CONTEXT, gpus_per_replica=1)
    where = {"figure": "fig8", "model": f"v4-{key}", "system": "mtp-1"}
    obs, inputs = read_telemetry(reference, assume, where=where)
    mtp = DraftShare(draft_layers=1 + head_layer_equivalents(shape), layers=shape.layers, draft_window=WINDOW)
    cal = fit(obs, kv_ns_per_token=kv_ns_per_token(shape), draft=mtp, form="linear")
    inputs.update(where=where, assumed={"tau": MTP1_TAU, "verify_budget": MTP1_BUDGET, "context": CONTEXT,
                                        "gpus_per_replica": 1, "kv_cost_from": f"{shape.name} on {GPU}, {KV_DTYPE}"})
    return cal, inputs, shape


def drafter_calibration(cal: Calibration, layer_equivalents: float, layers: int) -> Calibration:
    """The target's calibrated costs scaled to a drafter of ``layer_equivalents`` layers."""
    f = layer_equivalents / layers
    return replace(cal, fixed_ms=cal.fixed_ms * f, ms_per_token=cal.ms_per_token * f,
                   ms_per_kv_token=cal.ms_per_kv_token * f, iso_b=None, iso_ms=None, form="linear",
                   notes=[*cal.notes, f"drafter: {layer_equivalents:.2f} of the target's {layers} layer-equivalents"])


def write_paper_v4(out_dir: Path = HARDWARE_DIR, reference: Path = REFERENCE) -> list[Path]:
    written = []
    gpu = get_gpu(GPU)
    for key in MODELS:
        cal, inputs, shape = calibrate_model(key, reference)
        stem = f"paper-v4-{key}-calibrated"
        head = head_layer_equivalents(shape)
        common = {"device": f"{GPU} (assumed)", "gpu": gpu.to_dict(), "gpus": 1, "dtype": "fp8",
                  "model_shape": shape.to_dict(),
                  **memory_fields(shape, "fp8", head_split=1, gpus=1,
                                  weight_bytes_per_gpu=stored_weight_bytes_per_gpu(shape, "fp8", 1),
                                  device_memory_gb=gpu.device_memory_bytes / 1e9)}
        drafters = {
            "mtp": (1 + head, {}),
            "dspark": (DSPARK_LAYERS + head, {"sequential_head": markov_head_costs(gpu, MARKOV_RANK, shape.vocab,
                                                                                    "fp8")}),
        }
        entries = {}
        for name, (equiv, extra) in drafters.items():
            dcal = drafter_calibration(cal, equiv, shape.layers)
            table = calibrated_table(dcal, name=f"{stem}.drafter-{name}", inputs=inputs,
                                     meta={**common, "attention_window": WINDOW, **extra})
            written.append(table.write(out_dir / f"{stem}.drafter-{name}.csv"))
            entries[name] = {"table": f"{stem}.drafter-{name}.csv", "attention_window": WINDOW, **extra}
        main = calibrated_table(cal, name=stem, inputs=inputs, max_kv_tokens=MAX_KV_TOKENS,
                                meta={**common, "drafter_tables": entries})
        main.meta["command"] = "python -m tools.paper_v4"
        written.append(main.write(out_dir / f"{stem}.csv"))
    return written


def main() -> int:
    for path in write_paper_v4():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
