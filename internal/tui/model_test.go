package tui

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/swarmd/swarmd/internal/view"
)

var update = flag.Bool("update", false, "rewrite the golden frames")

func TestMain(m *testing.M) {
	time.Local = time.UTC // event times are drawn in local time
	os.Exit(m.Run())
}

// t0 is the fixed "now" of every frame.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// swarm is the fixed snapshot the frames are drawn from: one agent in each
// visual state, a task board, an empty merge queue.
func swarm() view.Snapshot {
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	agent := func(name, state string, v view.Visual, health string) view.Agent {
		return view.Agent{Name: name, State: state, Visual: v, Indicator: v.Indicator(), Health: health, Seq: 3,
			Since: ago(time.Minute), Branch: "swarm/" + name + "/work"}
	}
	alice := agent("alice", "Running", view.Running, "")
	alice.SessionStarted, alice.LastOutput = ago(2*time.Minute+5*time.Second), ago(time.Second)
	alice.Spend = &view.Spend{Sessions: 3, TokensIn: 120_000, TokensOut: 4_500, CostUSD: 1.234}
	alice.Task = &view.TaskRef{ID: 4, Title: "make the parser accept trailing commas", State: "IN_PROGRESS"}
	bob := agent("bob", "Running", view.Stalled, "stalled")
	bob.SessionStarted, bob.LastOutput, bob.ConsecutiveErrors, bob.TotalErrors = ago(40*time.Minute), ago(7*time.Minute), 1, 2
	carol := agent("carol", "Spawning", view.Spawning, "")
	dave := agent("dave", "BuildingPrompt", view.Idle, "idle")
	dave.Spend = &view.Spend{Sessions: 12, TokensIn: 2_300_000, TokensOut: 80_000, CostUSD: 14.5}
	erin := agent("erin", "SessionComplete", view.Merging, "")
	frank := agent("frank", "Stopped", view.Dead, "")
	frank.Reason, frank.ConsecutiveErrors, frank.TotalErrors = "5 consecutive errors", 5, 5
	board := view.TaskBoard{
		States: []string{"PLANNED", "OPEN", "CLAIMED", "IN_PROGRESS", "DONE", "CLOSED", "FAILED", "BLOCKED",
			"WAITING_FOR_SUBTASKS", "CANCELLED", "ORPHANED", "PENDING_APPROVAL"},
		Counts: map[string]int{"OPEN": 2, "IN_PROGRESS": 1, "CLOSED": 7, "FAILED": 1},
		Tasks: []view.Task{
			{ID: 4, Title: "make the parser accept trailing commas", State: "IN_PROGRESS", Claimant: "alice"},
			{ID: 5, Title: "document the new flag", State: "OPEN", Assignee: "dave"},
			{ID: 6, Title: "flaky test in router", State: "OPEN"},
			{ID: 7, Title: "port the bench script", State: "FAILED"},
		},
	}
	return view.Snapshot{At: t0, Agents: []view.Agent{frank, alice, bob, carol, dave, erin}, Tasks: board,
		Merge: view.NotConfigured, Features: view.Features{Tasks: true, Writes: true}, LastEventID: 3,
		StallAfter: 300, SpawnTimeout: 60}
}

func events() []view.Event {
	return []view.Event{
		{ID: 1, At: t0.Add(-3 * time.Minute), Agent: "frank", From: "CoolingDown", Event: "BackoffElapsed", To: "Stopped"},
		{ID: 2, At: t0.Add(-2 * time.Minute), Agent: "alice", From: "Spawning", Event: "SessionStarted", To: "Running"},
		{ID: 3, At: t0.Add(-90 * time.Second), Agent: "alice", From: "CLAIMED", To: "IN_PROGRESS", TaskID: 4},
	}
}

// fakeBackend records what the model asked for.
type fakeBackend struct {
	calls []string
	tasks map[int64]view.TaskView // what Task answers
}

