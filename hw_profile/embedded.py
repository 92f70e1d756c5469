"""The embedded default tables: an H200 serving a Qwen3-8B-shaped dense target in bf16, and its drafters' costs,
all from the roofline model (hw_profile/roofline.py), so the simulator runs without a GPU.

    python -m hw_profile.embedded        # regenerate scenarios/hardware/h200-qwen3-8b-*.csv

Drafters are timed as generic transformers of the target's width (DESIGN.md): DSpark and DFlash a 5-layer
backbone with the shared full-vocabulary LM head; Eagle3 one layer with its reduced 32k draft vocabulary; the MTP
module one layer with the full LM head. DSpark's sequential Markov head (rank 256) is recorded in the DSpark
entry's sidecar as a per-position cost, since it runs once per draft position after the backbone.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hw_profile.gpus import get_gpu
from hw_profile.roofline import DTYPE_BYTES, RooflineParams, analytic_table
from hw_profile.shapes import drafter_shape, get_shape

HARDWARE_DIR = Path(__file__).resolve().parents[1] / "scenarios" / "hardware"
MARKOV_RANK = 256


def write_embedded(out_dir: Path = HARDWARE_DIR, gpu_name: str = "H200", model: str = "qwen3-8b",
                   dtype: str = "bf16") -> list[Path]:
    gpu = get_gpu(gpu_name)
    target = get_shape(model)
    stem = f"{gpu_name.lower()}-{model}-{dtype}"
    shapes = {
        "drafter-5l": drafter_shape(target, 5),
        "drafter-1l": drafter_shape(target, 1),
        "drafter-1l-v32k": drafter_shape(target, 1, vocab=32000),
    }
    params = RooflineParams()
    written = []
    for key, shape in shapes.items():
        table = analytic_table(shape, gpu, dtype=dtype, params=params, name=f"{stem}.{key}")
        written.append(table.write(out_dir / f"{stem}.{key}.csv"))
    # DSpark's Markov head per draft position: rank x vocab weights read once, 2 x rows x rank x vocab flops
    wbytes = DTYPE_BYTES[dtype]
    head = {
        "per_position_ms": MARKOV_RANK * target.vocab * wbytes / (gpu.hbm_tb_s * 1e12 * params.mem_eff) * 1e3,
        "per_row_position_ms": 2.0 * MARKOV_RANK * target.vocab / (gpu.bf16_tflops * 1e12 * params.comp_eff) * 1e3,
        "rank": MARKOV_RANK,
    }
    main = analytic_table(target, gpu, dtype=dtype, params=params, name=stem)
    main.meta["drafter_tables"] = {
        "dspark": {"table": f"{stem}.drafter-5l.csv", "sequential_head": head},
        "dflash": {"table": f"{stem}.drafter-5l.csv"},
        "eagle3": {"table": f"{stem}.drafter-1l-v32k.csv"},
        "mtp": {"table": f"{stem}.drafter-1l.csv"},
    }
    written.append(main.write(out_dir / f"{stem}.csv"))
    return written


def main() -> int:
    for path in write_embedded():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
