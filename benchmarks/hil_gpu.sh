#!/usr/bin/env bash
# Hardware in the loop on a GPU, and its dry run on the CPU.
#
#   bash benchmarks/hil_gpu.sh              # on a machine with one H200 (or any CUDA GPU): well under 10 minutes
#   bash benchmarks/hil_gpu.sh --dry-run    # every step on the CPU with tiny sizes (the test suite runs this)
#   bash benchmarks/hil_gpu.sh --h200-table TABLE.csv   # step 6 takes a table measured already (gpu_lease.sh)
#
# Steps (each prints one line; its output goes to a log; the first that fails stops the script with one line
# naming it, after the tail of its log):
#   1. the environment: torch sees CUDA; the GPU as nvidia-smi reports it (read-only queries);
#   2. builds the full tiny world on the GPU if it is not there;
#   3. scenarios/hil-tiny.yaml with `clock: live` on CUDA (static-3 and dspark, 64 users): every step's prefill,
#      draft and verification forwards timed with CUDA events, NVML sampled around each step (throttled steps
#      flagged), the measured step-time tables written under OUT/live-tables/ (kind: live);
#   4. `hw-profile sps` of the same target shape (the profiler's table, over the B x K range a live run reaches);
#   5. `hw-profile compare` of each live table against it (live / profiled step time per point);
#   6. benchmarks/h200_qwen3_8b_sps.sh: the Qwen3-8B-shaped H200 table;
#   7. benchmarks/bench_live.py on the device;
#   8. the one-screen summary (benchmarks/hil_gpu_summary.py): live vs profiled step times, throttled steps, the
#      measured H200 table's spread, what each step took.
# A real run leaves the *-measured.{csv,json} tables under scenarios/hardware/ ($HIL_HARDWARE names another folder)
# to commit with the summary.
#
# The dry run takes the same steps with CPU stand-ins: the smoke world (in $DSPARK_DATA when set, else a
# temporary directory), the live run with `acceptance.gpu_stand_in: true` (the GPU path's event pairs timed on the
# host clock, and hw_profile's NVML sampler reading the host through dspark_runtime/live/standins.py), a few
# simulated hundredths of a second at 4 users, profiles of a handful of points, and everything written under
# $HIL_OUT (default: a temporary directory), never under scenarios/.
#
# Commands run through ./run (its .venv, or $DSPARK_VENV); with HIL_PYTHON set they run as `$HIL_PYTHON -m ...`
# in this checkout instead (what the test does). A GPU run needs torch with CUDA, transformers and nvidia-ml-py
# there. Nothing here changes the GPU's clocks, power limits or MIG settings.
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0
h200_given=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry=1 ;;
        --h200-table)
            h200_given="${2:?--h200-table needs the path of a measured table}"
            [ -f "$h200_given" ] || { echo "hil_gpu.sh: --h200-table $h200_given: no such file" >&2; exit 2; }
            shift ;;
        *) echo "hil_gpu.sh: unknown argument '$1' (expected --dry-run, --h200-table PATH or nothing)" >&2; exit 2 ;;
    esac
    shift
done

if [ -n "${HIL_PYTHON:-}" ]; then
    simulate() { "$HIL_PYTHON" -m simulator.cli "$@"; }
    hw_profile() { "$HIL_PYTHON" -m hw_profile.cli "$@"; }
    dspark() { "$HIL_PYTHON" -m dspark_runtime.cli "$@"; }
    py() { "$HIL_PYTHON" "$@"; }
    export HIL_PYTHON
else
    simulate() { ./run simulate "$@"; }
    hw_profile() { ./run hw-profile "$@"; }
    dspark() { ./run dspark "$@"; }
    py() { ./run python "$@"; }
fi

if [ "$dry" = 1 ]; then
    out="${HIL_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/hil-gpu-dry.XXXXXX")}"
    data="${DSPARK_DATA:-$out/dspark-data}"
    world="$data/smoke"
    device=cpu
    hardware="$out/hardware"
else
    out="${HIL_OUT:-results/hil-tiny-cuda}"
    data="${DSPARK_DATA:-.dspark-data}"
    world="$data/full"
    device=cuda
    hardware="${HIL_HARDWARE:-scenarios/hardware}"
fi
mkdir -p "$out/logs" "$hardware"
export DSPARK_DATA="$data"
live="$out/live"
total=8
n=0
started=$SECONDS
: > "$out/logs/steps.tsv"

# step NAME COMMAND...: run one step, its output to a log; stop at the first failure with one clear line.
step() {
    local name="$1"; shift
    n=$((n + 1))
    local log="$out/logs/step$n.log" t0=$SECONDS rc=0
    printf 'hil_gpu [%d/%d] %s ... ' "$n" "$total" "$name" >&2
    "$@" >"$log" 2>&1 || rc=$?
    printf '%s\t%s\t%d\t%d\n' "$n" "$name" "$((SECONDS - t0))" "$rc" >> "$out/logs/steps.tsv"
    if [ "$rc" != 0 ]; then
        echo "failed" >&2
        tail -n 15 "$log" | sed 's/^/    | /' >&2
        echo "hil_gpu.sh: FAILED at step $n/$total ($name): exit $rc; full log: $log" >&2
        exit 1
    fi
    echo "ok ($((SECONDS - t0)) s)" >&2
}