func (f *fakeBackend) Task(id int64) tea.Cmd {
	f.calls = append(f.calls, fmt.Sprintf("task %d", id))
	tv, ok := f.tasks[id]
	return func() tea.Msg {
		if !ok {
			return TaskMsg{ID: id, Err: fmt.Errorf("not found: no task %d", id)}
		}
		return TaskMsg{ID: id, View: tv}
	}
}

func (f *fakeBackend) Act(agent, verb string) tea.Cmd {
	f.calls = append(f.calls, verb+" "+agent)
	return func() tea.Msg { return ActionDoneMsg{What: verb + " " + agent} }
}

func (f *fakeBackend) Mail(to, body string, urgent bool) tea.Cmd {
	u := ""
	if urgent {
		u = " urgent"
	}
	f.calls = append(f.calls, "mail "+to+u+": "+body)
	return nil
}

func (f *fakeBackend) FollowLog(agent string) tea.Cmd {
	f.calls = append(f.calls, "follow "+agent)
	return nil
}

func (f *fakeBackend) StopLog() { f.calls = append(f.calls, "stop log") }

// driver feeds a model messages and keeps the result, as Bubble Tea would.
type driver struct {
	t  *testing.T
	m  Model
	be *fakeBackend
}

func newDriver(t *testing.T, opts Options, w, h int) *driver {
	be := &fakeBackend{}
	opts.Backend = be
	d := &driver{t: t, m: New(opts), be: be}
	d.send(tea.WindowSizeMsg{Width: w, Height: h})
	d.send(TickMsg(t0))
	snap := swarm()
	d.send(UpdateMsg{view.Update{Kind: view.KindSnapshot, Snapshot: &snap}})
	for _, e := range events() {
		d.send(UpdateMsg{view.Update{Kind: view.KindEvent, Event: &e}})
	}
	return d
}

// send applies msg and runs the command it returns, once, feeding its
// message back (a command's goroutine, made synchronous).
func (d *driver) send(msg tea.Msg) tea.Cmd {
	d.t.Helper()
	next, cmd := d.m.Update(msg)
	d.m = next.(Model)
	return cmd
}

func (d *driver) key(keys ...string) {
	d.t.Helper()
	for _, k := range keys {
		cmd := d.send(keyMsg(k))
		if cmd != nil {
			if msg := cmd(); msg != nil {
				if _, quit := msg.(tea.QuitMsg); !quit {
					d.send(msg)
				}
			}
		}
	}
}

func keyMsg(k string) tea.KeyPressMsg {
	switch k {
	case "enter":
		return tea.KeyPressMsg{Code: tea.KeyEnter}
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "backspace":
		return tea.KeyPressMsg{Code: tea.KeyBackspace}
	case "ctrl+u":
		return tea.KeyPressMsg{Code: 'u', Mod: tea.ModCtrl}
	case "space":
		return tea.KeyPressMsg{Code: ' ', Text: " "}
	}
	r := []rune(k)[0]
	return tea.KeyPressMsg{Code: r, Text: k}
}

// frame checks the frame's shape and compares its text with a golden file.
func (d *driver) frame(name string) string {
	d.t.Helper()
	plain := d.shape(name)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(plain), 0o644); err != nil {
			d.t.Fatal(err)
		}
		return plain
	}
	want, err := os.ReadFile(path)
	if err != nil {
		d.t.Fatalf("%v (run go test ./internal/tui -update to write it)", err)
	}
	if plain != string(want) {
		d.t.Errorf("frame %s differs from %s:\n--- got ---\n%s\n--- want ---\n%s", name, path, plain, want)
	}
	return plain
}

// shape checks that the frame is exactly the terminal's height and no line
// is wider than it, and returns its text.
func (d *driver) shape(name string) string {
	d.t.Helper()
	raw := d.m.Render()
	lines := strings.Split(raw, "\n")
	if len(lines) != d.m.height {
		d.t.Errorf("%s: %d lines, want the height %d", name, len(lines), d.m.height)
	}
	for i, l := range lines {
		if w := ansi.StringWidth(l); w > d.m.width {
			d.t.Errorf("%s: line %d is %d cells wide, over %d: %q", name, i+1, w, d.m.width, ansi.Strip(l))
		}
	}
	return ansi.Strip(raw)
}

