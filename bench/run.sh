#!/usr/bin/env bash
# make bench: the harnesses that run swarmd as a real process. The go test
# benchmarks run before this (see the Makefile). Results and method:
# BENCHMARKS.md.
set -euo pipefail
bin=${1:-bin/swarmd}
echo "== idle swarm (bench/idle.sh): 200 sleeping agents"
bash bench/idle.sh "$bin" 200 20
echo "== urgent mail latency (bench/interrupt): 50 agents Running, 200 messages"
go run ./bench/interrupt -bin "$bin" -agents 50 -messages 200
echo "== pause --now of a 50-process session tree, request to every process stopped (bench/pause)"
go run ./bench/pause -bin "$bin" -procs 50 -n 200
echo "== dashboards (bench/dashboard): /api/agents, daemon CPU with 5 dashboards open, event -> DOM latency; 200 idle agents"
if command -v chromium >/dev/null; then
  go run ./bench/dashboard -bin "$bin" -agents 200 -dashboards 5
else
  echo "(no chromium: SSE clients stand for the browsers, and no DOM latency)"
  go run ./bench/dashboard -bin "$bin" -agents 200 -dashboards 5 -sse
fi
echo "== daemon and children CPU per session, agent exits at once (bench/sessioncpu): floor, peer-shaped baseline, swarmd; disk, then tmpfs"
go run ./bench/sessioncpu -bin "$bin"
if [ -d /dev/shm ]; then go run ./bench/sessioncpu -bin "$bin" -dir /dev/shm; fi
echo "== one agent's session turnover, isolation off (bench/lone.sh): daemon CPU and context switches per session"
bash bench/lone.sh "$bin" off 5 2
echo "== outcomes recorded exactly (bench/outcomes): 200 agents, 2,000 tasks, mail 5/s (10% urgent), 3 kill -9 and restarts"
go run ./bench/outcomes -bin "$bin"
echo "== merge queue batches (bench/mergebatch): 40 ready tasks, a 2 s gate, merge.batch 1 vs 8 vs 8 with merge.parallel 2, all green and one failing"
go run ./bench/mergebatch -tasks 40 -gate-sleep 2s -batch 8 -bad 20 -parallel 2
echo "== swarmd mail send, process start to exit (bench/mailcli)"
go run ./bench/mailcli -bin "$bin" -n 200
if [ -d bench/worktree ]; then
  echo "== worktrees (bench/worktree): 50 through swarmd vs a git worktree add loop"
  go run ./bench/worktree -files 5000 -n 50 -rounds 3
  echo "== swarmd run to all 50 agents Running on a 5,000-file repository (bench/idle.sh)"
  bash bench/idle.sh "$bin" 50 5 5000
fi
if command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "== 3 daemons x 30 agents on one PostgreSQL (fsync on) vs 1 daemon x 90 on SQLite, 1,500 trivial tasks each (bench/pgthroughput)"
  go run ./bench/pgthroughput -bin "$bin"
fi
