#!/usr/bin/env bash
# Idle cost of a swarm: N agents whose sessions sleep. Reports the time from
# `swarmd run` to every agent Running, then the daemon's RSS and CPU over a
# quiet window (RSS split into anonymous memory and the executable's and
# other files' resident pages), then how long SIGTERM takes.
# usage: bench/idle.sh [BIN] [AGENTS] [WINDOW_SECONDS] [REPO_FILES]
# The repository and state are made under $TMPDIR (default /tmp): point it
# at another file system to compare (the ramp is file creations).
set -euo pipefail
bin=$(realpath "${1:-bin/swarmd}")
n=${2:-200}
window=${3:-20}
files=${4:-0}
work=$(mktemp -d)
trap 'kill -9 $pid 2>/dev/null || true; rm -rf "$work"' EXIT
git -C "$work" init -q -b main
for i in $(seq 1 "$files"); do d="$work/src/d$((i % 50))"; mkdir -p "$d"; echo "file $i" > "$d/f$i.txt"; done
git -C "$work" add -A
git -C "$work" -c user.name=b -c user.email=b@b.invalid commit -q --allow-empty -m init
{
  echo 'listen: ""'
  echo 'defaults: {backend: sleeper, session_timeout: 24h}'
  echo 'backends: {sleeper: {type: scripted, steps: [{sleep: 24h}]}}'
  echo 'agents:'
  for i in $(seq 1 "$n"); do echo "  - {name: a$i, role: idle}"; done
} > "$work/swarmd.yaml"

clk=$(getconf CLK_TCK)
: > "$work/log" # exists before the wait loop reads it, or the loop ends at once
start=$(date +%s.%N)
"$bin" run --config "$work/swarmd.yaml" --log-format json 2> "$work/log" &
pid=$!
while [ "$(grep -c '"to":"Running"' "$work/log" || true)" -lt "$n" ]; do
  kill -0 "$pid" || { echo "swarmd died"; tail "$work/log"; exit 1; }
  sleep 0.1
done
ready=$(date +%s.%N)
# The ramp's CPU, user and system: on ext4 without a journal the kernel's
# inode allocation shows here (see BENCHMARKS.md, "Ramp and the disk").
read -r rampu ramps < <(awk '{print $14, $15}' "/proc/$pid/stat")
sleep 2 # let startup garbage settle
cpu0=$(awk '{print $14+$15}' "/proc/$pid/stat")
t0=$(date +%s.%N)
sleep "$window"
cpu1=$(awk '{print $14+$15}' "/proc/$pid/stat")
t1=$(date +%s.%N)
rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
anon=$(awk '/RssAnon/{print $2}' "/proc/$pid/status")
file=$(awk '/RssFile/{print $2}' "/proc/$pid/status")
# swarmd status over the control socket: process start to exit, p50 of 21.
st=$(for i in $(seq 1 21); do
  a=$(date +%s%N); "$bin" status -c "$work/swarmd.yaml" >/dev/null; b=$(date +%s%N); echo $(( (b - a) / 1000 ))
done | sort -n | awk 'NR==11{print $1/1000}')
threads=$(awk '/Threads/{print $2}' "/proc/$pid/status")
kill -TERM "$pid"
s0=$(date +%s.%N)
wait "$pid" || true
s1=$(date +%s.%N)
awk -v n="$n" -v start="$start" -v rd="$ready" -v c0="$cpu0" -v c1="$cpu1" -v t0="$t0" -v t1="$t1" \
    -v clk="$clk" -v rss="$rss" -v anon="$anon" -v file="$file" -v th="$threads" -v s0="$s0" -v s1="$s1" -v st="$st" -v ru="$rampu" -v rs="$ramps" 'BEGIN {
  printf "agents=%d  start->all Running=%.2fs (CPU user %.2fs sys %.2fs)  idle RSS=%.1f MB (anon %.1f, file %.1f)  idle CPU=%.2f%% of one core  threads=%d  status p50=%.1f ms  SIGTERM->exit=%.2fs\n",
    n, rd-start, ru/clk, rs/clk, rss/1024, anon/1024, file/1024, 100*(c1-c0)/clk/(t1-t0), th, st, s1-s0 }'