// TestFrames draws the fixed swarm and walks through the keys, one golden
// frame each.
func TestFrames(t *testing.T) {
	d := newDriver(t, Options{Color: true}, 80, 24)
	d.frame("table_80x24")

	d.key("down", "down")
	if d.m.selected != "carol" {
		t.Fatalf("selected %q after two downs, want carol", d.m.selected)
	}
	d.frame("selected_carol")

	d.key("s")
	d.key("S")
	d.key("p") // pause is not in this swarmd: refused without a call
	if got := strings.Join(d.be.calls, ","); got != "stop carol,start carol" {
		t.Fatalf("backend calls %q", got)
	}
	d.frame("pause_unavailable")

	d.key("/", "b", "o")
	d.frame("filter_bo")
	d.key("enter")
	if vis := d.m.visible(); len(vis) != 1 || vis[0].Name != "bob" {
		t.Fatalf("filter bo shows %v", vis)
	}
	d.key("esc")
	if len(d.m.visible()) != 6 {
		t.Fatal("esc did not clear the filter")
	}

	d.key("?")
	d.frame("help")
	d.key("x")
	if d.m.mode != modeTable {
		t.Fatal("a key did not close the help")
	}

	d.key("m", "h", "i", "ctrl+u")
	d.frame("mail_typing")
	d.key("enter")
	if last := d.be.calls[len(d.be.calls)-1]; last != "mail carol urgent: hi" {
		t.Fatalf("mail call %q", last)
	}
}

// TestLogFrames: enter follows the selected agent's log, chunks render as
// lines across sessions, esc goes back and stops following.
func TestLogFrames(t *testing.T) {
	d := newDriver(t, Options{Color: true}, 80, 24)
	d.key("down", "enter")
	if d.m.mode != modeLog || d.be.calls[0] != "follow bob" {
		t.Fatalf("mode %v, calls %v", d.m.mode, d.be.calls)
	}
	for _, c := range []view.LogChunk{{Session: 2}, {Text: "running the tests\nok  \tpkg/a\t0.1s\nFAIL pkg"}, {Text: "/b\n"}, {Session: 3}, {Text: "next session\n"}} {
		d.send(LogMsg{Agent: "bob", LogChunk: c})
	}
	d.send(LogMsg{Agent: "alice", LogChunk: view.LogChunk{Text: "not bob's\n"}}) // a stale follow's chunk
	d.frame("log_bob")
	d.key("esc")
	if d.m.mode != modeTable || d.be.calls[len(d.be.calls)-1] != "stop log" {
		t.Fatalf("esc: mode %v, calls %v", d.m.mode, d.be.calls)
	}
}

// TestResizeAndUpdates: the frame follows a resize, an agent's state change
// and new events; nothing is wider or taller than the terminal.
func TestResizeAndUpdates(t *testing.T) {
	d := newDriver(t, Options{Color: true}, 80, 24)
	d.send(tea.WindowSizeMsg{Width: 120, Height: 30})
	bob := swarm().Agents[2]
	bob.State, bob.Visual, bob.Indicator, bob.Health = "Stopped", view.Dead, view.Dead.Indicator(), ""
	d.send(UpdateMsg{view.Update{Kind: view.KindAgent, Agent: &bob}})
	e := view.Event{ID: 4, At: t0, Agent: "bob", From: "Running", Event: "OperatorStop", To: "Stopped", Actor: "operator"}
	d.send(UpdateMsg{view.Update{Kind: view.KindEvent, Event: &e}})
	d.send(UpdateMsg{view.Update{Kind: view.KindEvent, Event: &e}}) // a resumed stream's repeat
	d.send(TickMsg(t0.Add(10 * time.Second)))
	d.frame("resized_120x30")
	for _, size := range [][2]int{{40, 12}, {200, 60}, {80, 10}} {
		d.send(tea.WindowSizeMsg{Width: size[0], Height: size[1]})
		d.shape(fmt.Sprint(size))
	}
}

