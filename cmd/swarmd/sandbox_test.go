package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mockllm"
	"github.com/swarmd/swarmd/internal/task"
)

// hostile is mallory's session: the first one the test starts after the
// victim's session runs (mail wakes it) tries everything a
// prompt-injected agent would, and writes what worked to $REPORT/results,
// one "what yes|no" a line.
const hostile = `r="$REPORT/results"
if [ -e "$r" ] || [ ! -e "$REPORT/go" ]; then printf 'idle\nDONE\n'; exit 0; fi
export S="$(dirname "$(dirname "$SWARM_WORKTREE")")"
try() { echo "== $1" >> "$REPORT/stderr"; if sh -c "$2" >/dev/null 2>>"$REPORT/stderr"; then echo "$1 yes" >> "$r"; else echo "$1 no" >> "$r"; fi; }
try commit 'echo m > m.txt && git add m.txt && git commit -q -m mallory'
# Put its own blob's content under the name of main's README blob, in the
# object store git writes: every checkout of main would read it.
try forge-main-object 'o=$(git rev-parse main:README) m=$(git rev-parse HEAD:m.txt) d="$(git rev-parse --git-common-dir)/objects"
  mkdir -p "$d/${o%${o#??}}" && rm -f "$d/${o%${o#??}}/${o#??}" && cp "$d/${m%${m#??}}/${m#??}" "$d/${o%${o#??}}/${o#??}"'
try write-shared-objects 'touch "$(head -n1 "$(git rev-parse --git-common-dir)/objects/info/alternates")/x"'
# The victim commits while this sandbox runs (git renames a new file over
# its ref): whatever kept the victim's branch read-only here must hold after.
echo started > "$REPORT/started"
try victim-committed 'i=0; until [ -e "$REPORT/victim-committed" ]; do i=$((i+1)); [ $i -gt 600 ] && exit 1; sleep 0.1; done'
try move-main 'git update-ref refs/heads/main HEAD'
try move-peer 'git update-ref refs/heads/swarm/victim/work HEAD'
try new-peer-branch 'git update-ref refs/heads/swarm/victim/other HEAD'
try new-line 'git update-ref refs/heads/swarm/task/99 HEAD'
try rewrite-link 'echo /elsewhere > "$(git rev-parse --git-dir)/commondir"'
# Settings the daemon's git would read: the repository's config, and the
# worktree's own (read once extensions.worktreeConfig is set), by a write,
# a rename over it, or a removal.
try repo-config 'git config --file "$(git rev-parse --git-common-dir)/config" core.hooksPath /tmp'
try worktree-config 'f="$(git rev-parse --git-dir)/config.worktree"; printf "[filter \"x\"]\n\tclean = cat\n" >> "$f" || { printf x > "$f.new" && mv -f "$f.new" "$f"; } || rm -f "$f"'
try read-db 'head -c 16 "$S/swarm.db"'
try read-log 'ls "$S"/logs/*/* | grep -q .'
try peer-worktree 'ls "$S/worktrees/victim"'
try peer-process 'cat /proc/[0-9]*/cmdline | tr "\000" " " | grep -q victim-slee[p]er'
try cgroup-escape 'for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs; do [ -e $f ] && echo $$ > $f && exit 0; done; exit 1'
try host-tmp 'ls "$HOSTTMP"'
# A server of the host's listening under /run (the operator's tmux, D-Bus,
# Docker): a read-only mount would not stop a connect().
try host-run-socket '[ -S "$RUNSOCK" ] || ls "$(dirname "$RUNSOCK")"'
try dns-config 'grep -q . /etc/resolv.conf'
try mail 'swarmd mail send --to victim --subject honest hello'
try forged-mail 'SWARMD_TREE="$(printf "%s\037x\037victim-1-000000000000" "$S")" SWARM_AGENT_ID=victim swarmd mail send --to victim --subject forged hello'
try stop-peer 'SWARMD_TREE="$(printf "%s\037x\037victim-1-000000000000" "$S")" swarmd stop victim --config "$CFG"'
try operator-socket 'swarmd budget set victim 5000 --config "$CFG"'
try read-config '[ "$(wc -c < "$CFG")" -gt 0 ]'
echo end >> "$r"
printf 'tried\nDONE\n'`

// victim sleeps through the attack, with a name mallory looks for.
const victim = `if [ -e "$REPORT/results" ]; then printf 'idle\nDONE\n'; exit 0; fi
exec sh -c 'sleep 60; : victim-sleeper'`

