#!/usr/bin/env bash
# Every GPU measurement the project makes, in one bounded run that fits a short lease of one GPU (an H200).
#
#   bash benchmarks/gpu_lease.sh OUT            # on a machine with one CUDA GPU: 9.5 minutes at most
#   bash benchmarks/gpu_lease.sh OUT --dry-run  # the same steps on the CPU with tiny sizes (the tests run it)
#
# Steps, each under its own time limit, each run whether or not the one before it succeeded (a lease is too short
# to lose the rest to one failure), each logged to OUT/logs/NAME.log, its time and exit code to OUT/logs/steps.tsv:
#   1. environment: torch, transformers, the GPU as nvidia-smi reports it (read-only queries)       10 s
#   2. the Qwen3-8B-shaped step-time table, CUDA graphs, R 1..256 x t 1,2,4,8 x K 512, 4096
#      (benchmarks/h200_qwen3_8b_sps.sh with a smaller grid; its ratio to the roofline)         160 s
#   3. eager steps against graph replays, and the kernels one forward launches
#      (benchmarks/eager_launches.py: the staircase's eager floor)                                 80 s
#   4. hw-profile peaks: the achieved bf16 matmul rate and weight-streaming bandwidth               20 s
#   5. hardware in the loop (benchmarks/hil_gpu.sh --h200-table: the live clock with NVML on the tiny
#      world, its profiled table, live / profiled, bench_live); the tiny world must be built already
#      ($DSPARK_DATA/full: `dspark build-tiny` on any machine, then carried along)                    180 s
#   6. the drafters' tables on the same shape: one layer (MTP, EAGLE-style) and five layers with
#      DSpark's Markov and confidence heads (DSpark, DFlash), R 1..128 x t 1,8 x K 512, 4096         2 x 50 s
# The limits come from the one lease so far (benchmarks/data/h200-lease/steps.tsv): on an H200 the grid the target
# step had then (R up to 512) needed more than 150 s, its R = 512 points over 50 s of it; each drafter's R = 256
# point at K = 4096 came after 50 s; hardware in the loop took 153 s, the eager launches 65 s. A profile stopped by
# its limit keeps its points and a whole sidecar (hw-profile sps takes SIGTERM as Ctrl-C).
# Tables land in OUT/tables/. With LEASE_ARCHIVE=FILE.tgz, OUT is archived there after every step, so a run stopped
# at the lease's limit keeps what it measured. Commands run as `$HIL_PYTHON -m ...` when HIL_PYTHON is set (a GPU
# machine's own Python, with this checkout on PYTHONPATH), else through ./run. Step 5 needs the project installed
# there (`$HIL_PYTHON -m pip install --no-deps --no-build-isolation -e .`), not only on PYTHONPATH: the acceptance
# source `live` is found as an entry point. Nothing here changes the GPU's clocks, power limits or MIG settings.
set -uo pipefail
cd "$(dirname "$0")/.."

out="${1:?usage: gpu_lease.sh OUT [--dry-run]}"
dry=0
case "${2:-}" in
    --dry-run) dry=1 ;;
    "") ;;
    *) echo "gpu_lease.sh: unknown argument '$2' (expected --dry-run or nothing)" >&2; exit 2 ;;
esac
mkdir -p "$out/logs" "$out/tables"
out="$(cd "$out" && pwd)"
if [ -n "${HIL_PYTHON:-}" ]; then
    hw_profile() { "$HIL_PYTHON" -m hw_profile.cli "$@"; }
    py() { "$HIL_PYTHON" "$@"; }
else
    hw_profile() { ./run hw-profile "$@"; }
    py() { ./run python "$@"; }
fi
: > "$out/logs/steps.tsv"
failed=0