// TestDumbFrame: without colour and symbols the frame is plain ASCII
// letters, no escape sequences.
func TestDumbFrame(t *testing.T) {
	d := newDriver(t, Options{ASCII: true}, 80, 24)
	raw := d.m.Render()
	if raw != ansi.Strip(raw) {
		t.Error("a colourless frame carries escape sequences")
	}
	for i, r := range raw {
		if r > 0x7e || r < ' ' && r != '\n' {
			t.Fatalf("an ASCII frame draws %q at byte %d", r, i)
		}
	}
	d.frame("dumb_80x24")
	// Colour is there when asked for: the running agent's indicator.
	c := newDriver(t, Options{Color: true}, 80, 24)
	if !strings.Contains(c.m.Render(), "\x1b[") {
		t.Error("a colour frame has no escape sequences")
	}
}

func TestConnectionStates(t *testing.T) {
	m := New(Options{Backend: &fakeBackend{}})
	if !strings.Contains(m.Render(), "connecting to swarmd") {
		t.Fatalf("first frame:\n%s", m.Render())
	}
	next, _ := m.Update(ConnMsg{Err: errors.New("no swarmd is running")})
	if r := next.(Model).Render(); !strings.Contains(r, "waiting for swarmd: no swarmd is running") || !strings.Contains(r, "reconnecting") {
		t.Fatalf("down:\n%s", r)
	}
	if _, cmd := next.Update(keyMsg("q")); cmd == nil || cmd() != tea.Quit() {
		t.Fatal("q does not quit while connecting")
	}
}

// TestPauseKeys: with pause in the daemon, p and r act on the selection.
func TestPauseKeys(t *testing.T) {
	d := newDriver(t, Options{}, 80, 24)
	snap := swarm()
	snap.Features.Pause = true
	d.send(UpdateMsg{view.Update{Kind: view.KindSnapshot, Snapshot: &snap}})
	d.key("down", "p", "r")
	if got := strings.Join(d.be.calls, ","); got != "pause bob,resume bob" {
		t.Fatalf("calls %q", got)
	}
	if !strings.Contains(d.m.Render(), "resume bob: sent") {
		t.Fatalf("no word of the result:\n%s", d.m.Render())
	}
}

