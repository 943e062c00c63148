#!/usr/bin/env bash
# Idle cost of a swarm: N agents whose sessions sleep. Reports the time from
# `swarmd run` to every agent Running, then the daemon's RSS and CPU over a
# quiet window (RSS split into anonymous memory and the executable's and
# other files' resident pages), then how long SIGTERM takes.
# usage: bench/idle.sh [BIN[,BIN...]] [AGENTS] [WINDOW_SECONDS] [REPO_FILES] [ROUNDS]
# Several binaries, comma-separated, are run in turn, ROUNDS times over
# (A B A B ...), so that a before/after comparison is one command and shares
# the machine's load; each run prints one line, labelled by its binary.
# The repository and state are made under $TMPDIR (default /tmp): point it
# at another file system to compare (the ramp is file creations).
# IDLE_ISOLATION=off|auto|strict sets the daemons' isolation (default: auto).
# IDLE_KEEP_LOG=FILE copies each run's daemon log (JSON) to FILE, the last
# run's kept: the stop's timeline is in its timestamps.
set -euo pipefail
IFS=, read -r -a bins <<< "${1:-bin/swarmd}"
n=${2:-200}
window=${3:-30}
files=${4:-0}
rounds=${5:-1}
for i in "${!bins[@]}"; do bins[i]=$(realpath "${bins[i]}"); done
clk=$(getconf CLK_TCK)

# cpu_ns PID: nanoseconds the process's threads have spent on a CPU, from
# each thread's schedstat (first field). Not /proc/PID/stat's utime+stime:
# those are sampled at the scheduler tick (10 ms here), so a daemon that
# wakes for tens of microseconds a few times a second shows as 0 over a
# whole window, or as one tick's 10 ms, never as what it costs. schedstat
# is the scheduler's own accounting, to the nanosecond. A thread that exits
# takes its time with it; the Go runtime keeps its threads.
cpu_ns() {
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'
}

run_one() {
  local bin=$1 work pid
  work=$(mktemp -d)
  git -C "$work" init -q -b main
  for i in $(seq 1 "$files"); do d="$work/src/d$((i % 50))"; mkdir -p "$d"; echo "file $i" > "$d/f$i.txt"; done
  git -C "$work" add -A
  git -C "$work" -c user.name=b -c user.email=b@b.invalid commit -q --allow-empty -m init
  {
    echo 'listen: ""'
    [ -n "${IDLE_ISOLATION:-}" ] && echo "isolation: $IDLE_ISOLATION"
    echo 'defaults: {backend: sleeper, session_timeout: 24h}'
    echo 'backends: {sleeper: {type: scripted, steps: [{sleep: 24h}]}}'
    echo 'agents:'
    for i in $(seq 1 "$n"); do echo "  - {name: a$i, role: idle}"; done
  } > "$work/swarmd.yaml"

  : > "$work/log" # exists before the wait loop reads it, or the loop ends at once
  local start ready rampu ramps cpu0 cpu1 t0 t1 rss anon file st threads s0 s1
  start=$(date +%s.%N)
  "$bin" run --config "$work/swarmd.yaml" --log-format json 2> "$work/log" &
  pid=$!
  trap 'kill -9 $pid 2>/dev/null || true; cleanup' EXIT
  while [ "$(grep -c '"to":"Running"' "$work/log" || true)" -lt "$n" ]; do
    kill -0 "$pid" || { echo "swarmd died"; tail "$work/log"; exit 1; }
    sleep 0.05
  done
  ready=$(date +%s.%N)
  # The ramp's CPU, user and system: on ext4 without a journal the kernel's
  # inode allocation shows here (see BENCHMARKS.md, "Ramp and the disk").
  read -r rampu ramps < <(awk '{print $14, $15}' "/proc/$pid/stat")
  # Let the start settle: the daemon's work once no agent has changed state
  # for a second (archive directories, returning the start's memory) and
  # the start's garbage. Settled is a second under 1 ms of CPU, or 30 s.
  cpu0=$(cpu_ns "$pid")
  for _ in $(seq 1 30); do
    sleep 1
    cpu1=$(cpu_ns "$pid")
    [ $((cpu1 - cpu0)) -lt 1000000 ] && break
    cpu0=$cpu1
  done
  cpu0=$(cpu_ns "$pid")
  t0=$(date +%s.%N)
  sleep "$window"
  cpu1=$(cpu_ns "$pid")
  t1=$(date +%s.%N)
  rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
  anon=$(awk '/RssAnon/{print $2}' "/proc/$pid/status")
  file=$(awk '/RssFile/{print $2}' "/proc/$pid/status")
  threads=$(awk '/Threads/{print $2}' "/proc/$pid/status")
  # swarmd status over the control socket: process start to exit, p50 of 21.
  st=$(for i in $(seq 1 21); do
    a=$(date +%s%N); "$bin" status -c "$work/swarmd.yaml" >/dev/null; b=$(date +%s%N); echo $(( (b - a) / 1000 ))
  done | sort -n | awk 'NR==11{print $1/1000}')
  kill -TERM "$pid"
  s0=$(date +%s.%N)
  wait "$pid" || true
  s1=$(date +%s.%N)
  trap cleanup EXIT
  # Removed at the end, not now: on ext4 without a journal the next run's
  # worktrees would be created over the inodes this one freed (see
  # BENCHMARKS.md, "Files freed before a run").
  echo "$work" >> "$works"
  [ -n "${IDLE_KEEP_LOG:-}" ] && cp "$work/log" "$IDLE_KEEP_LOG"
  awk -v bin="$bin" -v n="$n" -v start="$start" -v rd="$ready" -v c0="$cpu0" -v c1="$cpu1" -v t0="$t0" -v t1="$t1" \
      -v clk="$clk" -v rss="$rss" -v anon="$anon" -v file="$file" -v th="$threads" -v s0="$s0" -v s1="$s1" -v st="$st" -v ru="$rampu" -v rs="$ramps" 'BEGIN {
    printf "%s agents=%d  start->all Running=%.2fs (CPU user %.2fs sys %.2fs)  idle RSS=%.1f MB (anon %.1f, file %.1f)  idle CPU=%.4f%% of one core (%.1f ms over %.0fs)  threads=%d  status p50=%.1f ms  SIGTERM->exit=%.3fs\n",
      bin, n, rd-start, ru/clk, rs/clk, rss/1024, anon/1024, file/1024, 100*(c1-c0)/1e9/(t1-t0), (c1-c0)/1e6, t1-t0, th, st, s1-s0 }'
}

works=$(mktemp)
cleanup() { xargs -r rm -rf < "$works"; rm -f "$works"; }
trap cleanup EXIT
echo "# $(date -u +%FT%TZ) load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for b in "${bins[@]}"; do run_one "$b"; done
done
echo "# $(date -u +%FT%TZ) load average: $(cut -d' ' -f1-3 /proc/loadavg)"