// TestSandboxHoldsAHostileSession runs a session that tries what a
// prompt-injected agent would, in the sandbox (bubblewrap and a cgroup per
// session): it commits and sends its own mail, and nothing else works: it
// cannot move main, a peer's branch or a task line, read swarm.db or the
// logs, see the other agent's worktree or processes, leave its cgroup, see
// the host's /tmp or a server's socket under /run (it reads the DNS
// config), act as the other agent with any environment it forges, or
// reach the operator's socket.
func TestSandboxHoldsAHostileSession(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	hostTmp := t.TempDir()
	runSock := hostRunSocket(t)
	cfg := writeConfig(t, repo, "")
	writeConfig(t, repo, fmt.Sprintf(`
listen: ""
isolation: strict
sandbox: {writable: [%q]}
defaults:
  min_session_interval: 0s
  env: {REPORT: %q, HOSTTMP: %q, CFG: %q, RUNSOCK: %q}
backends:
  hostile: {type: command, command: sh, args: [-c, %q]}
  victim: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: mallory, role: r, backend: hostile, env: {HOME: %q}}
  - {name: victim, role: r, backend: victim, env: {HOME: %q}}
`, report, report, hostTmp, cfg, runSock, hostile, victim, t.TempDir(), t.TempDir()))
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("honest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitOut(t, repo, "add", "README")
	gitOut(t, repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "readme")
	main0 := gitOut(t, repo, "rev-parse", "main")
	d := startDaemon(t, cfg)
	d.waitLine("victim's session running", func(m map[string]any) bool {
		return m["agent"] == "victim" && m["to"] == "Running"
	})
	victim0 := gitOut(t, repo, "rev-parse", "swarm/victim/work")
	d.waitLine("mallory idle", idleLine("mallory"))
	if err := os.WriteFile(filepath.Join(report, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runCLI(t, nil, "", "mail", "send", "--to", "mallory", "-c", cfg, "go"); code != 0 {
		t.Fatalf("mail to mallory: %s", stderr)
	}
	waitFileLine(t, filepath.Join(report, "started"), "started", 60*time.Second, d)
	gitOut(t, filepath.Join(repo, ".swarm", "worktrees", "victim"), "-c", "user.name=victim", "-c", "user.email=victim@example.com", "commit", "-q", "--allow-empty", "-m", "the victim's own commit")
	victim0 = gitOut(t, repo, "rev-parse", "swarm/victim/work")
	if err := os.WriteFile(filepath.Join(report, "victim-committed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	results := waitFileLine(t, filepath.Join(report, "results"), "end", 60*time.Second, d)
	t.Cleanup(func() {
		if t.Failed() {
			stderr, _ := os.ReadFile(filepath.Join(report, "stderr"))
			t.Logf("results:\n%s\nstderr:\n%s\nlog:\n%s", results, stderr, d.log())
		}
	})

	// Its forgery went into its quarantine, not the repository's store:
	// refused once its session ended.
	d.waitLine("mallory's forged object refused", func(m map[string]any) bool {
		return m["agent"] == "mallory" && strings.Contains(fmt.Sprint(m["msg"]), "sandbox wrote were refused")
	})
	want := map[string]string{
		"commit": "yes", "mail": "yes", "forged-mail": "no", // sent as mallory (checked below); the forged one refused, exit 2
		"forge-main-object": "yes", "write-shared-objects": "no", // written to its quarantine: checked below
		"victim-committed": "yes", "move-main": "no", "move-peer": "no", "new-peer-branch": "no", "new-line": "no", "rewrite-link": "no",
		"repo-config": "no", "worktree-config": "no",
		"read-db": "no", "read-log": "no", "peer-worktree": "no", "peer-process": "no",
		"cgroup-escape": "no", "host-tmp": "no", "host-run-socket": "no", "dns-config": "yes",
		"stop-peer": "no", "operator-socket": "no", "read-config": "no",
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(results), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			got[k] = v
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}

	if g := gitOut(t, repo, "rev-parse", "main"); g != main0 {
		t.Errorf("main moved: %s, was %s", g, main0)
	}
	if g := gitOut(t, repo, "rev-parse", "swarm/victim/work"); g != victim0 {
		t.Errorf("swarm/victim/work moved: %s, was %s", g, victim0)
	}
	if !strings.Contains(gitOut(t, repo, "log", "--format=%s", "swarm/mallory/work"), "mallory") {
		t.Errorf("mallory's commit is not on its branch")
	}
	if got := strings.TrimSpace(gitOut(t, repo, "cat-file", "blob", "main:README")); got != "honest" {
		t.Errorf("main's README reads %q: mallory's forged object replaced it", got)
	}
	gitOut(t, repo, "fsck", "--no-dangling")
	_, mb := openBoardAt(t, filepath.Join(repo, ".swarm"))
	msgs, err := mb.Inbox(context.Background(), "victim", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("victim's mail: %d messages, want 1 (the honest one; the forged one refused)", len(msgs))
	}
	notes, err := mb.Inbox(context.Background(), "operator", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0].Subject, "mallory: objects its sandbox wrote were refused") {
		t.Errorf("the operator's mail %+v: want one note of mallory's refused objects", notes)
	}
	for _, m := range msgs {
		if m.From != "mallory" {
			t.Errorf("mail %q is from %q, want mallory: a forged environment made it another's", m.Subject, m.From)
		}
	}
	out, err := exec.Command(swarmdBin, "status", "--config", cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "victim") || strings.Contains(string(out), "Stopped") {
		t.Errorf("status after the attack (victim must still run): %v\n%s", err, out)
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// hostRunSocket is a Unix socket listening in a directory of its own under
// /run, as a server of the host's would, for the test's length; "" (and
// the try proves nothing) where the test cannot make one.
func hostRunSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/run", "swarmd-test-")
	if err != nil {
		t.Logf("NOT TRIED: a socket under /run: %v", err)
		return ""
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return sock
}

// TestHookCommitsReachTheRepository: a hook runs in its agent's sandbox, so
// what it commits waits in the agent's quarantine like a session's; once
// the hook has ended it is checked and moved into the repository, before
// the agent's next prompt reads its branch (which failed on the commit's
// missing objects when the move waited for the next session's start).
func TestHookCommitsReachTheRepository(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
isolation: strict
defaults:
  min_session_interval: 0s
hooks:
  session_end: ["git -c user.name=h -c user.email=h@example.invalid commit -q --allow-empty -m \"hook after $SWARM_SESSION_ID\""]
backends:
  idler: {type: command, command: sh, args: [-c, 'cat >/dev/null; printf "idle\nDONE\n"']}
agents:
  - {name: alice, role: r, backend: idler, env: {HOME: `+fmt.Sprintf("%q", t.TempDir())+`}}
`)
	d := startDaemon(t, cfg)
	for seq := 1; seq <= 2; seq++ {
		d.waitNext(fmt.Sprintf("alice idle after session %d", seq), idleLine("alice"))
		head := strings.TrimSpace(gitOut(t, repo, "rev-parse", "swarm/alice/work"))
		want := fmt.Sprintf("hook after alice-%d-", seq)
		if got := strings.TrimSpace(gitMay(repo, "log", "-1", "--format=%s", head)); !strings.HasPrefix(got, want) {
			t.Fatalf("alice's branch at %s after session %d's hook: %q, want its commit %q in the repository; log:\n%s", head, seq, got, want, d.log())
		}
		if seq == 1 {
			if _, stderr, code := runCLI(t, nil, "", "mail", "send", "--to", "alice", "-c", cfg, "wake up"); code != 0 {
				t.Fatalf("mail to alice: %s", stderr)
			}
		}
	}
	if st := statusOf(t, cfg, "alice"); st.State == "Stopped" {
		t.Fatalf("alice stopped: %+v", st)
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// fakeGemini stands in for Gemini CLI, whose tools policy is a file swarmd
// writes for the session (in its own /tmp, which a sandbox makes private):
// it reports whether the --policy file it is given is there, holds the
// session's rules and cannot be written.
const fakeGemini = `#!/bin/sh
p=""
while [ $# -gt 0 ]; do [ "$1" = --policy ] && p="$2"; shift; done
r="$REPORT/policy"
if [ -z "$p" ]; then echo "no --policy" > "$r"
elif [ ! -f "$p" ]; then echo "missing: $p" > "$r"
elif ! grep -q read_file "$p"; then echo "without the allow rule: $p" > "$r"
elif (echo x >> "$p") 2>/dev/null; then echo "writable: $p" > "$r"
else echo "read-only policy: $p" > "$r"; fi
`

// TestSandboxShowsTheToolsPolicy: a Gemini CLI session in its sandbox sees
// the tools policy swarmd wrote for it, read-only. (Before, the file was in
// the daemon's /tmp and the sandbox's own /tmp hid it.) The file is in the
// state directory, where the next start removes what a killed daemon left.
func TestSandboxShowsTheToolsPolicy(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	bin := filepath.Join(t.TempDir(), "gemini")
	if err := os.WriteFile(bin, []byte(fakeGemini), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
isolation: strict
sandbox: {writable: [%q]}
defaults:
  min_session_interval: 1h
  env: {REPORT: %q}
  tools: {allow: [read_file]}
backends:
  g: {type: gemini, command: %q}
agents:
  - {name: gm, role: r, backend: g, env: {HOME: %q}}
`, report, report, bin, t.TempDir()))
	files := filepath.Join(repo, ".swarm", "f")
	left := filepath.Join(files, "swarmd-gm-1-000000000000-1.toml")
	if err := os.MkdirAll(files, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(left, []byte("# a killed daemon's"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfg)
	path := filepath.Join(report, "policy")
	deadline := time.Now().Add(60 * time.Second)
	var got []byte
	for len(got) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the session reported nothing in %s; log:\n%s", path, d.log())
		}
		time.Sleep(20 * time.Millisecond)
		got, _ = os.ReadFile(path)
	}
	g := strings.TrimSpace(string(got))
	if f, ok := strings.CutPrefix(g, "read-only policy: "); !ok || filepath.Dir(f) != files {
		t.Errorf("the sandboxed session's tools policy: %s; want it there, with its rule, read-only, in %s", g, files)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a killed daemon's session file after the start: %v; want it removed", err)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// waitFileLine polls path until it has a line want, and returns it whole.
func waitFileLine(t *testing.T, path, want string, limit time.Duration, d *daemonProc) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		b, _ := os.ReadFile(path)
		for _, l := range strings.Split(string(b), "\n") {
			if l == want {
				return string(b)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no line %q after %s: %q; log:\n%s", path, want, limit, b, d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRealCLIsWorkInTheSandbox: Claude Code, Codex and Gemini CLI, each in
// its sandbox (isolation: strict), commit in their worktree, send mail and
// report their task done with `swarmd`, through the socket made for their
// session: the commits are on their branches, the mail is from each, and
// each task is done by its agent with the frozen commit.
func TestRealCLIsWorkInTheSandbox(t *testing.T) {
	requireBwrap(t)
	claude, codex, gemini := cliPath(t, "claude"), cliPath(t, "codex"), cliPath(t, "gemini")
	mock := mockllm.New(mockllm.Text("nothing to do\nDONE"))
	defer mock.Close()
	// Literal commands: Claude Code refuses a command with a variable it
	// cannot check (and any, unless Bash is allowed); Codex's login shell resets PATH, so it names swarmd by
	// the path its prompt gives ($SWARMD_BIN).
	for a, swarmd := range map[string]string{"cl": "swarmd", "cx": `"$SWARMD_BIN"`, "gm": "swarmd"} {
		mock.Script("task for "+a,
			mockllm.Shell(`echo work > `+a+`.txt && git add . && git commit -qm "work of `+a+`"`),
			mockllm.Shell(swarmd+` mail send --to operator --subject "from `+a+`" 'sandboxed mail'`),
			mockllm.Shell(swarmd+` task done --summary "sandboxed `+a+`"`),
			mockllm.Text("committed, mailed, done\nDONE"))
	}
	repo := gitRepo(t)
	home := t.TempDir() // gm's; each agent has a HOME of its own (strict refuses a shared one)
	codexHome := codexConfig(t, mock.URL())
	geminiSettings(t, home)
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
isolation: strict
defaults:
  grace_period: 5s
  env: {DISABLE_TELEMETRY: "1", DISABLE_AUTOUPDATER: "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"}
backends:
  claude:
    command: %[1]s
    allowed_tools: [Bash]
    env: {ANTHROPIC_BASE_URL: %[5]q, ANTHROPIC_API_KEY: sk-ant-test}
  codex:
    command: %[2]s
    args: [--dangerously-bypass-approvals-and-sandbox]
    env: {CODEX_HOME: %[6]q, MOCK_API_KEY: test-key}
  gemini:
    command: %[3]s
    args: [--yolo]
    env: {GEMINI_API_KEY: test-key, GOOGLE_GEMINI_BASE_URL: %[5]q}
agents:
  - {name: cl, role: works, backend: claude, env: {HOME: %[7]q}}
  - {name: cx, role: works, backend: codex, env: {HOME: %[8]q}}
  - {name: gm, role: works, backend: gemini, env: {HOME: %[4]q}}
`, claude, codex, gemini, home, mock.URL(), codexHome, t.TempDir(), t.TempDir()))
	stateDir := filepath.Join(repo, ".swarm")
	db, b, ids := tasksFor(t, stateDir, "cl", "cx", "gm")
	d := startDaemon(t, cfg)
	t.Cleanup(func() { // before the daemon's cleanup stops it and archives the logs
		if t.Failed() {
			for _, a := range []string{"cl", "cx", "gm"} {
				logs, _ := filepath.Glob(filepath.Join(stateDir, "logs", a, "*.log"))
				for _, l := range logs {
					b, _ := os.ReadFile(l)
					t.Logf("%s:\n%s", l, b)
				}
			}
		}
	})
	d.waitLine("the sandbox in force", func(m map[string]any) bool {
		msg, _ := m["msg"].(string)
		return strings.Contains(msg, "a bubblewrap sandbox per session")
	})
	for a, id := range ids {
		got := waitTaskLong(t, b, id, task.Closed, d, 60*time.Second)
		if got.Claimant != a || !strings.Contains(got.Result, "sandboxed "+a) {
			t.Errorf("%s's task closed by %q with result %q", a, got.Claimant, got.Result)
		}
		head := strings.TrimSpace(gitOut(t, repo, "rev-parse", "swarm/"+a+"/work"))
		if got.Head != head || !strings.Contains(gitOut(t, repo, "log", "-1", "--format=%s", got.Head), "work of "+a) {
			t.Errorf("%s's task froze %q; its branch is at %s", a, got.Head, head)
		}
	}
	msgs, err := db.Inbox(context.Background(), "operator", true)
	if err != nil {
		t.Fatal(err)
	}
	from := map[string]bool{}
	for _, m := range msgs {
		if m.Subject == "from "+m.From {
			from[m.From] = true
		}
	}
	for _, a := range []string{"cl", "cx", "gm"} {
		if !from[a] {
			t.Errorf("no mail from %s in the operator's inbox: %+v", a, msgs)
		}
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitNoTreeProcesses(t, stateDir, 2*time.Second)
}

// requireBwrap skips loudly without bubblewrap, or fails with
// SWARMD_REQUIRE_BWRAP=1 (CI installs it).
func requireBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("SWARMD_REQUIRE_BWRAP") == "1" {
			t.Fatal("bwrap is not installed and SWARMD_REQUIRE_BWRAP=1 (Debian: apt-get install bubblewrap)")
		}
		t.Skip("SKIPPED LOUDLY: bwrap is not installed (Debian: apt-get install bubblewrap): the sandbox is not tested here")
	}
}

// isolation: strict refuses agents that share a writable HOME, theirs or
// the daemon's: one agent's session could leave a setting there (Claude
// Code's hooks, git's config, the shell's profile) that another agent's
// session runs with that agent's authority, a reviewer's included, or that
// the operator's shell runs. auto runs, and says so where isolation is
// reported.
func TestStrictRefusesAgentsSharingAHome(t *testing.T) {
	requireBwrap(t)
	home := t.TempDir() // the daemon's
	for _, level := range []string{"strict", "auto"} {
		t.Run(level, func(t *testing.T) {
			repo := gitRepo(t)
			cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
isolation: %s
backends:
  idler: {type: command, command: sh, args: [-c, 'cat >/dev/null; printf "idle\nDONE\n"']}
agents:
  - {name: alice, role: works, backend: idler}
  - {name: rita, role: reviews, backend: idler}
`, level))
			if level == "strict" {
				_, stderr, code := runCLI(t, []string{"HOME=" + home}, "", "run", "--config", cfg)
				if code != 2 || !strings.Contains(stderr, "alice and rita write "+home+" (the daemon's HOME)") {
					t.Fatalf("strict with a shared HOME: exit %d, stderr %q; want 2 naming both agents and the HOME", code, stderr)
				}
				return
			}
			d := startDaemonEnv(t, []string{"HOME=" + home}, cfg)
			d.waitLine("the shared HOME reported", func(m map[string]any) bool {
				msg, _ := m["msg"].(string)
				return strings.Contains(msg, "NOT in force: a HOME of each agent's own: alice and rita write "+home)
			})
		})
	}
}