// taskFour is the view of task 4: reviewed (FAIL then PASS), merged by the
// queue after a gate run.
func taskFour() view.TaskView {
	at := func(d time.Duration) time.Time { return t0.Add(-d) }
	return view.TaskView{
		Task:   view.Task{ID: 4, Title: "make the parser accept trailing commas", State: "CLOSED", Claimant: "alice", Reviewer: "rita", ReviewState: "complete"},
		Result: "accepts them, with a test",
		Head:   "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b", Base: "0f9e8d7c6b5a49382716059483726150f9e8d7c6",
		DiffStat: " parser.go      | 12 ++++++++++--\n parser_test.go |  9 +++++++++\n 2 files changed, 19 insertions(+), 2 deletions(-)",
		Timeline: []view.TaskEvent{
			{ID: 1, At: at(9 * time.Minute), To: "OPEN", Actor: "operator", Reason: "added: make the parser accept trailing commas"},
			{ID: 2, At: at(8 * time.Minute), From: "OPEN", To: "CLAIMED", Actor: "agent:alice", Reason: "claimed"},
			{ID: 3, At: at(6 * time.Minute), From: "CLAIMED", To: "DONE", Event: "completed", Actor: "agent:alice", Reason: "done: first try"},
			{ID: 4, At: at(5 * time.Minute), From: "DONE", To: "FAILED", Actor: "agent:rita", Reason: "review FAIL (round 1): no test"},
			{ID: 5, At: at(3 * time.Minute), From: "CLAIMED", To: "DONE", Event: "completed", Actor: "agent:alice", Reason: "done: with a test"},
			{ID: 6, At: at(2 * time.Minute), From: "queued", To: "testing", Actor: "merge-queue", Reason: "candidate 9f8e7d6 on 0f9e8d7, gate run 7"},
			{ID: 7, At: at(time.Minute), From: "DONE", To: "CLOSED", Event: "completed", Actor: "merge-queue", Reason: "merged as abcdef1"},
		},
		Verdicts: []view.Verdict{
			{Round: 1, Reviewer: "rita", Verdict: "FAIL", Text: "no test", At: at(5 * time.Minute)},
			{Round: 2, Reviewer: "rita", Verdict: "PASS", Text: "good", At: at(150 * time.Second)},
		},
		Merge: &view.TaskMerge{State: "merged", Result: "merged", Head: "1a2b3c4d5e6f", Target: "0f9e8d7c6b5a", Commit: "abcdef1234567890",
			Attempts: 1, GateSeq: 7, GateLog: "$ go test ./...\nok  \tparser\t0.2s\n=== swarmd session merge-7 seq 7 ended outcome success ==="},
		Spend: view.Spend{Sessions: 4, TokensIn: 52_000, TokensOut: 3_100, CostUSD: 0.87},
	}
}

// TestTaskView: t offers the selected agent's task, enter opens its view
// (timeline, verdicts, head and diff stat, merge and gate log, spend); an
// event of that task reads it again (live), one of another task does not;
// esc goes back.
func TestTaskView(t *testing.T) {
	d := newDriver(t, Options{Color: true}, 80, 40)
	d.be.tasks = map[int64]view.TaskView{4: taskFour()}
	d.key("t")
	if d.m.mode != modeAskTask || d.m.input != "4" {
		t.Fatalf("t: mode %v, input %q; want alice's task 4 offered", d.m.mode, d.m.input)
	}
	d.key("enter")
	if d.m.mode != modeTask || strings.Join(d.be.calls, ",") != "task 4" {
		t.Fatalf("enter: mode %v, calls %v", d.m.mode, d.be.calls)
	}
	frame := d.frame("task_4")
	for _, want := range []string{
		"task #4: make the parser accept trailing commas",
		"state CLOSED · alice · reviewer rita (complete)",
		"head 1a2b3c4 (frozen at DONE)",
		"merge: merged as abcdef1 · head 1a2b3c4 · 1 gate run",
		"spend: 4 sessions, 52.0k tokens in, 3.1k out, $0.87",
		"11:52:00 OPEN→CLAIMED agent:alice: claimed",
		"11:55:00 DONE→FAILED agent:rita: review FAIL (round 1): no test",
		"11:59:00 DONE→CLOSED merge-queue: merged as abcdef1",
		"round 1 rita FAIL: no test", "round 2 rita PASS: good",
		"diff stat of 1a2b3c4 against 0f9e8d7:", "parser.go      | 12 ++++++++++--",
		"gate log, run 7 (tail):", "$ go test ./...",
	} {
		if !strings.Contains(frame, want) {
			t.Errorf("the task view lacks %q", want)
		}
	}

	// Live: an event of task 4 reads it again; one of task 5 does not.
	e5 := view.Event{ID: 10, At: t0, Agent: "dave", From: "OPEN", To: "CLAIMED", TaskID: 5}
	if cmd := d.send(UpdateMsg{view.Update{Kind: view.KindEvent, Event: &e5}}); cmd != nil {
		t.Fatal("an event of another task reads the view again")
	}
	e4 := view.Event{ID: 11, At: t0, Agent: "merge", From: "DONE", To: "CLOSED", TaskID: 4}
	tv := taskFour()
	tv.Task.Title = "renamed"
	d.be.tasks[4] = tv
	cmd := d.send(UpdateMsg{view.Update{Kind: view.KindEvent, Event: &e4}})
	if cmd == nil {
		t.Fatal("an event of task 4 does not read its view again")
	}
	d.send(cmd())
	if !strings.Contains(d.m.Render(), "task #4: renamed") {
		t.Fatalf("the view was not refreshed:\n%s", d.m.Render())
	}

	d.key("esc")
	if d.m.mode != modeTable || d.m.taskID != 0 {
		t.Fatalf("esc: mode %v, task %d", d.m.mode, d.m.taskID)
	}
	// An id typed by hand; one that does not exist says so.
	d.key("down", "t", "9", "enter")
	if !strings.Contains(d.m.Render(), "task #9: not found: no task 9") {
		t.Fatalf("task 9:\n%s", d.m.Render())
	}
	d.key("esc", "t", "x", "enter")
	if d.m.mode != modeTable || !strings.Contains(d.m.Render(), `no task view: "x" is not a task id`) {
		t.Fatalf("a bad id: mode %v\n%s", d.m.mode, d.m.Render())
	}
}