environment() {
    if [ "$dry" = 1 ]; then
        py - <<'PY'
import torch
from hw_profile.measure.telemetry import NvmlSampler
from dspark_runtime.live.standins import HostNvml
print("dry run on the CPU: torch", torch.__version__, "| NVML stand-in:", NvmlSampler.open("cuda", nvml=HostNvml()).device_info())
PY
    else
        py - <<'PY' || return 1
import sys, torch
if not torch.cuda.is_available():
    sys.exit("torch sees no CUDA device (a CUDA build of torch and a GPU are needed; --dry-run runs on the CPU)")
print("torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name(0))
PY
        nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv
    fi
}

build_world() {
    if [ -f "$world/build.json" ]; then  # built already (perhaps elsewhere, and carried here)
        echo "$world: built ($(head -c 200 "$world/build.json" | tr -d '\n'))"
    elif [ "$dry" = 1 ]; then
        dspark build-tiny --size smoke --data-dir "$data" --device cpu --threads 1 --quiet
    else
        dspark build-tiny --data-dir "$data" --device cuda
    fi
}

live_run() {
    local sets=(--set hardware.clock=live --set "acceptance.device=$device" --set "acceptance.runtime=$world"
                --set "systems=[static-3, dspark]" --set sla.baseline=static-3)
    if [ "$dry" = 1 ]; then
        sets+=(--set acceptance.gpu_stand_in=true --set "frontier.concurrency=[4]" --set run.duration_s=0.3
               --set run.warmup_s=0.01 --set workload.prompt=16 --set "workload.output={dist: uniform, low: 2, high: 8}")
    else
        sets+=(--set "frontier.concurrency=[64]" --set run.duration_s=10 --set run.warmup_s=1)
    fi
    simulate scenarios/hil-tiny.yaml --out "$live" --jobs 1 "${sets[@]}" --records "$live/records"
}

profile_target() {
    if [ "$dry" = 1 ]; then
        hw_profile sps --model "$world/target/config.json" --device cpu --dtype fp32 --requests 1,4 \
            --tokens-per-request 1,8 --context 32 --warmup 1 --repeats 3 --threads 1 --quiet \
            --name tiny-target-cpu-dry-run --out "$hardware/tiny-target-measured.csv"
    else
        hw_profile sps --model "$world/target/config.json" --device cuda --dtype fp32 --requests 1..64 \
            --tokens-per-request 1,2,4,8 --context 64,128,256 --warmup 5 --repeats 30 --min-time 0.2 \
            --name tiny-target-cuda-measured --out "$hardware/tiny-target-cuda-measured.csv"
    fi
}

compare_live() {
    local profiled ok=0
    profiled=$(ls "$hardware"/tiny-target*-measured.csv | head -n 1)
    for t in "$live"/live-tables/*__seed0.csv; do
        [ -e "$t" ] || continue
        ok=1
        local system; system=$(basename "$t" .csv)
        hw_profile compare "$t" "$profiled" --csv "$out/compare-${system}.csv" || return 1
        if [ "$dry" = 0 ]; then
            cp "$t" "$hardware/hil-tiny-live-${system}-measured.csv"
            cp "${t%.csv}.json" "$hardware/hil-tiny-live-${system}-measured.json"
        fi
    done
    [ "$ok" = 1 ] || { echo "no live table under $live/live-tables (did the live run measure any step?)"; return 1; }
}

h200_table() {
    if [ -n "$h200_given" ]; then  # measured already: only its ratio to the roofline, for the summary
        mkdir -p "$out/h200"
        hw_profile analytic --gpu H200 --model qwen3-8b --dtype bf16 --name h200-roofline --out "$out/h200/h200-roofline.csv" &&
            hw_profile compare "$h200_given" "$out/h200/h200-roofline.csv" --csv "$out/h200/h200-ratio.csv"
    elif [ "$dry" = 1 ]; then
        H200_OUT="$out/h200" H200_MODEL="$world/target/config.json" bash benchmarks/h200_qwen3_8b_sps.sh --dry-run
    else
        H200_OUT="$out/h200" bash benchmarks/h200_qwen3_8b_sps.sh
    fi
}

bench() {
    if [ "$dry" = 1 ]; then
        py benchmarks/bench_live.py --runtime "$world" --device cpu --requests 4 --steps 2 --seconds 0.05
    else
        py benchmarks/bench_live.py --runtime "$world" --device cuda --requests 64
    fi
}

summary() {
    local h200=scenarios/hardware/h200-qwen3-8b-bf16-measured.csv
    [ "$dry" = 1 ] && h200="$out/h200/h200-qwen3-8b-bf16-measured.csv"
    [ -n "$h200_given" ] && h200="$h200_given"
    py benchmarks/hil_gpu_summary.py "$out" --h200 "$h200" $([ "$dry" = 1 ] && echo --dry-run)
}

step "environment" environment
step "tiny world ($world)" build_world
step "hil-tiny, clock: live on $device" live_run
step "hw-profile sps of the tiny target" profile_target
step "hw-profile compare: live / profiled" compare_live
step "H200 Qwen3-8B table (h200_qwen3_8b_sps.sh)" h200_table
step "bench_live on $device" bench
n=$((n + 1))
printf '%s\t%s\t%d\t%d\n' "$n" "summary" 0 0 >> "$out/logs/steps.tsv"
summary || { echo "hil_gpu.sh: FAILED at step $n/$total (summary): see above" >&2; exit 1; }
echo "hil_gpu.sh: done in $((SECONDS - started)) s; outputs under $out" >&2
