#!/usr/bin/env bash
# Hardware in the loop on a GPU (prepared; not yet run: the session that wrote it had no GPU).
#
#   bash benchmarks/hil_gpu.sh            # on a machine with one H200 (or any CUDA GPU)
#
# 1. builds the full tiny world on the GPU if it is not there (a few minutes);
# 2. runs scenarios/hil-tiny.yaml with `clock: live` on CUDA: every step's draft and verification forwards are
#    timed with CUDA events, NVML samples each step (throttled steps flagged), and the measured step-time tables
#    are written to results/hil-tiny-cuda/live-tables/*-measured... (kind: live);
# 3. measures the same target shape with `hw-profile sps` (the profiler's table, same B x K range) and compares
#    the live tables against it (`hw-profile compare`: ratio of live to profiled step time per point);
# 4. runs benchmarks/h200_qwen3_8b_sps.sh (the Qwen3-8B-shaped H200 table) and bench_live.py on CUDA.
# Commit the *-measured.csv tables it leaves under scenarios/hardware/ and the printed ratios.
#
# Needs torch with CUDA, transformers and nvidia-ml-py in the environment ./run uses (DSPARK_VENV or .venv).
# Nothing here changes the GPU's clocks, power limits or MIG settings.
set -euo pipefail
cd "$(dirname "$0")/.."
python - <<'PY'
import torch, sys
sys.exit(0 if torch.cuda.is_available() else "hil_gpu.sh: torch sees no CUDA device")
PY
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv

./run dspark build-tiny --device cuda
out=results/hil-tiny-cuda
./run simulate scenarios/hil-tiny.yaml --out "$out" --jobs 1 \
    --set hardware.clock=live --set acceptance.device=cuda --records "$out/records"

cfg=.dspark-data/full/target/config.json
./run hw-profile sps --model "$cfg" --device cuda --dtype fp32 --requests 1..64 --tokens-per-request 1,2,4,8 \
    --context 64,128,256 --warmup 5 --repeats 30 --min-time 0.2 --name tiny-target-cuda-measured \
    --out scenarios/hardware/tiny-target-cuda-measured.csv
for t in "$out"/live-tables/dspark__closed-64__seed0.csv "$out"/live-tables/static-3__closed-64__seed0.csv; do
    cp "$t" "scenarios/hardware/hil-tiny-live-$(basename "$t" .csv)-measured.csv"
    cp "${t%.csv}.json" "scenarios/hardware/hil-tiny-live-$(basename "$t" .csv)-measured.json"
    ./run hw-profile compare "$t" scenarios/hardware/tiny-target-cuda-measured.csv
done
bash benchmarks/h200_qwen3_8b_sps.sh
./run python benchmarks/bench_live.py --device cuda --requests 64
