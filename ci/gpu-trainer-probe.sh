#!/usr/bin/env bash
# The trainer's fusion questions in one short GPU call (issue 39), bounded by a budget:
#   1. tests:   the GPU tests of the fused residual block end (its kernels and a model,
#               gpu.cudnn.residual; one block's passes against the unfused and the CPU's,
#               gpu.cudnn.block) and of the convolution with fused statistics
#               (gpu.cudnn.fusion);
#   2. probe:   accord-fusion-probe: which fused batch-norm patterns cuDNN has engines for
#               on this GPU at ResNet-50's shapes, and their times against today's passes;
#   3. trainer: accord-resnet ResNet-50 bf16 at batch 256, 20 timed steps (after an epoch
#               of 20 that warms up), graphed and layer by layer (the latter with
#               --gpu-profile), each without and with --fuse-residual, and graphed with
#               the stem's input padded to 4 channels (--pad-input 4), without and with;
#   4. data:    the same graphed run on JPEGs (5120 photos of 256-500 px from
#               accord-make-jpegs, packed by accord-pack) decoded by this machine's CPU
#               cores, with ACCORD_PROBE_WORKERS data workers (default: the cores less
#               two) and half as many, against synthetic data in the same call: img/s and
#               the data wait's share of the epoch (the issue's bound: under 5%); and the
#               loader alone (accord-data-bench) with as many workers, what the cores
#               can decode at most.
# Results go to $OUT (the device tool's folder; ./gpu-trainer-probe-out elsewhere): a
# summary (printed last) and the logs in one archive.
#
# On the device machine, after ACCORD_DEVICE_TARGETS=gpu bash ci/device-prepare.sh here
# (carry build-device, .debs, .data):
#   bash ci/device-run.sh bash ci/gpu-trainer-probe.sh --budget 120
#
#   bash ci/gpu-trainer-probe.sh [--budget SECONDS] [--rehearse] [tests] [probe] [trainer] [data]
# runs the steps named (all when none is). --budget (default 120) bounds the whole run:
# each step gets at most what is left, the probe stops starting rows in time, and the
# trainer runs that no longer fit are reported NOT RUN. --rehearse goes on without a GPU
# (each step then fails fast), to check the plumbing on a build machine.
# ACCORD_PROBE_BUILD names the build folder (default build); ACCORD_PROBE_TESTS the GPU
# tests, as gpu.cudnn.<tags> (default residual|block|fusion; half adds batch norm's own
# backward against the CPU's, about 20 s more); ACCORD_PROBE_SEARCH=1 adds
# --cudnn-search to the trainer runs (the published figures' setting; its first epoch
# then costs several seconds more per run); ACCORD_PROBE_ARGS adds probe flags
# ('--block-ends --dtype bf16': only the block ends' rows, our batch-norm backward and
# cuDNN's Ex call among them, in a few seconds).
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
budget=120
rehearse=0
steps=()
while [ $# -gt 0 ]; do
  case $1 in
    --budget | --budget=*)
      if [ "$1" = --budget ]; then budget=${2:-}; shift; else budget=${1#--budget=}; fi
      [[ "$budget" =~ ^[0-9]+$ ]] && [ "$budget" -ge 30 ] || {
        echo "ci/gpu-trainer-probe.sh: --budget '$budget': expected whole seconds, at least 30" >&2
        exit 2
      } ;;
    --rehearse) rehearse=1 ;;
    tests | probe | trainer | data) steps+=("$1") ;;
    *) echo "ci/gpu-trainer-probe.sh: unknown argument '$1' (expected tests, probe, trainer, data," \
            "--budget SECONDS or --rehearse)" >&2
       exit 2 ;;
  esac
  shift
