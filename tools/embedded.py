"""The embedded tables, so the simulator runs without a GPU:

- an H200 serving a Qwen3-8B-shaped dense target in bf16, and its drafters' costs, from the roofline model
  (hw_profile/kernels/roofline.py), and the same set for a B200 (its datasheet figures in hw_profile/hardware/gpus.py, the same
  efficiencies and launch overhead), so that a plan can compare the two (``simulate plan --hardware``);
- one H800 rank of a DeepSeek-style decode deployment (the real DeepSeek-V4-Flash shape, fp8 with fp4 experts,
  data-parallel attention over an expert-parallel group of 64 GPUs; hw_profile/estimate/dp_ep.py) with a DSpark drafter of
  three MoE layers with 128-token sliding-window attention (the paper's V4 drafter, section 5.1) and the
  one-MoE-layer MTP module: the first-principles alternative to the tables calibrated on the paper's telemetry
  (tools/paper_v4.py; docs/paper-v4.md says why their per-token costs differ).

    python -m tools.embedded regenerate [--out-dir DIR]  # every set, into scenarios/hardware/ by default
    python -m tools.embedded regenerate --gpu B200       # only the Qwen3-8B set of one GPU
    python -m tools.embedded --help

For a GPU or model without embedded tables, ``hw-profile analytic`` writes the target's table and, with
``--drafter-layers N``, a drafter's (with DSpark's head costs in its sidecar); docs/hw-profile.md says how.

Drafters are timed as generic transformers of the target's width (docs/model.md, "Step time"): DSpark and DFlash a 5-layer
backbone with the shared full-vocabulary LM head; Eagle3 one layer with its reduced 32k draft vocabulary; the MTP
module one layer with the full LM head. DSpark's sequential Markov head (rank 256) is recorded in the DSpark
entry's sidecar as a per-position cost, since it runs once per draft position after the backbone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hw_profile.estimate.dp_ep import DpEpParams, dp_ep_table
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import drafter_shape, get_shape
from hw_profile.kernels.roofline import RooflineParams, analytic_table, drafter_params, markov_head_costs

HARDWARE_DIR = Path(__file__).resolve().parents[1] / "scenarios" / "hardware"
MARKOV_RANK = 256
QWEN3_GPUS = ("H200", "B200")  # the GPUs with an embedded Qwen3-8B roofline set


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
    head = markov_head_costs(gpu, MARKOV_RANK, target.vocab, dtype, params)
    main = analytic_table(target, gpu, dtype=dtype, params=params, name=stem)
    main.meta["drafter_tables"] = {
        "dspark": {"table": f"{stem}.drafter-5l.csv", "sequential_head": head},
        "dflash": {"table": f"{stem}.drafter-5l.csv"},
        "eagle3": {"table": f"{stem}.drafter-1l-v32k.csv"},
        "mtp": {"table": f"{stem}.drafter-1l.csv"},
    }
    written.append(main.write(out_dir / f"{stem}.csv"))
    return written


def write_deepseek_dp_ep(out_dir: Path = HARDWARE_DIR, gpu_name: str = "H800", dtype: str = "fp8",
                         params: DpEpParams = DpEpParams(), model: str = "deepseek-v4-flash") -> list[Path]:
    gpu = get_gpu(gpu_name)
    target = get_shape(model)
    stem = f"{gpu_name.lower()}-{model}-ep{params.ep}-{dtype}"
    # drafters of the target's own MoE layers; their attention is the 128-token window only (no compressed rows),
    # which the simulator applies through attention_window
    dspark = drafter_shape(target, 3, name="dspark-3moe-swa128")
    mtp = drafter_shape(target, 1, name="mtp-1moe")
    written = []
    for key, shape in (("drafter-dspark-3moe", dspark), ("drafter-mtp-1moe", mtp)):
        # a drafter's launch overhead is its layers' share of the target's (roofline.drafter_params)
        roofline = drafter_params(RooflineParams(), shape.layers, target.layers)
        written.append(dp_ep_table(shape, gpu, dtype=dtype, params=params, roofline=roofline,
                                   name=f"{stem}.{key}").write(out_dir / f"{stem}.{key}.csv"))
    head = markov_head_costs(gpu, MARKOV_RANK, target.vocab, dtype)
    main = dp_ep_table(target, gpu, dtype=dtype, params=params, name=stem)
    main.meta["drafter_tables"] = {
        "dspark": {"table": f"{stem}.drafter-dspark-3moe.csv", "sequential_head": head, "attention_window": 128},
        "mtp": {"table": f"{stem}.drafter-mtp-1moe.csv", "attention_window": 128},
    }
    written.append(main.write(out_dir / f"{stem}.csv"))
    return written


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.embedded",
        description="Regenerate the step-time tables bundled with the simulator (scenarios/hardware/): the H200 "
                    "and B200 Qwen3-8B roofline sets and the H800 DeepSeek-V4-Flash expert-parallel set, with "
                    "their drafters.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    regen = sub.add_parser("regenerate", help="write every set (overwrites the bundled tables unless --out-dir)")
    regen.add_argument("--out-dir", type=Path, default=HARDWARE_DIR, help=f"default: {HARDWARE_DIR}")
    regen.add_argument("--gpu", choices=QWEN3_GPUS,
                       help="write only this GPU's Qwen3-8B set (leaves the other bundled tables as they are)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.command != "regenerate":
        p.print_help(sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.gpu:
        written = write_embedded(args.out_dir, args.gpu)
    else:
        written = [*(p for gpu in QWEN3_GPUS for p in write_embedded(args.out_dir, gpu)),
                   *write_deepseek_dp_ep(args.out_dir)]
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
