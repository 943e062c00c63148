package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestPayloadEnvAndDir(t *testing.T) {
	sup := newSupervisor(t)
	env, _, out := hookEnvFor(t)
	// An inherited SWARM_HOOK_EVENT (swarmd run from a hook) must not win.
	env = append(env, "SWARM_HOOK_EVENT=stale", "SWARM_AGENT_ID=alice")
	dir := t.TempDir()
	var rec results
	r := New(sup, Config{Commands: map[Event][]string{
		SessionEnd: {`cat > "$HOOK_OUT/stdin"; printf '%s|%s' "$SWARM_HOOK_EVENT" "$SWARM_AGENT_ID" > "$HOOK_OUT/env"; pwd -P > "$HOOK_OUT/pwd"`},
	}}, zap.NewNop(), rec.record)

	p := Payload{
		Event: SessionEnd, Agent: "alice", SessionID: "s-42", Seq: 7, State: "SessionComplete",
		Outcome: "Error", Reason: "exit status 1", HeadBefore: "abc", HeadAfter: "def",
		Time: time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC),
	}
	if err := r.Run(context.Background(), dir, env, p); err != nil {
		t.Fatalf("Run: %v", err)
	}

	stdin := readFile(t, filepath.Join(out, "stdin"))
	var got Payload
	if err := json.Unmarshal([]byte(stdin), &got); err != nil {
		t.Fatalf("payload %q: %v", stdin, err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Errorf("payload = %+v, want %+v", got, p)
	}
	var keys map[string]any
	if err := json.Unmarshal([]byte(stdin), &keys); err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{"agent", "event", "head_after", "head_before", "outcome", "reason", "seq", "session_id", "state", "time"}
	if k := sortedKeys(keys); !slices.Equal(k, wantKeys) {
		t.Errorf("payload keys = %v, want %v (snake_case, stop_reason omitted)", k, wantKeys)
	}
	if !strings.HasSuffix(stdin, "}\n") {
		t.Errorf("payload %q does not end in a newline", stdin)
	}
	if got := readFile(t, filepath.Join(out, "env")); got != "session_end|alice" {
		t.Errorf("SWARM_HOOK_EVENT|SWARM_AGENT_ID = %q", got)
	}
	wantDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(out, "pwd"))); got != wantDir {
		t.Errorf("hook ran in %q, want %q", got, wantDir)
	}
	if o := rec.outcomes(); !slices.Equal(o, []string{OutcomeOK}) {
		t.Errorf("outcomes = %v", o)
	}
}

func sortedKeys(m map[string]any) []string {
	k := make([]string, 0, len(m))
	for key := range m {
		k = append(k, key)
	}
	slices.Sort(k)
	return k
}

