#!/usr/bin/env bash
# Runs an mpirun job across simulated hosts on this machine: each host is a Linux
# network namespace with its own UTS namespace (so its own hostname), joined to the
# others by a bridge on a private subnet; Open MPI starts its daemons in them through
# an rsh agent that enters the namespaces, and its ranks talk TCP over the bridge. To
# Open MPI, and so to Accord, the hosts are distinct machines: ranks on different
# hosts share no memory transport. Nothing leaves the machine; the subnet, bridge and
# namespaces are this script's own, made at the start and removed at the end (also
# after a failure or a timeout's SIGTERM).
#
#   simhosts.sh <slots,slots,...> [mpirun options...] -- <program> [args...]
#     e.g. simhosts.sh 2,2 -- ./mpi_test_allreduce       (2 hosts x 2 ranks)
#          simhosts.sh 1,2 -x ACCORD_SHARED_MEMORY=0 -- ./prog   (uneven hosts)
#   SIMHOSTS_SLOTS=2,2 simhosts.sh -np 4 [mpirun options...] <program> [args...]
#     the same, called as mpirun would be (for scripts that take an MPIEXEC); -np
#     must equal the sum of the slots
#   simhosts.sh <slots,...> --run -- <command> [args...]
#     makes the hosts and runs <command> on this machine (not under mpirun), with
#     SIMHOSTS_HOSTS=simhost0:2,simhost1:2,... and the OMPI_MCA_* variables that let
#     every mpirun it starts reach the hosts (for launchers such as accordrun's
#     elastic driver, which start mpirun themselves, again and again)
#
# Needs root (namespaces, a bridge). Where they cannot be made it prints
# "skipped: ..." and exits 77, which CTest counts as a skip. SIMHOSTS_KEEP=1 leaves
# everything in place after the run, for a look with `ip netns`.
set -uo pipefail

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; }
[ $# -ge 1 ] || { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac
mpi_opts=()
run_mode=0
if [ "${2:-}" = "--run" ]; then
  layout=$1
  asked_np=""
  run_mode=1
  shift 2
  [ "${1:-}" = "--" ] && shift
  [ $# -ge 1 ] || { echo "simhosts.sh: no command after '--run --'" >&2; exit 2; }
elif [ "$1" = "-np" ]; then  # called as mpirun
  [ -n "${SIMHOSTS_SLOTS:-}" ] || { echo "simhosts.sh: -np form needs SIMHOSTS_SLOTS, e.g. 2,2" >&2; exit 2; }
  layout=$SIMHOSTS_SLOTS
  asked_np=${2:-}
  shift 2
else
  layout=$1
  asked_np=""
  shift
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do mpi_opts+=("$1"); shift; done
  [ "${1:-}" = "--" ] || { echo "simhosts.sh: '--' must separate mpirun options from the program" >&2; exit 2; }
  shift
  [ $# -ge 1 ] || { echo "simhosts.sh: no program after '--'" >&2; exit 2; }
fi
IFS=, read -r -a slots <<< "$layout"
for s in "${slots[@]}"; do
  [[ "$s" =~ ^[1-9][0-9]*$ ]] || { echo "simhosts.sh: slots '$layout' must be positive integers separated by commas, e.g. 2,2" >&2; exit 2; }
done
nhosts=${#slots[@]}
(( nhosts >= 1 && nhosts <= 8 )) || { echo "simhosts.sh: between 1 and 8 hosts, got $nhosts" >&2; exit 2; }
np=0
for s in "${slots[@]}"; do np=$((np + s)); done
if [ -n "$asked_np" ] && [ "$asked_np" != "$np" ]; then
  echo "simhosts.sh: -np $asked_np does not match SIMHOSTS_SLOTS=$layout ($np slots)" >&2
  exit 2
fi

skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "simulated hosts need root (network namespaces, a bridge)"
command -v ip > /dev/null || skip "no 'ip' command (iproute2)"
command -v nsenter > /dev/null && command -v unshare > /dev/null || skip "no nsenter/unshare (util-linux)"

# Names are fixed; a run killed before its clean-up is cleaned up by the next one. Two
# runs at once would tear down each other's hosts: a second one waits for the first
# (the tests that use this script also hold a CTest resource lock).
mkdir -p /run
exec 9> /run/accord-simhosts.lock
if command -v flock > /dev/null && ! flock -n 9; then
  echo "simhosts.sh: waiting for another run's simulated hosts to be removed" >&2
  flock 9
fi
prefix=accsim
bridge=${prefix}br
subnet=10.213.77
state=/run/accord-simhosts
hostname_of() { echo "simhost$1"; }

teardown() {
  for ((i = 0; i < 8; i++)); do
    ip netns del "${prefix}$i" 2> /dev/null
    ip link del "${prefix}v$i" 2> /dev/null
    if [ -e "$state/uts$i" ]; then umount "$state/uts$i" 2> /dev/null; rm -f "$state/uts$i"; fi
  done
  ip link del "$bridge" 2> /dev/null
  rm -f "$state/agent.sh"
  true
}
teardown
if [ "${SIMHOSTS_KEEP:-0}" != 1 ]; then
  trap teardown EXIT
  trap 'exit 143' TERM INT
fi

mkdir -p "$state"
ip link add "$bridge" type bridge 2> /dev/null || skip "cannot create a bridge (no CAP_NET_ADMIN here?)"
ip addr add "$subnet.1/24" dev "$bridge"
ip link set "$bridge" up
hostlist=""
for ((i = 0; i < nhosts; i++)); do
  ns=${prefix}$i
  ip netns add "$ns" || skip "cannot create network namespaces"
  ip link add "${prefix}v$i" type veth peer name eth0 netns "$ns"
  ip link set "${prefix}v$i" master "$bridge" up
  ip -n "$ns" addr add "$subnet.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # A persistent UTS namespace (bound to a file) holding the host's own name.
  touch "$state/uts$i"
  unshare --uts="$state/uts$i" hostname "$(hostname_of "$i")" || skip "cannot create UTS namespaces"
  hostlist+="${hostlist:+,}$(hostname_of "$i"):${slots[$i]}"
done

# Open MPI's rsh launcher runs `<agent> <host> <command...>`: enter that host's
# namespaces and run the command there, as ssh would on a real host.
cat > "$state/agent.sh" << EOF
#!/usr/bin/env bash
host=\$1; shift
[ "\$1" = "-x" ] && shift
i=\${host#simhost}
exec nsenter --net=/run/netns/${prefix}\$i --uts=$state/uts\$i -- /bin/sh -c "\$*"
EOF
chmod +x "$state/agent.sh"

# Open MPI refuses -x beside the MCA parameter mca_base_env_list (which ci/sanitize.sh
# sets to preload the sanitizer into every rank): where that is set, -x's variables
# join the list instead.
if [ -n "${OMPI_MCA_mca_base_env_list:-}" ]; then
  kept=()
  for ((i = 0; i < ${#mpi_opts[@]}; i++)); do
    if [ "${mpi_opts[$i]}" = "-x" ] && [ $((i + 1)) -lt ${#mpi_opts[@]} ]; then
      i=$((i + 1))
      OMPI_MCA_mca_base_env_list+=";${mpi_opts[$i]}"
    else
      kept+=("${mpi_opts[$i]}")
    fi
  done
  mpi_opts=("${kept[@]}")
  export OMPI_MCA_mca_base_env_list
fi

if [ "$run_mode" = 1 ]; then
  export SIMHOSTS_HOSTS=$hostlist OMPI_MCA_plm_rsh_agent=$state/agent.sh OMPI_MCA_btl=self,vader,tcp \
    OMPI_MCA_btl_tcp_if_include=$subnet.0/24 OMPI_MCA_oob_tcp_if_include=$subnet.0/24 OMPI_MCA_pml=ob1
  "$@" 9>&- &
  child=$!
  trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143' TERM INT
  wait "$child"
  exit $?
fi

# mpirun itself stays in this namespace and reaches the daemons over the bridge. Every
# transport but TCP on the bridge is switched off between hosts; vader (shared memory)
# stays for ranks of one simulated host, as on real hosts. It runs in the background so
# that a SIGTERM to this script alone (not its process group) ends the job at once: bash
# runs a trap only once a foreground command has finished.
mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" -H "$hostlist" \
  --mca plm_rsh_agent "$state/agent.sh" \
  --mca btl self,vader,tcp --mca btl_tcp_if_include "$subnet.0/24" \
  --mca oob_tcp_if_include "$subnet.0/24" --mca pml ob1 \
  "${mpi_opts[@]}" "$@" 9>&- &
mpirun_pid=$!
trap 'kill -TERM "$mpirun_pid" 2>/dev/null; wait "$mpirun_pid"; exit 143' TERM INT
wait "$mpirun_pid"
