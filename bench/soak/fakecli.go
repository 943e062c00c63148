package main

// fakeCLI is the agents' program: a stand-in for Claude Code, run by the
// daemon's claude backend (type claude, command pointing here), so that the
// daemon parses its stream as it parses the real CLI's: a system/init line,
// assistant messages with token usage and tool_use blocks, user messages
// with their tool_result, and a result record with the session's cost and
// its final text, whose last line is the signal (DONE, or FAIL). About
// 4-6 KB of stream per session, 2 to 5 tool calls.
//
// What it does besides printing: with a task in its prompt, it rewrites
// one of 256 files, src/(N mod 16)/(N mod 256).txt, and commits it on the
// task's line (the merge queue merges it): the repository's history grows
// as a project's does, its tree does not (a file per task would make every
// worktree's status walk grow with the run, which is the workload's cost,
// not swarmd's). Two tasks 256 apart are never in flight together here.
// An odd task takes two sessions: the first commits half of it and ends
// with no signal, the next ("Continue your task #N") finishes it. One task
// in FAIL_EVERY ends with FAIL instead of DONE. One session in MAIL_EVERY
// (by its seq) sends mail to a peer with `swarmd mail send`, one in
// URGENT_EVERY of those urgent (which interrupts a running session).
// An agent with neither task nor mail ends with DONE and goes idle until
// the board or the mailbox wakes it.
//
// Written for /bin/sh (dash): the session runs it in its sandbox, where
// $PATH begins with swarmd's own directory.
const fakeCLI = `#!/bin/sh
p=$(cat)
sid=$SWARM_SESSION_ID
me=$SWARM_AGENT_ID
seq=${sid#*-}; seq=${seq%%-*}
n=$(printf '%s\n' "$p" | sed -n -E 's/^(Your task: #|Continue your task #)([0-9]+):.*/\2/p' | head -1)
cont=$(printf '%s\n' "$p" | grep -c '^Continue your task #')
mail=$(printf '%s\n' "$p" | grep -c '^### #')
model=claude-soak-1
pad='The quick brown fox jumps over the lazy dog; a line of a file the agent read, as an agent CLI shows a tool result to the model. Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.'
k=0
tool() { # name input result
	k=$((k + 1))
	printf '{"type":"assistant","message":{"id":"msg_%s_%d","type":"message","role":"assistant","model":"%s","usage":{"input_tokens":%d,"output_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":%d},"content":[{"type":"text","text":"Step %d: next I use %s to move the work on; %s"},{"type":"tool_use","id":"toolu_%s_%d","name":"%s","input":%s}]},"parent_tool_use_id":null,"session_id":"%s"}\n' \
		"$sid" "$k" "$model" $((900 + k * 37)) $((120 + k * 11)) $((12000 + k * 1500)) $((400 + k)) "$k" "$1" "$pad" "$sid" "$k" "$1" "$2" "$sid"
	printf '{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_%s_%d","type":"tool_result","content":"%s\\n%s\\n%s","is_error":false}]},"parent_tool_use_id":null,"session_id":"%s"}\n' \
		"$sid" "$k" "$3" "$pad" "$pad" "$sid"
}
printf '{"type":"system","subtype":"init","cwd":"%s","session_id":"%s","tools":["Bash","Edit","Read","Write","Glob","Grep"],"mcp_servers":[],"model":"%s","permissionMode":"default","apiKeySource":"none"}\n' "$PWD" "$sid" "$model"
tool Read '{"file_path":"README.md"}' "README.md: 1 line"
tool Bash '{"command":"git status --short","description":"Show the worktree state"}' "clean"
result="Nothing left to do for now. $mail message(s) read.\n\nDONE"
if [ -n "$n" ]; then
	f=src/$((n % 16))/$((n % 256)).txt
	mkdir -p "${f%/*}"
	if [ "$cont" -eq 0 ]; then
		printf '# slot %s\n\nLast changed by task %s (%s, %s).\n\n%s\n' $((n % 256)) "$n" "$me" "$sid" "$pad" > "$f"
	else
		printf 'Task %s finished in %s.\n' "$n" "$sid" >> "$f"
	fi
	git add -A && git commit -q -m "task $n: the soak's change" || echo "commit failed" >&2
	tool Write "{\"file_path\":\"$f\",\"content\":\"# task $n\"}" "File written successfully at: $f"
	tool Bash '{"command":"git add -A && git commit -m change","description":"Commit the change"}' "[swarm/task/$n] task $n: the soak's change\n 1 file changed, 5 insertions(+)"
	result="Task $n is done: rewrote $f and committed it.\n\nDONE"
	if [ $((n % 2)) -eq 1 ] && [ "$cont" -eq 0 ]; then
		result="Wrote the first half of task $n; the next session finishes it."
	elif [ $((n % FAIL_EVERY)) -eq 0 ]; then
		result="Task $n cannot be done.\n\nFAIL: task $n asks for something this repository cannot do"
	fi
fi
if [ $((seq % MAIL_EVERY)) -eq 0 ]; then
	peer=$(printf '%s' "$SWARM_AGENTS" | awk -F, -v s="$seq" -v me="$me" '{ i = (s * 7) % NF + 1; if ($i == me) i = i % NF + 1; print $i }')
	u=
	if [ $((seq % (MAIL_EVERY * URGENT_EVERY))) -eq 0 ]; then u=--urgent; fi
	swarmd mail send $u --to "$peer" --subject "from $me, session $seq" "I touched src/ in $sid; rebase on main before you edit the same files. $pad" >/dev/null 2>&1 || echo "mail failed" >&2
	tool Bash "{\"command\":\"swarmd mail send --to $peer ...\"}" "sent"
fi
printf '{"type":"result","subtype":"success","is_error":false,"duration_ms":2400,"duration_api_ms":2100,"num_turns":%d,"result":"%s","session_id":"%s","total_cost_usd":0.0%d37,"usage":{"input_tokens":%d,"output_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":%d}}\n' \
	$((k + 1)) "$result" "$sid" $((k + 1)) $((900 * k + 2000)) $((150 * k)) $((12000 * k)) $((400 * k))
`
