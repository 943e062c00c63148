#!/usr/bin/env bash
# The stop of a swarm, alone: N agents whose sessions sleep, then SIGTERM.
# Reports SIGTERM -> exit and the daemon's CPU over the stop (perf stat's
# task-clock of the daemon's threads, attached before the signal).
# usage: bench/stop.sh [BIN[,BIN...]] [AGENTS] [ROUNDS]
# Several binaries, comma-separated, are run in turn, ROUNDS times over
# (A B A B ...). STOP_ISOLATION=off|auto|strict sets the daemons' isolation
# (default: off, the peer's containment). Needs perf (linux-perf).
set -euo pipefail
IFS=, read -r -a bins <<< "${1:-bin/swarmd}"
n=${2:-200}
rounds=${3:-5}
for i in "${!bins[@]}"; do bins[i]=$(realpath "${bins[i]}"); done
command -v perf >/dev/null || { echo "stop.sh: perf not found (apt-get install linux-perf)" >&2; exit 1; }

run_one() {
  local bin=$1 work pid ppid s0 s1
  work=$(mktemp -d)
  git -C "$work" init -q -b main
  git -C "$work" -c user.name=b -c user.email=b@b.invalid commit -q --allow-empty -m init
  {
    echo 'listen: ""'
    echo "isolation: ${STOP_ISOLATION:-off}"
    echo 'defaults: {backend: sleeper, session_timeout: 24h}'
    echo 'backends: {sleeper: {type: scripted, steps: [{sleep: 24h}]}}'
    echo 'agents:'
    for i in $(seq 1 "$n"); do echo "  - {name: a$i, role: idle}"; done
  } > "$work/swarmd.yaml"
  : > "$work/log"
  "$bin" run --config "$work/swarmd.yaml" --log-format json 2> "$work/log" &
  pid=$!
  while [ "$(grep -c '"to":"Running"' "$work/log" || true)" -lt "$n" ]; do
    kill -0 "$pid" || { echo "swarmd died"; tail "$work/log"; exit 1; }
    sleep 0.05
  done
  sleep 2 # the start's own work done
  perf stat -e task-clock -p "$pid" -o "$work/stat" 2>/dev/null &
  ppid=$!
  sleep 0.3 # attached
  s0=$(date +%s%N)
  kill -TERM "$pid"
  wait "$pid" || true
  s1=$(date +%s%N)
  kill -INT "$ppid" 2>/dev/null || true
  wait "$ppid" || true
  printf '%s agents=%d  SIGTERM->exit=%.1f ms  daemon CPU=%s ms\n' "$bin" "$n" \
    "$(echo "($s1 - $s0) / 1000000" | bc -l)" "$(awk '/task-clock/{print $1}' "$work/stat")"
  rm -rf "$work"
}

echo "# $(date -u +%FT%TZ) load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for b in "${bins[@]}"; do run_one "$b"; done
done
echo "# $(date -u +%FT%TZ) load average: $(cut -d' ' -f1-3 /proc/loadavg)"