done
[ ${#steps[@]} -gt 0 ] || steps=(tests probe trainer data)
wants() { [[ " ${steps[*]} " == *" $1 "* ]]; }
build=${ACCORD_PROBE_BUILD:-build}
test_tags=${ACCORD_PROBE_TESTS:-residual|block|fusion}
# This script's own settings stay out of the trainer's environment, where the runtime
# would warn that they are not its variables.
for setting in ${!ACCORD_PROBE_@}; do export -n "$setting"; done
resnet=$build/examples/resnet/accord-resnet
probe=$build/examples/resnet/accord-fusion-probe
make_jpegs=$build/tools/accord-make-jpegs
packer=$build/tools/accord-pack
data_bench=$build/tools/accord-data-bench
cores=$(nproc)
workers=${ACCORD_PROBE_WORKERS:-$((cores > 3 ? cores - 2 : 1))}
tests_bin=$build/tests/trainer/gpu/accord_gpu_cudnn_tests
out=${OUT:-$PWD/gpu-trainer-probe-out}
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
logs=$(mktemp -d)
pack() { tar -czf "$out/trainer-probe-logs.tar.gz" -C "$logs" .; }
started=$SECONDS
status=0
# Seconds a step may take: at most `wanted`, within what is left of the budget less 5
# for the last archive; fails (printing what is left) when that is under `least`.
seconds_for() {  # <wanted> <least>
  local left=$((budget - (SECONDS - started) - 5))
  [ "$left" -ge "$2" ] || { echo "$((left < 0 ? 0 : left))"; return 1; }
  echo $((left < $1 ? left : $1))
}

say "== gpu-trainer-probe: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || cat "$build/COMMIT" 2>/dev/null || echo '?'), budget $budget s"
for f in "$resnet" "$probe" "$tests_bin" "$make_jpegs" "$packer" "$data_bench"; do
  [ -x "$f" ] || { say "FAILED: $f is missing: build it (ci/device-prepare.sh builds accord-fusion-probe too)"; exit 2; }
done
# The trainer links cuDNN and cuBLAS, found on the build machine under the CUDA toolkit:
# here they may live elsewhere (the toolkit, the system, PyTorch's nvidia-* wheels).
for lib in $(ldd "$resnet" | awk '/=> not found/ {print $1}'); do
  found=$(find /usr/local /usr/lib /opt "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || echo /nonexistent)" \
            -name "$lib" -print -quit 2>/dev/null)
  [ -n "$found" ] && export LD_LIBRARY_PATH=$(dirname "$found"):${LD_LIBRARY_PATH:-}
done
resnet_help=$("$resnet" --help 2>/dev/null)
if ! "$probe" --help > /dev/null 2>&1 || [[ "$resnet_help" != *--fuse-residual* ]]; then
  say "FAILED: $probe or $resnet does not start here (or lacks --fuse-residual):"
  { ldd "$resnet" | grep 'not found'; "$probe" --help 2>&1 | tail -2; } | tee -a "$summary"
  exit 2
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
if [ -z "$gpu" ]; then
  say "no GPU here (nvidia-smi lists none)$([ $rehearse = 1 ] && echo ': rehearsing, every step fails fast')"
  [ $rehearse = 1 ] || exit 2
else
  say "GPU: $gpu"
fi

# 1. The GPU tests of the changed layers.
if wants tests; then
  if t=$(seconds_for 40 10); then
    timeout -k 5 "$t" ctest --test-dir "$build" -R "^gpu\\.cudnn\\.($test_tags)\$" \
        --output-on-failure --timeout "$t" > "$logs/tests.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    say "tests (gpu.cudnn.$test_tags): $(grep -E 'tests passed|tests failed' "$logs/tests.log" | tail -1)$([ $rc -eq 124 ] && echo ', stopped at the budget')"
    grep -E '\((Failed|Timeout|Not Run|Skipped)\)|^[^ ].*(FAILED|REQUIRE|CHECK)' "$logs/tests.log" | head -20 |
      sed 's/^/  /' | tee -a "$summary"
    if [ -n "$gpu" ] && grep -q '(Skipped)' "$logs/tests.log"; then
      say "  FAILED: tests skipped (no GPU, they say) where nvidia-smi lists one"; status=1
    fi
  else
    say "tests: NOT RUN: $t s of the budget left"; status=1
  fi
  pack
fi

# 2. The probe: its table is the answer, printed whole.
if wants probe; then
  if t=$(seconds_for 40 15); then
    # shellcheck disable=SC2086  # a list of flags
    timeout -k 5 "$t" "$probe" --batch 256,128 --budget $((t - 12)) ${ACCORD_PROBE_ARGS:-} \
        > "$logs/probe.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    say "probe (exit $rc$([ $rc -eq 124 ] && echo ', stopped at the budget')):"
    grep -v '^nn::cuda' "$logs/probe.log" | sed 's/^/  /' | tee -a "$summary"
  else
    say "probe: NOT RUN: $t s of the budget left"; status=1
  fi
  pack
fi

# 3. The trainer, without and with --fuse-residual: graphed, then layer by layer with the
#    profile. img/s is the second epoch's (the first pays the one-time costs).
data_flags=(--dataset synthetic --synthetic-size 5120 --classes 1000)
run_trainer() {  # <name> <flags...>
  local name=$1; shift
  local t
  if ! t=$(seconds_for 40 30); then
    say "  $name: NOT RUN: $t s of the budget left"; status=1; return
  fi
  local search=()
  [ "${ACCORD_PROBE_SEARCH:-0}" = 1 ] && search=(--cudnn-search)
  timeout -k 5 "$t" "$resnet" --device cuda --precision bf16 --model resnet50 --width 1 \
      --stem imagenet "${data_flags[@]}" --image-size 224 --batch-size 256 \
      --steps 40 --epochs 2 --no-eval --no-progress \
      --metrics "$logs/$name.jsonl" "${search[@]}" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  local ips
  ips=$(grep -o '"images_per_sec":[0-9.]*' "$logs/$name.jsonl" 2>/dev/null | tail -1 | cut -d: -f2)
  if [ $rc -ne 0 ] || [ -z "$ips" ]; then
    status=1
    say "  $name: FAILED (exit $rc$([ $rc -eq 124 ] && echo ', stopped at the budget')): $(tail -1 "$logs/$name.log")"
    return
  fi
  rates[$name]=$ips
  local base=${ACCORD_VERSUS:-${name%+fused}} versus=''
  if [ "$base" != "$name" ] && [ -n "${rates[$base]:-}" ]; then
    versus=$(awk -v a="$ips" -v b="${rates[$base]}" 'BEGIN {printf "  (%.3fx of %s)", a / b, "'"$base"'"}')
  fi
  # The data wait's share of the second epoch, where the loader is the host's.
  if [[ " ${data_flags[*]} " != *" synthetic "* ]]; then
    local last wait epoch
    last=$(tail -1 "$logs/$name.jsonl")
    wait=$(grep -o '"data_wait_s":[0-9.]*' <<< "$last" | cut -d: -f2)
    epoch=$(grep -o '"seconds":[0-9.]*' <<< "$last" | cut -d: -f2)
    versus+=$(awk -v w="$wait" -v s="$epoch" 'BEGIN {printf "; data wait %.1f%% of the epoch", 100 * w / s}')
  fi
  printf '  %-14s %9.1f img/s%s\n' "$name" "$ips" "$versus" | tee -a "$summary"
}
declare -A rates
if wants trainer; then
  say "trainer (ResNet-50, bf16, batch 256, img/s of the second epoch of 20 steps$([ "${ACCORD_PROBE_SEARCH:-0}" = 1 ] && echo ', --cudnn-search')):"
  run_trainer graphs --cuda-graphs; pack
  run_trainer graphs+fused --cuda-graphs --fuse-residual; pack
  # The stem's input padded to 4 channels (--pad-input 4), alone and with the block ends.
  ACCORD_VERSUS=graphs run_trainer graphs+pad4 --cuda-graphs --pad-input 4; pack
  ACCORD_VERSUS=graphs+fused run_trainer graphs+fused+pad4 --cuda-graphs --fuse-residual --pad-input 4; pack
  run_trainer layers --no-cuda-graphs --gpu-profile; pack
  run_trainer layers+fused --no-cuda-graphs --gpu-profile --fuse-residual; pack
  for name in layers layers+fused; do
    grep -q 'GPU time by kind' "$logs/$name.log" 2>/dev/null || continue
    say "GPU time by kind, $name:"
    sed -n '/GPU time by kind/,/timed total/p' "$logs/$name.log" | sed 's/^/  /' | tee -a "$summary"
  done
fi

# 4. JPEGs decoded on this machine's cores against synthetic data, graphed.
if wants data; then
  say "data (ResNet-50, bf16, batch 256, graphed; $cores cores here; JPEGs of 256-500 px, packed):"
  jpegs=$(mktemp -d)
  # Fashion-MNIST scaled up, tinted and grained: the slice carried in .data on the device
  # machine (ci/device-prepare.sh), Debian's package elsewhere, else synthetic patterns.
  source=(--source synthetic)
  for dir in .data/fashion-mnist /usr/share/datasets/fashion-mnist; do
    [ -d "$dir" ] && { source=(--fashion-dir "$dir"); break; }
  done
  if t=$(seconds_for 60 20) &&
     timeout -k 5 "$t" "$make_jpegs" "$jpegs" "${source[@]}" --train 5120 --val 0 \
       > "$logs/make-jpegs.log" 2>&1 &&
     "$packer" "$jpegs/train" "$jpegs/packed/train" --shards 16 > "$logs/pack.log" 2>&1; then
    say "  $(grep -m1 'images of' "$logs/pack.log")"
    for w in $(printf '%s\n' "$cores" "$workers" | uniq); do
      t=$(seconds_for 20 5) || break
      timeout -k 5 "$t" "$data_bench" --dataset packed --data-dir "$jpegs/packed/train" \
          --data-workers "$w" --batch-size 256 --epochs 2 > "$logs/data-bench-w$w.log" 2>&1
      say "  the loader alone: $(tail -1 "$logs/data-bench-w$w.log")"
    done
    [ -n "${rates[graphs]:-}" ] || run_trainer graphs --cuda-graphs
    data_flags=(--dataset packed --data-dir "$jpegs/packed" --prefetch 4)
    for w in $(printf '%s\n' "$workers" $((workers / 2 > 0 ? workers / 2 : 1)) | uniq); do
      ACCORD_VERSUS=graphs run_trainer "packed-w$w" --cuda-graphs --data-workers "$w"; pack
    done
    data_flags=(--dataset synthetic --synthetic-size 5120 --classes 1000)
  else
    say "  FAILED or NOT RUN: JPEGs not made and packed (${t}s): $(tail -1 "$logs/make-jpegs.log" 2>/dev/null) $(tail -1 "$logs/pack.log" 2>/dev/null)"
    status=1
  fi
  rm -rf "$jpegs"
fi

outcome='all passed'
[ $status -eq 0 ] || outcome='FAILURES or steps not run, see the logs'
say "== gpu-trainer-probe (${steps[*]}, $((SECONDS - started)) s of $budget): $outcome (logs in $out)"
pack
rm -rf "$logs"
exit $status