# step NAME SECONDS COMMAND...: run one step under its limit, output to its log; go on whatever it returns.
step() {
    local name="$1" limit="$2" t0=$SECONDS rc=0
    shift 2
    printf 'gpu_lease %s (limit %d s) ... ' "$name" "$limit" >&2
    timeout --kill-after=10 "$limit" bash -c "$(declare -f hw_profile py); $(declare -p dry out); $*" \
        > "$out/logs/$name.log" 2>&1 || rc=$?
    printf '%s\t%d\t%d\n' "$name" "$((SECONDS - t0))" "$rc" >> "$out/logs/steps.tsv"
    if [ "$rc" = 0 ]; then
        echo "ok ($((SECONDS - t0)) s)" >&2
    else
        failed=$((failed + 1))
        echo "exit $rc$([ "$rc" = 124 ] && echo ': time limit') ($((SECONDS - t0)) s)" >&2
        tail -n 5 "$out/logs/$name.log" | sed 's/^/    | /' >&2
    fi
    if [ -n "${LEASE_ARCHIVE:-}" ]; then
        tar czf "$LEASE_ARCHIVE.part" -C "$out" . && mv "$LEASE_ARCHIVE.part" "$LEASE_ARCHIVE"
    fi
}

if [ "$dry" = 1 ]; then
    data="${DSPARK_DATA:-$out/dspark-data}"
    model="$out/tiny-qwen3.json"
    printf '%s\n' '{"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512, "tie_word_embeddings": true}' \
        > "$model"
    device=cpu
    table_grid="--requests 1,4 --tokens-per-request 1,4 --context 16 --warmup 1 --repeats 2 --threads 1"
    eager_grid="--requests 1,4 --tokens-per-request 1 --context 16 --repeats 3"
    drafter_grid="--requests 1,4 --tokens-per-request 8 --context 16 --warmup 1 --repeats 2 --threads 1 --markov-rank 8"
    hil="--dry-run"
else
    data="${DSPARK_DATA:-.dspark-data}"
    model=qwen3-8b
    device=cuda
    table_grid="--requests 1..256 --tokens-per-request 1,2,4,8 --context 512,4096 --warmup 3 --repeats 10 --min-time 0.15"
    eager_grid="--requests 1,4,16,64,256,512 --tokens-per-request 1,4 --context 512 --repeats 20"
    drafter_grid="--requests 1..128 --tokens-per-request 1,8 --context 512,4096 --warmup 3 --repeats 10 --min-time 0.1 --markov-rank 256"
    hil=""
fi
export DSPARK_DATA="$data"
table="$out/tables/h200-qwen3-8b-bf16-measured.csv"

step environment 10 "py -c 'import torch, transformers; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda,
    \"transformers\", transformers.__version__, \"| device\", torch.cuda.get_device_name(0) if torch.cuda.is_available()
    else \"cpu\")'; [ \"\$dry\" = 1 ] || nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv"
if [ "$dry" = 1 ]; then
    step target-table 160 "hw_profile sps --model '$model' --device cpu --dtype fp32 $table_grid --quiet \
        --name h200-qwen3-8b-dry-run --out '$table'"
else
    step target-table 160 "H200_TABLE='$table' H200_OUT='$out/h200' H200_GRID='$table_grid' \
        bash benchmarks/h200_qwen3_8b_sps.sh"
fi
step eager-launches 80 "py benchmarks/eager_launches.py --model '$model' --device $device $eager_grid \
    --out '$out/tables/eager-launches.json'"
step peaks 20 "hw_profile peaks --device $device --dtype $([ "$dry" = 1 ] && echo fp32 || echo bf16) \
    $([ "$dry" = 1 ] && echo '--threads 1') --out '$out/tables/device-peaks.json'"
if [ -f "$table" ]; then
    step hil 180 "HIL_OUT='$out/hil' HIL_HARDWARE='$out/tables' bash benchmarks/hil_gpu.sh $hil --h200-table '$table'"
else
    step hil 180 "echo 'no target table from step 2 to compare with'; exit 1"
fi
for layers in 1 5; do
    rank=""
    [ "$layers" = 1 ] && rank="--markov-rank 0"
    step "drafter-${layers}l" 50 "hw_profile sps --model '$model' --device $device \
        $([ "$dry" = 1 ] && echo '--dtype fp32') --drafter-layers $layers $drafter_grid $rank --quiet \
        --name h200-qwen3-8b-bf16-drafter-${layers}l-measured --out '$out/tables/h200-qwen3-8b-bf16-drafter-${layers}l-measured.csv'"
done
echo "gpu_lease.sh: $failed of 7 steps failed; logs under $out/logs" >&2
[ "$failed" = 0 ]