// TestMergeQueuePanel: the queue's depth, its candidate under test and its
// running gate, the run ahead, and the last results show under the task
// board.
func TestMergeQueuePanel(t *testing.T) {
	d := newDriver(t, Options{}, 240, 30)
	q := view.MergeQueue{Configured: true, Depth: 2, GateRunning: true, GateSeq: 7, AheadSeq: 8,
		Items:  []view.MergeItem{{TaskID: 4, Agent: "alice", State: "testing"}, {TaskID: 6, Agent: "bob", State: "ahead"}},
		Recent: []view.MergeResult{{TaskID: 3, Result: "merged", Commit: "abcdef1234"}, {TaskID: 2, Result: "gate_failed"}}}
	d.send(UpdateMsg{view.Update{Kind: view.KindMerge, Merge: &q}})
	r := d.m.Render()
	for _, want := range []string{"merge queue: depth 2 · #4 testing (alice), gate running (run 7) · a run ahead (run 8)",
		"last: #3 merged abcdef1 · #2 gate_failed"} {
		if !strings.Contains(r, want) {
			t.Errorf("the frame lacks %q:\n%s", want, r)
		}
	}
}

// TestIdleAgentShowsIdle: an agent waiting for work in BuildingPrompt is
// shown idle, not BuildingPrompt.
func TestIdleAgentShowsIdle(t *testing.T) {
	d := newDriver(t, Options{}, 80, 24)
	r := d.m.Render()
	if !regexp.MustCompile(`□ dave +idle `).MatchString(r) || strings.Contains(r, "BuildingPrompt") {
		t.Fatalf("dave, idle in BuildingPrompt:\n%s", r)
	}
}

// What contains the sessions is said at the top when a part of isolation
// is not in force, and not at all when everything is.
func TestIsolationNotInForceIsShown(t *testing.T) {
	for _, c := range []struct {
		iso   string
		shown bool
	}{
		{"isolation auto: a cgroup per process tree under /sys/fs/cgroup/x; a bubblewrap sandbox per session (/usr/bin/bwrap)", false},
		{"isolation auto: a cgroup per process tree under /sys/fs/cgroup/x; NOT in force: sandbox: bwrap not found", true},
		{"isolation off: off (process groups and markers only)", true},
	} {
		d := newDriver(t, Options{}, 200, 24)
		snap := swarm()
		snap.Features.Isolation = c.iso
		d.send(UpdateMsg{view.Update{Kind: view.KindSnapshot, Snapshot: &snap}})
		r := d.m.Render()
		if got := strings.Contains(r, c.iso); got != c.shown {
			t.Errorf("%q shown %v, want %v:\n%s", c.iso, got, c.shown, r)
		}
		if n := strings.Count(r, "\n") + 1; n != 24 {
			t.Errorf("the frame has %d lines, want 24", n)
		}
	}
}