func TestCommandsRunInOrderAndFailuresAreLogged(t *testing.T) {
	sup := newSupervisor(t)
	env, _, out := hookEnvFor(t)
	core, logs := observer.New(zapcore.InfoLevel)
	var rec results
	cmds := []string{
		`echo 1 >> "$HOOK_OUT/order"`,
		`echo 2 >> "$HOOK_OUT/order"; echo oops >&2; exit 3`,
		`echo 3 >> "$HOOK_OUT/order"`,
	}
	r := New(sup, Config{Commands: map[Event][]string{AgentStart: cmds}}, zap.New(core), rec.record)
	if !r.Has(AgentStart) || r.Has(SessionStart) {
		t.Errorf("Has(agent_start) = %v, Has(session_start) = %v; want true, false", r.Has(AgentStart), r.Has(SessionStart))
	}

	err := r.Run(context.Background(), t.TempDir(), env, Payload{Event: AgentStart, Agent: "bob", SessionID: "s-1"})
	if err != nil {
		t.Fatalf("Run: a failing hook must not fail the agent: %v", err)
	}
	if got := readFile(t, filepath.Join(out, "order")); got != "1\n2\n3\n" {
		t.Errorf("order = %q", got)
	}
	res := rec.all()
	if len(res) != 3 {
		t.Fatalf("onResult called %d times, want 3", len(res))
	}
	for i, want := range []struct {
		outcome string
		code    int
		output  string
	}{{OutcomeOK, 0, ""}, {OutcomeError, 3, "oops\n"}, {OutcomeOK, 0, ""}} {
		if res[i].Command != cmds[i] || res[i].Outcome != want.outcome || res[i].ExitCode != want.code ||
			res[i].Output != want.output || res[i].Duration <= 0 {
			t.Errorf("result %d = %+v, want %s/%d/%q", i, res[i], want.outcome, want.code, want.output)
		}
	}
	if rec.evs[0] != AgentStart {
		t.Errorf("onResult event = %q", rec.evs[0])
	}

	entries := logs.All()
	if len(entries) != 3 {
		t.Fatalf("%d log lines, want one per command: %v", len(entries), entries)
	}
	failed := entries[1]
	if failed.Level != zapcore.WarnLevel {
		t.Errorf("failed hook logged at %s", failed.Level)
	}
	f := failed.ContextMap()
	for k, want := range map[string]any{
		"agent": "bob", "session": "s-1", "event": "agent_start", "command": cmds[1],
		"outcome": "error", "exit_code": int64(3), "output": "oops\n",
	} {
		if f[k] != want {
			t.Errorf("log field %s = %#v, want %#v", k, f[k], want)
		}
	}
}

func TestSessionStartExit2Blocks(t *testing.T) {
	sup := newSupervisor(t)
	env, _, out := hookEnvFor(t)
	var rec results
	cmds := []string{
		`echo 1 >> "$HOOK_OUT/order"`,
		`echo checking; echo 'tests are red' >&2; exit 2`,
		`echo 3 >> "$HOOK_OUT/order"`,
	}
	r := New(sup, Config{Commands: map[Event][]string{SessionStart: cmds, SessionEnd: cmds}}, zap.NewNop(), rec.record)

	err := r.Run(context.Background(), t.TempDir(), env, Payload{Event: SessionStart})
	if !errors.Is(err, ErrBlocked) {
		t.Fatalf("Run = %v, want ErrBlocked", err)
	}
	var be *BlockedError
	if !errors.As(err, &be) || be.Command != cmds[1] || be.Output != "checking\ntests are red\n" {
		t.Fatalf("error = %#v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, cmds[1]) || !strings.HasSuffix(msg, ": tests are red") {
		t.Errorf("error message %q should name the command and the hook's reason", msg)
	}
	if got := readFile(t, filepath.Join(out, "order")); got != "1\n" {
		t.Errorf("order = %q: no hook runs after the one that blocked", got)
	}
	if o := rec.outcomes(); !slices.Equal(o, []string{OutcomeOK, OutcomeBlocked}) {
		t.Errorf("outcomes = %v", o)
	}

	// Exit 2 blocks nothing but a session start.
	rec = results{}
	if err := r.Run(context.Background(), t.TempDir(), env, Payload{Event: SessionEnd}); err != nil {
		t.Fatalf("session_end Run = %v, want nil", err)
	}
	if got := readFile(t, filepath.Join(out, "order")); got != "1\n1\n3\n" {
		t.Errorf("order = %q", got)
	}
	if o := rec.outcomes(); !slices.Equal(o, []string{OutcomeOK, OutcomeError, OutcomeOK}) {
		t.Errorf("outcomes = %v", o)
	}
	if c := rec.all()[1].ExitCode; c != 2 {
		t.Errorf("exit code = %d", c)
	}
}

func TestTimeoutEndsWholeTree(t *testing.T) {
	const timeout = 300 * time.Millisecond
	const margin = 2 * time.Second // -race on two shared cores; the tree's end itself takes milliseconds
	for _, tc := range []struct{ name, cmd string }{
		{"sleep", `sleep 100`},
		{"setsid grandchild", `setsid sleep 100 & echo $! > "$HOOK_OUT/pid"; sleep 100`},
		{"ignores SIGTERM", `trap '' TERM INT HUP; sleep 100`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sup := newSupervisor(t)
			env, mark, out := hookEnvFor(t)
			var rec results
			r := New(sup, Config{
				Commands: map[Event][]string{SessionEnd: {tc.cmd, `echo after > "$HOOK_OUT/after"`}},
				Timeout:  timeout,
			}, zap.NewNop(), rec.record)

			start := time.Now()
			if err := r.Run(context.Background(), t.TempDir(), env, Payload{Event: SessionEnd}); err != nil {
				t.Fatalf("Run: %v", err)
			}
			elapsed := time.Since(start)
			if elapsed < timeout || elapsed > timeout+margin {
				t.Errorf("Run took %s, want about %s", elapsed, timeout)
			}
			noLeftovers(t, mark)
			if strings.Contains(tc.cmd, "setsid") && strings.TrimSpace(readFile(t, filepath.Join(out, "pid"))) == "" {
				t.Fatal("the setsid grandchild was never started: the test proves nothing")
			}
			res := rec.all()
			if o := rec.outcomes(); !slices.Equal(o, []string{OutcomeTimeout, OutcomeOK}) {
				t.Fatalf("outcomes = %v: a hung hook times out and the next one still runs", o)
			}
			if res[0].ExitCode != -1 || res[0].Duration < timeout {
				t.Errorf("timed-out result = %+v", res[0])
			}
		})
	}
}

