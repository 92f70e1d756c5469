#!/usr/bin/env bash
# Measure the H200 step-time table of the qwen3-8b shape in bf16 (requests 1..1024, tokens per request 1..8,
# contexts 512 and 4096; points whose KV cache does not fit are skipped and recorded), then print the ratio of
# measured to analytic step time across B and whether any point throttled. Well over 150 s on one H200 (75 of 88
# points fit; a smaller grid, R up to 512 with 10 repeats, did not finish in 150 s there, its R = 512 t = 8 point
# alone 24 s); nothing here changes the GPU's clocks or power limits.
#
#   bash benchmarks/h200_qwen3_8b_sps.sh             # on a machine with one H200
#   bash benchmarks/h200_qwen3_8b_sps.sh --dry-run   # the same commands on the CPU, on $H200_MODEL (a small
#                                                    # transformers config.json), a handful of points, fp32
#
# ./run uses .venv (or $DSPARK_VENV) and installs the CPU build of torch only when no torch is there: point
# DSPARK_VENV at an environment with a CUDA build of torch, transformers and nvidia-ml-py, or install them into
# .venv first. With HIL_PYTHON set the commands run as `$HIL_PYTHON -m hw_profile.cli` (benchmarks/hil_gpu.sh).
#
# Writes scenarios/hardware/h200-qwen3-8b-bf16-measured.{csv,json} (+ .smooth.csv/.json; $H200_TABLE names another
# path) and, under $H200_OUT (default /tmp), h200-roofline.csv, h200-ratio.csv and h200-vs-roofline.html. A dry run
# writes everything under $H200_OUT. $H200_GRID replaces the grid and repeat flags (benchmarks/gpu_lease.sh sets a
# smaller grid to fit a short lease).
set -euo pipefail
cd "$(dirname "$0")/.."
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
aux="${H200_OUT:-/tmp}"
mkdir -p "$aux"
if [ -n "${HIL_PYTHON:-}" ]; then
    hw_profile() { "$HIL_PYTHON" -m hw_profile.cli "$@"; }
else
    hw_profile() { ./run hw-profile "$@"; }
fi

if [ "$dry" = 1 ]; then
    model="${H200_MODEL:?a dry run needs H200_MODEL: a small transformers config.json to profile on the CPU}"
    out="$aux/h200-qwen3-8b-bf16-measured.csv"
    hw_profile sps --model "$model" --device cpu --dtype fp32 \
        --requests 1,8 --tokens-per-request 1,8 --context 32 \
        --warmup 1 --repeats 3 --threads 1 --quiet \
        --name h200-qwen3-8b-dry-run --out "$out"
else
    out="${H200_TABLE:-scenarios/hardware/h200-qwen3-8b-bf16-measured.csv}"
    grid="${H200_GRID:---requests 1..1024 --tokens-per-request 1,2,4,8 --context 512,4096 --warmup 5 --repeats 30 --min-time 0.3}"
    # for the record only (read-only queries)
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv
    # shellcheck disable=SC2086  # the grid is a list of flags
    hw_profile sps --model qwen3-8b --device cuda --dtype bf16 $grid --throttle-retries 2 \
        --name h200-qwen3-8b-bf16-measured --out "$out"
fi
hw_profile analytic --gpu H200 --model qwen3-8b --dtype bf16 --name h200-roofline --out "$aux/h200-roofline.csv"
hw_profile compare "$out" "$aux/h200-roofline.csv" --csv "$aux/h200-ratio.csv"
hw_profile fit "$out"
hw_profile show "$out" "$aux/h200-roofline.csv" --out "$aux/h200-vs-roofline.html"

# The drafter's cost on the same GPU (one layer of the target's width, gamma 8), about a minute more:
# ./run hw-profile sps --model qwen3-8b --drafter-layers 1 --device cuda --dtype bf16 --requests 1..512 \
#     --tokens-per-request 8 --context 512,4096 --warmup 5 --repeats 30 --min-time 0.3 \
#     --name h200-qwen3-8b-drafter-1l --out scenarios/hardware/h200-qwen3-8b-drafter-1l.csv
# And the GPU-marked tests: ./run python -m pytest -m gpu tests/hw_profile
