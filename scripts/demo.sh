#!/usr/bin/env bash
# make demo: run a 3-agent swarm on the scripted backend in a throwaway repo
# for about 20 s, printing every state transition, then stop it with SIGTERM
# and check that it exits 0 and leaves no process behind.
set -euo pipefail
bin=$(realpath "${1:-bin/swarmd}")
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${DEMO_SECONDS:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git -C "$work" init -q -b main
git -C "$work" -c user.name=demo -c user.email=demo@swarmd.invalid commit -q --allow-empty -m "initial commit"
cp "$here/configs/demo.yaml" "$work/swarmd.yaml"

echo "== swarmd demo: 3 agents in $work for ${secs}s"
"$bin" run --config "$work/swarmd.yaml" --log-format console --log-level info &
pid=$!
sleep "$secs"
echo "== sending SIGTERM to swarmd (pid $pid)"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
left=$(grep -l "SWARMD_TREE=$work" /proc/[0-9]*/environ 2>/dev/null | wc -l || true)
echo "== swarmd exited with $rc; processes left behind: $left"
[ "$rc" -eq 0 ] && [ "$left" -eq 0 ]
