#!/usr/bin/env bash
# One agent's session turnover: an agent on /bin/true with no pause between
# sessions, and what each session costs its daemon: CPU (utime+stime) and
# context switches (every thread's voluntary and involuntary ones, from
# /proc/PID/task/*/status) over a window, after a warm-up.
# usage: bench/lone.sh [BIN[,BIN...]] [ISOLATION] [WINDOW_SECONDS] [ROUNDS] [LIMITS]
# ISOLATION is the config's isolation (default off); LIMITS, if set, is the
# body of a limits: map, e.g. 'daemon_timer_slack: 5ms'. Several binaries,
# comma-separated, run in turn, ROUNDS times over (A B A B ...), one line a
# run. The repository and state are made under $TMPDIR (default /tmp).
set -euo pipefail
IFS=, read -r -a bins <<<"${1:-bin/swarmd}"
iso=${2:-off}
window=${3:-5}
rounds=${4:-1}
limits=${5:-}
for i in "${!bins[@]}"; do bins[i]=$(realpath "${bins[i]}"); done
clk=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
switches() {
	cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {print s + 0}'
}
ended() { grep -c '"msg":"session ended"' "$1" || true; }

one() {
	local bin=$1 work pid log
	work=$(mktemp -d "${TMPDIR:-/tmp}/swarmd-lone-XXXXXX")
	git init -q -b main "$work/repo"
	git -C "$work/repo" -c user.name=b -c user.email=b@b commit -q --allow-empty -m init
	{
		echo 'listen: ""'
		echo "isolation: $iso"
		[ -n "$limits" ] && echo "limits: {$limits}"
		echo 'defaults: {backend: t, session_timeout: 1h, min_session_interval: 0s}'
		echo 'backends: {t: {type: command, command: /bin/true}}'
		echo 'agents:'
		echo '  - {name: a1, role: x}'
	} >"$work/repo/swarmd.yaml"
	log=$work/daemon.log
	"$bin" run --config "$work/repo/swarmd.yaml" --log-format json 2>"$log" &
	pid=$!
	# Warm-up: until sessions have been ending for six seconds, past the
	# reaper's first 5 s interval (it stops watching SIGCHLD after a quiet
	# one): the steady state of a daemon that runs for hours.
	local deadline=$((SECONDS + 30))
	until [ "$(ended "$log")" -gt 0 ]; do
		if [ $SECONDS -ge $deadline ] || ! kill -0 "$pid" 2>/dev/null; then
			echo "$bin: no session ended within 30s" >&2
			tail -5 "$log" >&2
			kill "$pid" 2>/dev/null || true
			wait "$pid" || true
			rm -rf "$work"
			return 1
		fi
		sleep 0.2
	done
	sleep 6
	local n1 c1 s1 n2 c2 s2
	n1=$(ended "$log") c1=$(cpu_ticks "$pid") s1=$(switches "$pid")
	sleep "$window"
	n2=$(ended "$log") c2=$(cpu_ticks "$pid") s2=$(switches "$pid")
	kill -TERM "$pid"
	wait "$pid" || true
	rm -rf "$work"
	awk -v b="$bin" -v n=$((n2 - n1)) -v c=$((c2 - c1)) -v s=$((s2 - s1)) -v clk="$clk" 'BEGIN {
		printf "%s sessions=%d  daemon CPU=%.3f ms/session  context switches=%.1f/session\n", b, n, c * 1000 / clk / n, s / n
	}'
}

for ((r = 0; r < rounds; r++)); do
	for b in "${bins[@]}"; do one "$b"; done
done