func TestBackgroundProcessEndsWithHook(t *testing.T) {
	sup := newSupervisor(t)
	env, mark, out := hookEnvFor(t)
	var rec results
	// The grandchild keeps the output pipe open: the hook must still be done
	// when the shell exits, not when the timeout fires.
	r := New(sup, Config{
		Commands: map[Event][]string{AgentStopped: {`setsid sleep 100 & echo $! > "$HOOK_OUT/pid"; echo started`}},
		Timeout:  time.Minute,
	}, zap.NewNop(), rec.record)

	start := time.Now()
	if err := r.Run(context.Background(), t.TempDir(), env, Payload{Event: AgentStopped}); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run took %s: it waited for the background process", d)
	}
	if readFile(t, filepath.Join(out, "pid")) == "" {
		t.Fatal("background process never started")
	}
	noLeftovers(t, mark)
	res := rec.all()
	if len(res) != 1 || res[0].Outcome != OutcomeOK || res[0].Output != "started\n" {
		t.Errorf("results = %+v", res)
	}
}

func TestOutputIsBounded(t *testing.T) {
	sup := newSupervisor(t)
	env, _, _ := hookEnvFor(t)
	var rec results
	const size = 20_000_000
	r := New(sup, Config{Commands: map[Event][]string{
		SessionEnd: {fmt.Sprintf(`head -c %d /dev/zero | tr '\0' x`, size)},
	}}, zap.NewNop(), rec.record) // MaxOutput 0: the default

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := r.Run(context.Background(), t.TempDir(), env, Payload{Event: SessionEnd}); err != nil {
		t.Fatalf("Run: %v", err)
	}
	runtime.ReadMemStats(&after)

	res := rec.all()
	if len(res) != 1 || res[0].Outcome != OutcomeOK {
		t.Fatalf("results = %+v", res)
	}
	if res[0].Output != strings.Repeat("x", DefaultMaxOutput) {
		t.Errorf("output is %d bytes, want the first %d", len(res[0].Output), DefaultMaxOutput)
	}
	if res[0].Truncated != size-DefaultMaxOutput {
		t.Errorf("truncated = %d, want %d", res[0].Truncated, size-DefaultMaxOutput)
	}
	// Keeping it all would allocate at least the 20 MB.
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("Run allocated %d bytes", alloc)
	if alloc > 4<<20 {
		t.Errorf("Run allocated %d bytes for a hook printing %d", alloc, size)
	}
}