// TestEventPaneShowsASessionPerLine: a session's transitions are one line
// of the event pane; e shows every event, and e again folds them back.
func TestEventPaneShowsASessionPerLine(t *testing.T) {
	d := newDriver(t, Options{}, 160, 30)
	for i, e := range []view.Event{
		{From: "BuildingPrompt", Event: "PromptReady", To: "Spawning"},
		{From: "Spawning", Event: "SessionStarted", To: "Running"},
		{From: "Running", Event: "SessionExited", To: "SessionComplete", Reason: "exit status 0"},
		{From: "SessionComplete", Event: "WorktreeReady", To: "BuildingPrompt"},
		{From: "BuildingPrompt", Event: "Idle", To: "BuildingPrompt"},
	} {
		e.ID, e.At, e.Agent = int64(10+i), t0.Add(time.Duration(i)*time.Second), "dave"
		if e.Event != "WorktreeReady" && e.Event != "Idle" {
			e.SessionID, e.Seq = "dave-4-0a1b2c3d4e5f", 4
		}
		d.send(UpdateMsg{view.Update{Kind: view.KindEvent, Event: &e}})
	}
	folded := "12:00:00 dave #4: exit status 0 → idle (1s)"
	if r := d.m.Render(); !strings.Contains(r, folded) || strings.Contains(r, "dave Spawning→Running") {
		t.Fatalf("dave's session is not one line %q:\n%s", folded, r)
	}
	d.key("e")
	r := d.m.Render()
	for _, want := range []string{"dave BuildingPrompt→Spawning (PromptReady)", "dave Spawning→Running (SessionStarted)", "dave BuildingPrompt (Idle)"} {
		if !strings.Contains(r, want) {
			t.Errorf("expanded, the pane lacks %q:\n%s", want, r)
		}
	}
	if d.key("e"); !strings.Contains(d.m.Render(), folded) {
		t.Errorf("e again does not fold the session back:\n%s", d.m.Render())
	}
}

// TestInboxPanel: what needs a person is listed above the panes with its
// fix; past three items the last line says how many more and where.
func TestInboxPanel(t *testing.T) {
	d := newDriver(t, Options{}, 100, 30)
	if strings.Contains(d.m.Render(), "Needs you") {
		t.Fatalf("an empty inbox is drawn:\n%s", d.m.Render())
	}
	in := []view.Need{
		{Kind: view.NeedAgentStopped, Agent: "frank", What: "agent frank stopped for good: 5 consecutive errors", Fix: "swarmd start frank"},
		{Kind: view.NeedTaskFailed, Task: 7, What: "task #7 failed: the gate is red", Fix: "swarmd task retry 7"},
	}
	d.send(UpdateMsg{view.Update{Kind: view.KindInbox, Inbox: &in}})
	r := d.m.Render()
	for _, want := range []string{"─ Needs you (2) ─", "! agent frank stopped for good: 5 consecutive errors", "swarmd start frank", "! task #7 failed: the gate is red", "swarmd task retry 7"} {
		if !strings.Contains(r, want) {
			t.Errorf("the frame lacks %q:\n%s", want, r)
		}
	}
	if got := strings.Count(r, "\n") + 1; got != 30 {
		t.Errorf("the frame is %d lines, want 30", got)
	}
	more := append(in, view.Need{What: "task #8 waits for approval: x", Fix: "swarmd task approve 8"}, view.Need{What: "2 unread messages to the operator", Fix: "swarmd mail inbox"})
	d.send(UpdateMsg{view.Update{Kind: view.KindInbox, Inbox: &more}})
	r = d.m.Render()
	if !strings.Contains(r, "Needs you (4)") || !strings.Contains(r, "… 2 more: swarmd inbox") || strings.Contains(r, "task #8") {
		t.Errorf("four needs, three lines:\n%s", r)
	}
}

