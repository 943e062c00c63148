#!/usr/bin/env bash
# make demo: run a 3-agent swarm (two workers, a review-only reviewer, a
# merge queue with a gate) on built-in command backends in a throwaway repo:
# hand it tasks, watch them get done, reviewed (one FAILed once), gated (one
# sent back once) and merged into main one merge commit per task; then stop
# it with SIGTERM and check that it exits 0 and leaves no process behind.
set -euo pipefail
bin=$(realpath "${1:-bin/swarmd}")
here=$(cd "$(dirname "$0")/.." && pwd)
limit=${DEMO_SECONDS:-90}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git -C "$work" init -q -b main
git -C "$work" -c user.name=demo -c user.email=demo@swarmd.invalid commit -q --allow-empty -m "initial commit"
cp "$here/configs/demo.yaml" "$work/swarmd.yaml"
cfg="$work/swarmd.yaml"

echo "== swarmd demo: alice and carol work, bob reviews, main takes one merge commit per task ($work)"
"$bin" run --config "$cfg" --log-format console --log-level info &
pid=$!
for _ in $(seq 100); do [ -S "$work/.swarm/swarmd.sock" ] && break; sleep 0.1; done

echo "== adding four tasks (the second waits for the first; the third is carol's)"
first=$("$bin" task add "Add a config parser" --priority 5 -c "$cfg")
"$bin" task add "Document the parser" --after "$first" -c "$cfg" >/dev/null
"$bin" task add "Fix the flaky test" --to carol -c "$cfg" >/dev/null
"$bin" task add "Add a --verbose flag" -c "$cfg" >/dev/null

open() { "$bin" task list -c "$cfg" --json | grep -c '"state": *"\(OPEN\|CLAIMED\|IN_PROGRESS\|DONE\|BLOCKED\|FAILED\)"' || true; }
for i in $(seq "$limit"); do
  [ "$(open)" -eq 0 ] && break
  if [ "$i" -eq 3 ]; then echo "== the board after ${i}s:"; "$bin" task list -c "$cfg"; "$bin" status -c "$cfg"; fi
  sleep 1
done
echo "== the board at the end:"
"$bin" task list -c "$cfg"
echo "== main, one merge commit per task (git log --oneline main):"
git -C "$work" log --oneline main
echo "== sending SIGTERM to swarmd (pid $pid)"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
left=$(grep -l "SWARMD_TREE=$work" /proc/[0-9]*/environ 2>/dev/null | wc -l || true)
merges=$(git -C "$work" log --first-parent --format=%B main | grep -c '^Swarmd-Task: ' || true)
echo "== swarmd exited with $rc; tasks merged: $merges of 4; processes left behind: $left"
[ "$rc" -eq 0 ] && [ "$left" -eq 0 ] && [ "$merges" -eq 4 ]
