#!/usr/bin/env bash
# make demo: run a 3-agent swarm on the built-in test backends in a
# throwaway repo: hand it tasks, watch agents claim, finish, get reviewed and
# go idle, wake one with a new task, then stop it with SIGTERM and check that
# it exits 0 and leaves no process behind.
set -euo pipefail
bin=$(realpath "${1:-bin/swarmd}")
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${DEMO_SECONDS:-24}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git -C "$work" init -q -b main
git -C "$work" -c user.name=demo -c user.email=demo@swarmd.invalid commit -q --allow-empty -m "initial commit"
cp "$here/configs/demo.yaml" "$work/swarmd.yaml"
cfg="$work/swarmd.yaml"

echo "== swarmd demo: 3 agents in $work for ${secs}s"
"$bin" run --config "$cfg" --log-format console --log-level info &
pid=$!
for _ in $(seq 100); do [ -S "$work/.swarm/swarmd.sock" ] && break; sleep 0.1; done

echo "== adding three tasks (the second waits for the first; the third is carol's)"
first=$("$bin" task add "Add a config parser" --priority 5 -c "$cfg")
"$bin" task add "Document the parser" --after "$first" -c "$cfg" >/dev/null
"$bin" task add "Fix the flaky test" --to carol -c "$cfg" >/dev/null
sleep $((secs / 2))
echo "== the board after $((secs / 2))s (idle agents start no session):"
"$bin" task list -c "$cfg"
"$bin" status -c "$cfg"
echo "== adding one more task: an idle agent wakes for it"
"$bin" task add "Add a --verbose flag" -c "$cfg" >/dev/null
sleep $((secs - secs / 2))
echo "== the board at the end:"
"$bin" task list -c "$cfg"
echo "== sending SIGTERM to swarmd (pid $pid)"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
left=$(grep -l "SWARMD_TREE=$work" /proc/[0-9]*/environ 2>/dev/null | wc -l || true)
echo "== swarmd exited with $rc; processes left behind: $left"
[ "$rc" -eq 0 ] && [ "$left" -eq 0 ]