// TestDaemonsLine: with other daemons in the swarm, whose agents the table
// does not show, a line under the header names each with its leases' state;
// a daemon alone in its swarm has none. The frame keeps its height.
func TestDaemonsLine(t *testing.T) {
	d := newDriver(t, Options{}, 160, 30)
	one := []view.Daemon{{Name: "host1:/srv/a/.swarm", Agents: []string{"alice"}, Self: true, Live: 1}}
	d.send(UpdateMsg{view.Update{Kind: view.KindDaemons, Daemons: &one}})
	if r := d.m.Render(); strings.Contains(r, "daemons:") {
		t.Fatalf("a daemon alone in its swarm is listed:\n%s", r)
	}
	three := append(one, view.Daemon{Name: "host2:/srv/b/.swarm", Agents: []string{"bob"}, Live: 1},
		view.Daemon{Name: "host3:/srv/c/.swarm", Agents: []string{"cid"}, Expired: 1},
		view.Daemon{Name: "host4:/srv/d/.swarm", Agents: []string{"dora"}})
	d.send(UpdateMsg{view.Update{Kind: view.KindDaemons, Daemons: &three}})
	r := d.m.Render()
	want := "4 daemons: host1:/srv/a/.swarm (this) host2:/srv/b/.swarm live host3:/srv/c/.swarm EXPIRED host4:/srv/d/.swarm stopped"
	if !strings.Contains(r, want) {
		t.Errorf("the frame lacks %q:\n%s", want, r)
	}
	if got := strings.Count(r, "\n") + 1; got != 30 {
		t.Errorf("the frame is %d lines, want 30", got)
	}
}

// TestUnpricedCost: an agent with tokens and no cost reads unpriced.
func TestUnpricedCost(t *testing.T) {
	d := newDriver(t, Options{}, 120, 30)
	bob := swarm().Agents[2]
	bob.Spend = &view.Spend{Sessions: 2, TokensIn: 9000, TokensOut: 300}
	d.send(UpdateMsg{view.Update{Kind: view.KindAgent, Agent: &bob}})
	if r := d.m.Render(); !regexp.MustCompile(`bob +stalled .* 9\.3k +unpriced `).MatchString(r) {
		t.Fatalf("bob's tokens without a price:\n%s", r)
	}
}

// TestProviderHoldIsShownWhole: an agent held by its provider reads
// "provider down" in the state column, and since when and why where its
// task would be, not cut to the state column's width.
func TestProviderHoldIsShownWhole(t *testing.T) {
	d := newDriver(t, Options{}, 160, 30)
	carol := swarm().Agents[3]
	carol.State, carol.Visual, carol.Indicator = "BuildingPrompt", view.Idle, view.Idle.Indicator()
	carol.Health = "provider down since 02:11:03Z (API error 529); next probe at 02:11:20Z"
	d.send(UpdateMsg{view.Update{Kind: view.KindAgent, Agent: &carol}})
	r := d.m.Render()
	if !regexp.MustCompile(`□ carol +provider down +3 .*provider down since 02:11:03Z \(API error 529\); next probe at 02:11:20Z`).MatchString(r) {
		t.Fatalf("carol held by her provider:\n%s", r)
	}
}

// TestTaskTimelineShowsAbortReasons: a move an abnormal end of the agent's
// session caused says which (timeout, oom, ...) in the task view.
func TestTaskTimelineShowsAbortReasons(t *testing.T) {
	tv := taskFour()
	tv.Timeline = append(tv.Timeline, view.TaskEvent{ID: 8, At: t0, From: "IN_PROGRESS", To: "ORPHANED", Actor: "swarmd",
		Reason: "agent alice stopped", AbortReason: "timeout"})
	got := strings.Join(taskLines(tv), "\n")
	if want := " IN_PROGRESS→ORPHANED [timeout] swarmd: agent alice stopped"; !strings.Contains(got, want) {
		t.Errorf("task view:\n%s\nwant a line ending %q", got, want)
	}
}