func TestContextCancelKillsHook(t *testing.T) {
	sup := newSupervisor(t)
	env, mark, out := hookEnvFor(t)
	var rec results
	r := New(sup, Config{
		Commands: map[Event][]string{SessionStart: {
			`setsid sleep 100 & echo $! > "$HOOK_OUT/started"; sleep 100`,
			`echo ran > "$HOOK_OUT/second"`,
		}},
		Timeout: time.Minute,
	}, zap.NewNop(), rec.record)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx, t.TempDir(), env, Payload{Event: SessionStart}) }()
	waitForFile(t, filepath.Join(out, "started"))
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrBlocked) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Run did not return after cancel")
	}
	noLeftovers(t, mark)
	if o := rec.outcomes(); !slices.Equal(o, []string{OutcomeError}) {
		t.Errorf("outcomes = %v: the killed hook is counted, the next one never runs", o)
	}
	if b, err := filepath.Glob(filepath.Join(out, "second")); err != nil || len(b) > 0 {
		t.Error("a hook ran after cancel")
	}

	// Already cancelled: nothing runs.
	rec = results{}
	if err := r.Run(ctx, t.TempDir(), env, Payload{Event: SessionStart}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with a done ctx = %v", err)
	}
	if len(rec.all()) != 0 {
		t.Error("a hook ran with a done ctx")
	}
}

func TestStartFailureAndNoCommands(t *testing.T) {
	sup := newSupervisor(t)
	env, _, _ := hookEnvFor(t)
	var rec results
	r := New(sup, Config{Commands: map[Event][]string{SessionStart: {`true`}}}, zap.NewNop(), rec.record)

	missing := filepath.Join(t.TempDir(), "gone")
	if err := r.Run(context.Background(), missing, env, Payload{Event: SessionStart}); err != nil {
		t.Fatalf("Run in a missing dir = %v, want nil (logged and counted)", err)
	}
	res := rec.all()
	if len(res) != 1 || res[0].Outcome != OutcomeError || res[0].ExitCode != -1 ||
		!strings.Contains(res[0].Output, "working directory") {
		t.Errorf("results = %+v", res)
	}

	rec = results{}
	if err := r.Run(context.Background(), t.TempDir(), env, Payload{Event: AgentStopped}); err != nil {
		t.Fatalf("Run without commands = %v", err)
	}
	if len(rec.all()) != 0 {
		t.Error("onResult called for an event without hooks")
	}
}

func TestConcurrentRuns(t *testing.T) {
	sup := newSupervisor(t)
	env, _, _ := hookEnvFor(t)
	var rec results
	r := New(sup, Config{Commands: map[Event][]string{SessionEnd: {`cat >/dev/null`, `true`}}}, zap.NewNop(), rec.record)
	// A second Runner on the same Supervisor must not reuse the first's tree ids.
	r2 := New(sup, r.cfg, zap.NewNop(), rec.record)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			run := r
			if i%2 == 1 {
				run = r2
			}
			if err := run.Run(context.Background(), t.TempDir(), env, Payload{Event: SessionEnd}); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	wg.Wait()
	o := rec.outcomes()
	if len(o) != 12 || slices.ContainsFunc(o, func(s string) bool { return s != OutcomeOK }) {
		t.Errorf("outcomes = %v, want 12 ok", o)
	}
}

func TestBoundedBuffer(t *testing.T) {
	b := &boundedBuffer{max: 5}
	for _, w := range []string{"ab", "cd", "efg", "", "hij"} {
		if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if string(b.buf) != "abcde" || b.dropped != 5 {
		t.Errorf("kept %q, dropped %d", b.buf, b.dropped)
	}
}

func TestLastLine(t *testing.T) {
	for in, want := range map[string]string{
		"":                             "",
		"one\n":                        "one",
		"a\nreason here \n\n":          "reason here",
		"é" + strings.Repeat("x", 300): "é" + strings.Repeat("x", 198),
		strings.Repeat("x", 199) + "é": strings.Repeat("x", 199),
	} {
		if got := lastLine(in, 200); got != want {
			t.Errorf("lastLine(%.20q) = %q, want %q", in, got, want)
		}
	}
}
