#!/usr/bin/env bash
# Runs a command inside an allocation of a one-node SLURM cluster made for it on this
# machine: slurmctld and slurmd with a configuration of their own (their own ports,
# state, spool and logs in a temporary directory; SLURM_CONF points at it) and munge for
# authentication (started when it is not running). What it started is stopped at the
# end, also after a failure or a timeout's SIGTERM. Nothing leaves the machine.
#
#   slurm_cluster.sh <tasks> -- <command> [args...]    runs: salloc -n <tasks> <command>
#
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge packages; where they
# are missing it prints "skipped: ..." and exits 77, which CTest counts as a skip.
# SLURM_CLUSTER_KEEP=1 leaves the directory (configuration and daemon logs) in place.
set -uo pipefail

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
if [ $# -lt 3 ] || [ "$2" != "--" ]; then usage >&2; exit 2; fi
tasks=$1
shift 2
case "$tasks" in
  ''|*[!0-9]*|0) echo "slurm_cluster.sh: <tasks> must be a positive number, not '$tasks'" >&2; exit 2 ;;
esac

skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "slurm_cluster.sh needs root (it starts slurmctld, slurmd and munged)"
for b in slurmctld slurmd salloc sinfo munged munge; do
  command -v "$b" >/dev/null ||
    skip "no $b here (Debian: apt-get install slurmctld slurmd slurm-client munge)"
done
[ -r /etc/munge/munge.key ] || skip "no /etc/munge/munge.key (the munge package makes it)"

dir=$(mktemp -d /tmp/accord-slurm.XXXXXX)
pids=()
munged_pid=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "$munged_pid" ] && kill "$munged_pid" 2>/dev/null
  if [ "${SLURM_CLUSTER_KEEP:-0}" = 1 ]; then echo "slurm_cluster.sh: kept $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT

if ! munge -n >/dev/null 2>&1; then
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null
  runuser -u munge -- munged || skip "munged would not start"
  munged_pid=$(cat /run/munge/munged.pid 2>/dev/null)
  for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
fi

host=$(hostname -s)
cpus=$(nproc)
port=$((20000 + ($$ % 4000) * 2))  # two ports of their own, away from SLURM's 6817-6818
mkdir -p "$dir/state" "$dir/spool"
cat > "$dir/slurm.conf" <<CONF
ClusterName=accordtest
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=accord Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
export SLURM_CONF=$dir/slurm.conf

slurmctld -D -i > "$dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D > "$dir/slurmd.out" 2>&1 &
pids+=($!)
state=""
for _ in $(seq 100); do
  state=$(sinfo -h -o %t 2>/dev/null | head -n 1)
  case "$state" in idle|mix|alloc) break ;; esac
  sleep 0.2
done
case "$state" in
  idle|mix|alloc) ;;
  *)
    echo "slurm_cluster.sh: the node did not come up (state '${state:-none}'); daemon logs:" >&2
    tail -n 20 "$dir"/*.log "$dir"/*.out >&2 2>/dev/null
    exit 1
    ;;
esac
salloc --quiet -n "$tasks" --time=10 "$@"
