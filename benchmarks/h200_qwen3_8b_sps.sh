#!/usr/bin/env bash
# Measure the H200 step-time table of the qwen3-8b shape in bf16 (requests 1..1024, tokens per request 1..8,
# contexts 512 and 4096; points whose KV cache does not fit are skipped and recorded), then print the ratio of
# measured to analytic step time across B and whether any point throttled. About 3 minutes of measurement plus
# model build on one H200 (75 of 88 points fit); nothing here changes the GPU's clocks or power limits.
#
#   bash benchmarks/h200_qwen3_8b_sps.sh            # on a machine with one H200
#
# ./run uses .venv (or $DSPARK_VENV) and installs the CPU build of torch only when no torch is there: point
# DSPARK_VENV at an environment with a CUDA build of torch, transformers and nvidia-ml-py, or install them into
# .venv first.
#
# Writes scenarios/hardware/h200-qwen3-8b-bf16-measured.{csv,json} (+ .smooth.csv/.json) and /tmp/h200-*.
set -euo pipefail
cd "$(dirname "$0")/.."
out=scenarios/hardware/h200-qwen3-8b-bf16-measured.csv

# for the record only (read-only queries)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv

./run hw-profile sps --model qwen3-8b --device cuda --dtype bf16 \
    --requests 1..1024 --tokens-per-request 1,2,4,8 --context 512,4096 \
    --warmup 5 --repeats 30 --min-time 0.3 --throttle-retries 2 \
    --name h200-qwen3-8b-bf16-measured --out "$out"
./run hw-profile analytic --gpu H200 --model qwen3-8b --dtype bf16 --name h200-roofline --out /tmp/h200-roofline.csv
./run hw-profile compare "$out" /tmp/h200-roofline.csv --csv /tmp/h200-ratio.csv
./run hw-profile fit "$out"
./run hw-profile show "$out" /tmp/h200-roofline.csv --out /tmp/h200-vs-roofline.html

# The drafter's cost on the same GPU (one layer of the target's width, gamma 8), about a minute more:
# ./run hw-profile sps --model qwen3-8b --drafter-layers 1 --device cuda --dtype bf16 --requests 1..512 \
#     --tokens-per-request 8 --context 512,4096 --warmup 5 --repeats 30 --min-time 0.3 \
#     --name h200-qwen3-8b-drafter-1l --out scenarios/hardware/h200-qwen3-8b-drafter-1l.csv
# And the GPU-marked tests: ./run python -m pytest -m gpu tests/hw_profile
