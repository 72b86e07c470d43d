#!/usr/bin/env bash
# accord-resnet re-executes itself once, at start, to set OMP_WAIT_POLICY (main.cc):
# the new image must keep the program's name for ps, top and pkill ("accord-resnet"),
# not take the name of /proc/self/exe ("exe").
#
#   process_name.sh <accord-resnet>
set -u
trainer=$1
env -u OMP_WAIT_POLICY "$trainer" --dataset synthetic --width 0.125 --steps 100000 \
  --no-eval --no-progress --threads 1 > /dev/null 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null' EXIT
name=
for _ in $(seq 1 400); do  # up to 20 s for the re-executed image to start
  if tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -qx 'OMP_WAIT_POLICY=PASSIVE'; then
    name=$(cat /proc/$pid/comm)
    break
  fi
  kill -0 $pid 2>/dev/null || { echo "FAILED: accord-resnet ended before it re-executed itself"; exit 1; }
  sleep 0.05
done
if [ "$name" != accord-resnet ]; then
  echo "FAILED: the re-executed trainer is named '${name:-(not seen within 20 s)}', not accord-resnet"
  exit 1
fi
echo "OK: the re-executed trainer (pid $pid, OMP_WAIT_POLICY=PASSIVE) is named $name"
