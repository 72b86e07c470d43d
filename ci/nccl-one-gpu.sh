#!/usr/bin/env bash
# Runs one rank of an mpirun job so that NCCL lets several ranks share a GPU, and,
# optionally, lays the ranks out on simulated hosts: how the multi-rank NCCL path is
# tested on a machine with one GPU.
#
#   mpirun -np N bash ci/nccl-one-gpu.sh [--hosts A,B,...] [--child] <command> [args...]
#
# NCCL refuses two ranks of one host on one GPU ("Duplicate GPU detected"). It tells
# hosts apart by a hash that NCCL_HOSTID overrides, so where this host has fewer GPUs
# than ranks each rank gets an NCCL_HOSTID of its own and NCCL connects the ranks as
# separate hosts, through its socket transport over loopback (no P2P, SHM, NVLS,
# MNNVL or CollNet, which would need distinct GPUs or a real fabric). That proves
# correctness and failure handling, not speed: the ranks also share the GPU's time.
# Where there are as many GPUs as ranks, NCCL is left as it is (one rank per GPU).
#
# --hosts A,B,...  Accord's simulated hosts: the first A ranks are host "sim0", the next
#                  B host "sim1", and so on (ACCORD_HOSTNAME); the counts must add up
#                  to the number of ranks. Accord then reduces hierarchically across
#                  them (with ACCORD_HIERARCHICAL_ALLREDUCE) as across real hosts.
# --child          Runs the command as a child rather than in place of this shell, and
#                  exits with its status (128 + the signal where a signal ended it), so
#                  that mpirun sees an exit status, not a death by signal: a test that
#                  SIGKILLs one rank then sees the survivors finish instead of mpirun
#                  tearing the job down (with --mca orte_abort_on_non_zero_status 0).
#                  SIGTERM and SIGINT are passed on to the child.
# NCCL_* variables already set win over these.
set -euo pipefail
hosts=
child=0
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) hosts=${2:?--hosts needs a list like 2,2}; shift 2 ;;
    --hosts=*) hosts=${1#--hosts=}; shift ;;
    --child) child=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    --) shift; break ;;
    -*) echo "ci/nccl-one-gpu.sh: unknown option '$1' (expected --hosts A,B,... or --child)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "ci/nccl-one-gpu.sh: no command given" >&2; exit 2; }
rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}
size=${OMPI_COMM_WORLD_SIZE:-${PMI_SIZE:-1}}
local_size=${OMPI_COMM_WORLD_LOCAL_SIZE:-$size}

if [ -n "$hosts" ]; then
  [[ "$hosts" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || {
    echo "ci/nccl-one-gpu.sh: --hosts '$hosts': expected rank counts like 2,2 or 1,2" >&2
    exit 2
  }
  IFS=, read -r -a counts <<< "$hosts"
  total=0 host=-1
  for i in "${!counts[@]}"; do
    if [ "$host" -lt 0 ] && [ "$rank" -lt $((total + counts[i])) ]; then host=$i; fi
    total=$((total + counts[i]))
  done
  [ "$total" -eq "$size" ] || {
    echo "ci/nccl-one-gpu.sh: --hosts $hosts holds $total ranks, but the job has $size" >&2
    exit 2
  }
  export ACCORD_HOSTNAME=sim$host
fi

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -gt 0 ] && [ "$local_size" -gt "$gpus" ]; then
  export NCCL_HOSTID=${NCCL_HOSTID:-accord-one-gpu-rank$rank}
  export NCCL_NET=${NCCL_NET:-Socket}
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
  export NCCL_P2P_DISABLE=${NCCL_P2P_DISABLE:-1}
  export NCCL_SHM_DISABLE=${NCCL_SHM_DISABLE:-1}
  export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
  export NCCL_MNNVL_ENABLE=${NCCL_MNNVL_ENABLE:-0}
  export NCCL_COLLNET_ENABLE=${NCCL_COLLNET_ENABLE:-0}
fi

[ "$child" -eq 1 ] || exec "$@"
"$@" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' TERM
trap 'kill -INT "$pid" 2>/dev/null' INT
status=0
wait "$pid" || status=$?
# A trapped signal interrupts wait: wait again for the child's own end.
while kill -0 "$pid" 2>/dev/null; do wait "$pid" || status=$?; done
exit "$status"
