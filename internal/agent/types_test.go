package agent

import (
	"errors"
	"testing"
	"time"
)

func TestStateKindNames(t *testing.T) {
	want := []string{"Initializing", "BuildingPrompt", "Spawning", "Running", "Interrupting", "SessionComplete", "CoolingDown", "Stopped"}
	if len(AllStates) != len(want) {
		t.Fatalf("len(AllStates) = %d, want %d", len(AllStates), len(want))
	}
	for i, k := range AllStates {
		if int(k) != i {
			t.Errorf("AllStates[%d] = %d, want %d", i, k, i)
		}
		if got := k.String(); got != want[i] {
			t.Errorf("StateKind(%d).String() = %q, want %q", i, got, want[i])
		}
		got, err := ParseStateKind(want[i])
		if err != nil || got != k {
			t.Errorf("ParseStateKind(%q) = %v, %v; want %v, nil", want[i], got, err, k)
		}
	}
	if got := StateKind(8).String(); got != "StateKind(8)" {
		t.Errorf("StateKind(8).String() = %q", got)
	}
	for _, bad := range []string{"", "running", "Running{session_seq: 3}", "StateKind(8)"} {
		if _, err := ParseStateKind(bad); !errors.Is(err, ErrUnknownStateKind) {
			t.Errorf("ParseStateKind(%q) error = %v, want ErrUnknownStateKind", bad, err)
		}
	}
}

func TestEnumNames(t *testing.T) {
	events := map[EventKind]string{
		WorktreeReady: "WorktreeReady", PromptReady: "PromptReady", SessionStarted: "SessionStarted",
		SessionExited: "SessionExited", UrgentMessage: "UrgentMessage", GraceExceeded: "GraceExceeded",
		BackoffElapsed: "BackoffElapsed", OperatorStop: "OperatorStop", FatalError: "FatalError",
		0: "EventKind(0)", 10: "EventKind(10)",
	}
	for k, want := range events {
		if got := k.String(); got != want {
			t.Errorf("EventKind(%d).String() = %q, want %q", k, got, want)
		}
	}
	if WorktreeReady != 1 || FatalError != 9 {
		t.Errorf("EventKind values: WorktreeReady=%d FatalError=%d, want 1 and 9", WorktreeReady, FatalError)
	}
	outcomes := map[OutcomeKind]string{Success: "Success", Error: "Error", Timeout: "Timeout", 3: "OutcomeKind(3)"}
	for k, want := range outcomes {
		if got := k.String(); got != want {
			t.Errorf("OutcomeKind(%d).String() = %q, want %q", k, got, want)
		}
	}
	effects := map[EffectKind]string{
		NoEffect: "None", StorePrompt: "StorePrompt", CancelSession: "CancelSession",
		ForceStopSession: "ForceStopSession", IncrementSession: "IncrementSession", LogFatal: "LogFatal",
		6: "EffectKind(6)",
	}
	for k, want := range effects {
		if got := k.String(); got != want {
			t.Errorf("EffectKind(%d).String() = %q, want %q", k, got, want)
		}
	}
}

func TestStringers(t *testing.T) {
	until := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	tests := []struct {
		name string
		got  interface{ String() string }
		want string
	}{
		{"state plain", State{Kind: BuildingPrompt}, "BuildingPrompt"},
		{"state running", State{Kind: Running, SessionSeq: 3}, "Running{session_seq: 3}"},
		{"state interrupting", State{Kind: Interrupting, SessionSeq: 4294967295}, "Interrupting{session_seq: 4294967295}"},
		{"state cooling", State{Kind: CoolingDown, Until: until}, "CoolingDown{until: 2025-01-02T03:04:05.000000006Z}"},
		{"state stopped ignores payload", State{Kind: Stopped, SessionSeq: 9}, "Stopped"},
		{"outcome success", ExitOutcome{Kind: Success}, "Success"},
		{"outcome error", ExitOutcome{Kind: Error, Msg: "boom"}, "Error(boom)"},
		{"outcome timeout", ExitOutcome{Kind: Timeout, Msg: "ignored"}, "Timeout"},
		{"event worktree", EvWorktreeReady(), "WorktreeReady"},
		{"event prompt shows length only", EvPromptReady("secret prompt"), "PromptReady(len=13)"},
		{"event started", EvSessionStarted(7), "SessionStarted(7)"},
		{"event exited error", EvSessionExited(ExitOutcome{Kind: Error, Msg: "boom"}), "SessionExited(Error(boom))"},
		{"event exited timeout", EvSessionExited(ExitOutcome{Kind: Timeout}), "SessionExited(Timeout)"},
		{"event urgent", EvUrgentMessage(), "UrgentMessage"},
		{"event grace", EvGraceExceeded(), "GraceExceeded"},
		{"event backoff", EvBackoffElapsed(), "BackoffElapsed"},
		{"event stop", EvOperatorStop(), "OperatorStop"},
		{"event fatal", EvFatalError("disk full"), "FatalError(disk full)"},
		{"effect none", SideEffect{}, "None"},
		{"effect store shows length only", SideEffect{Kind: StorePrompt, Prompt: "secret"}, "StorePrompt(len=6)"},
		{"effect cancel", SideEffect{Kind: CancelSession}, "CancelSession"},
		{"effect force", SideEffect{Kind: ForceStopSession}, "ForceStopSession"},
		{"effect increment", SideEffect{Kind: IncrementSession}, "IncrementSession"},
		{"effect fatal", SideEffect{Kind: LogFatal, Msg: "boom"}, "LogFatal(boom)"},
	}
	for _, tt := range tests {
		if got := tt.got.String(); got != tt.want {
			t.Errorf("%s: String() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestIsTerminal(t *testing.T) {
	for _, k := range AllStates {
		if got, want := (State{Kind: k}).IsTerminal(), k == Stopped; got != want {
			t.Errorf("State{%v}.IsTerminal() = %v, want %v", k, got, want)
		}
	}
}

func TestEventConstructors(t *testing.T) {
	o := ExitOutcome{Kind: Error, Msg: "x"}
	tests := []struct {
		got, want Event
	}{
		{EvWorktreeReady(), Event{Kind: WorktreeReady}},
		{EvPromptReady("p"), Event{Kind: PromptReady, Prompt: "p"}},
		{EvSessionStarted(4), Event{Kind: SessionStarted, Seq: 4}},
		{EvSessionExited(o), Event{Kind: SessionExited, Outcome: o}},
		{EvUrgentMessage(), Event{Kind: UrgentMessage}},
		{EvGraceExceeded(), Event{Kind: GraceExceeded}},
		{EvBackoffElapsed(), Event{Kind: BackoffElapsed}},
		{EvOperatorStop(), Event{Kind: OperatorStop}},
		{EvFatalError("m"), Event{Kind: FatalError, Msg: "m"}},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("constructor = %+v, want %+v", tt.got, tt.want)
		}
	}
}
