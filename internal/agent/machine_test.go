package agent

import (
	"errors"
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func sameState(a, b State) bool {
	return a.Kind == b.Kind && a.SessionSeq == b.SessionSeq && a.Until.Equal(b.Until)
}

var (
	okExit      = ExitOutcome{Kind: Success}
	errExit     = ExitOutcome{Kind: Error, Msg: "boom"}
	timeoutExit = ExitOutcome{Kind: Timeout}
)

// TestTransitionTable checks every (state, event) pair, with each ExitOutcome
// variant for SessionExited: 8 states × 11 events. Each machine starts from
// counters 2/7 so that increments and resets are visible.
func TestTransitionTable(t *testing.T) {
	const cons, total = 2, 7
	from := map[StateKind]State{
		Initializing:    {Kind: Initializing},
		BuildingPrompt:  {Kind: BuildingPrompt},
		Spawning:        {Kind: Spawning},
		Running:         {Kind: Running, SessionSeq: 3},
		Interrupting:    {Kind: Interrupting, SessionSeq: 3},
		SessionComplete: {Kind: SessionComplete},
		CoolingDown:     {Kind: CoolingDown, Until: t0.Add(time.Hour)},
		Stopped:         {Kind: Stopped},
	}
	events := []struct {
		name string
		ev   Event
	}{
		{"WorktreeReady", EvWorktreeReady()},
		{"PromptReady", EvPromptReady("the prompt")},
		{"SessionStarted", EvSessionStarted(9)},
		{"SessionExited(Success)", EvSessionExited(okExit)},
		{"SessionExited(Error)", EvSessionExited(errExit)},
		{"SessionExited(Timeout)", EvSessionExited(timeoutExit)},
		{"UrgentMessage", EvUrgentMessage()},
		{"GraceExceeded", EvGraceExceeded()},
		{"BackoffElapsed", EvBackoffElapsed()},
		{"OperatorStop", EvOperatorStop()},
		{"FatalError", EvFatalError("disk full")},
	}
	type key struct {
		from  StateKind
		event string
	}
	type want struct {
		to          State
		effect      SideEffect
		cons, total uint32
	}
	none := SideEffect{}
	stopped := State{Kind: Stopped}
	building := State{Kind: BuildingPrompt}
	cooling := State{Kind: CoolingDown, Until: t0.Add(8 * time.Second)} // n = 3 after increment
	fatal := SideEffect{Kind: LogFatal, Msg: "disk full"}
	cancel := SideEffect{Kind: CancelSession}
	// Every allowed pair; all 88 - len(allowed) others must be rejected.
	allowed := map[key]want{
		{Initializing, "WorktreeReady"}:          {building, none, cons, total},
		{BuildingPrompt, "PromptReady"}:          {State{Kind: Spawning}, SideEffect{Kind: StorePrompt, Prompt: "the prompt"}, cons, total},
		{Spawning, "SessionStarted"}:             {State{Kind: Running, SessionSeq: 9}, none, 0, total},
		{Spawning, "SessionExited(Error)"}:       {cooling, none, cons + 1, total + 1},
		{Spawning, "SessionExited(Timeout)"}:     {cooling, none, cons + 1, total + 1},
		{Running, "SessionExited(Success)"}:      {State{Kind: SessionComplete}, none, 0, total},
		{Running, "SessionExited(Error)"}:        {cooling, none, cons + 1, total + 1},
		{Running, "SessionExited(Timeout)"}:      {cooling, none, cons + 1, total + 1},
		{Running, "UrgentMessage"}:               {State{Kind: Interrupting, SessionSeq: 3}, cancel, cons, total},
		{Interrupting, "SessionExited(Success)"}: {building, none, cons, total},
		{Interrupting, "SessionExited(Error)"}:   {building, none, cons, total},
		{Interrupting, "SessionExited(Timeout)"}: {building, none, cons, total},
		{Interrupting, "GraceExceeded"}:          {building, SideEffect{Kind: ForceStopSession}, cons, total},
		{SessionComplete, "WorktreeReady"}:       {building, SideEffect{Kind: IncrementSession}, cons, total},
		{CoolingDown, "BackoffElapsed"}:          {building, none, cons, total},
		{Initializing, "OperatorStop"}:           {stopped, none, cons, total},
		{BuildingPrompt, "OperatorStop"}:         {stopped, none, cons, total},
		{Spawning, "OperatorStop"}:               {stopped, none, cons, total},
		{Running, "OperatorStop"}:                {stopped, cancel, cons, total},
		{Interrupting, "OperatorStop"}:           {stopped, cancel, cons, total},
		{SessionComplete, "OperatorStop"}:        {stopped, none, cons, total},
		{CoolingDown, "OperatorStop"}:            {stopped, none, cons, total},
		{Stopped, "OperatorStop"}:                {stopped, none, cons, total},
		{Initializing, "FatalError"}:             {stopped, fatal, cons, total},
		{BuildingPrompt, "FatalError"}:           {stopped, fatal, cons, total},
		{Spawning, "FatalError"}:                 {stopped, fatal, cons, total},
		{Running, "FatalError"}:                  {stopped, fatal, cons, total},
		{Interrupting, "FatalError"}:             {stopped, fatal, cons, total},
		{SessionComplete, "FatalError"}:          {stopped, fatal, cons, total},
		{CoolingDown, "FatalError"}:              {stopped, fatal, cons, total},
		{Stopped, "FatalError"}:                  {stopped, none, cons, total},
	}

	used := 0
	for _, k := range AllStates {
		for _, e := range events {
			start := from[k]
			m := Restore(Thresholds{}, start, cons, total)
			eff, err := m.Handle(e.ev, t0)
			w, ok := allowed[key{k, e.name}]
			if ok {
				used++
				if err != nil {
					t.Errorf("%v + %s: unexpected error %v", start, e.name, err)
					continue
				}
				if !sameState(m.State(), w.to) || eff != w.effect ||
					m.ConsecutiveErrors() != w.cons || m.TotalErrors() != w.total {
					t.Errorf("%v + %s = %v / %v / cons %d total %d; want %v / %v / cons %d total %d",
						start, e.name, m.State(), eff, m.ConsecutiveErrors(), m.TotalErrors(),
						w.to, w.effect, w.cons, w.total)
				}
				continue
			}
			var te *TransitionError
			if !errors.As(err, &te) || !errors.Is(err, ErrInvalidTransition) {
				t.Errorf("%v + %s: error = %v, want *TransitionError wrapping ErrInvalidTransition", start, e.name, err)
				continue
			}
			if !sameState(te.From, start) || te.Event != e.ev.Kind {
				t.Errorf("%v + %s: TransitionError{From: %v, Event: %v}", start, e.name, te.From, te.Event)
			}
			if eff != (SideEffect{}) {
				t.Errorf("%v + %s: effect %v on rejected event, want None", start, e.name, eff)
			}
			if !sameState(m.State(), start) || m.ConsecutiveErrors() != cons || m.TotalErrors() != total {
				t.Errorf("%v + %s: rejected event changed machine to %v cons %d total %d",
					start, e.name, m.State(), m.ConsecutiveErrors(), m.TotalErrors())
			}
		}
	}
	if used != len(allowed) {
		t.Errorf("table test used %d of %d allowed rows (typo in a key?)", used, len(allowed))
	}
}

// TestRejectsMalformedEvents: out-of-range kinds are caller bugs; they must
// be reported, not panic or move the machine.
func TestRejectsMalformedEvents(t *testing.T) {
	bad := ExitOutcome{Kind: 3}
	tests := []struct {
		from State
		ev   Event
	}{
		{State{Kind: BuildingPrompt}, Event{}},
		{State{Kind: Running, SessionSeq: 1}, Event{Kind: 10}},
		{State{Kind: Running, SessionSeq: 1}, EvSessionExited(bad)},
		{State{Kind: Spawning}, EvSessionExited(bad)},
		{State{Kind: Interrupting, SessionSeq: 1}, EvSessionExited(bad)},
		{State{Kind: 42}, EvWorktreeReady()},
	}
	for _, tt := range tests {
		m := Restore(Thresholds{}, tt.from, 1, 1)
		_, err := m.Handle(tt.ev, t0)
		if !errors.Is(err, ErrInvalidTransition) {
			t.Errorf("%v + %+v: error = %v, want ErrInvalidTransition", tt.from, tt.ev, err)
		}
		if !sameState(m.State(), tt.from) || m.ConsecutiveErrors() != 1 || m.TotalErrors() != 1 {
			t.Errorf("%v + %+v: machine changed to %v", tt.from, tt.ev, m.State())
		}
	}
	// Global events still work from a corrupt restored state.
	m := Restore(Thresholds{}, State{Kind: 42}, 0, 0)
	if _, err := m.Handle(EvOperatorStop(), t0); err != nil || m.State().Kind != Stopped {
		t.Errorf("OperatorStop from unknown state: %v, %v", m.State(), err)
	}
}

func TestTransitionErrorMessage(t *testing.T) {
	m := Restore(Thresholds{}, State{Kind: Stopped}, 0, 0)
	_, err := m.Handle(EvSessionExited(okExit), t0)
	if got, want := err.Error(), "agent: invalid transition: event SessionExited in state Stopped"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	m = Restore(Thresholds{}, State{Kind: Running, SessionSeq: 3}, 0, 0)
	_, err = m.Handle(EvPromptReady("x"), t0)
	if got, want := err.Error(), "agent: invalid transition: event PromptReady in state Running{session_seq: 3}"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// mustHandle applies ev and fails the test on a TransitionError.
func mustHandle(t *testing.T, m *Machine, ev Event, now time.Time) SideEffect {
	t.Helper()
	eff, err := m.Handle(ev, now)
	if err != nil {
		t.Fatalf("Handle(%v) in %v: %v", ev, m.State(), err)
	}
	return eff
}

// toSpawning drives a machine from BuildingPrompt or CoolingDown to Spawning.
func toSpawning(t *testing.T, m *Machine) {
	t.Helper()
	if m.State().Kind == CoolingDown {
		mustHandle(t, m, EvBackoffElapsed(), t0)
	}
	mustHandle(t, m, EvPromptReady("p"), t0)
}

func TestConsecutiveThreshold(t *testing.T) {
	m := New(Thresholds{})
	mustHandle(t, m, EvWorktreeReady(), t0)
	exit := EvSessionExited(ExitOutcome{Kind: Error, Msg: "exit status 1"})
	for i := uint32(1); i < 5; i++ {
		toSpawning(t, m)
		if eff := mustHandle(t, m, exit, t0); eff != (SideEffect{}) {
			t.Fatalf("error %d: effect %v, want None", i, eff)
		}
		want := State{Kind: CoolingDown, Until: t0.Add(Backoff(i))}
		if !sameState(m.State(), want) || m.ConsecutiveErrors() != i || m.TotalErrors() != i {
			t.Fatalf("error %d: %v cons %d total %d, want %v cons %d total %d",
				i, m.State(), m.ConsecutiveErrors(), m.TotalErrors(), want, i, i)
		}
	}
	toSpawning(t, m)
	eff := mustHandle(t, m, exit, t0)
	want := SideEffect{Kind: LogFatal, Msg: "5 consecutive errors (max 5), last: Error(exit status 1)"}
	if eff != want || !m.State().IsTerminal() {
		t.Fatalf("5th error: %v / %v, want Stopped / %v", m.State(), eff, want)
	}
	if m.ConsecutiveErrors() != 5 || m.TotalErrors() != 5 {
		t.Errorf("counters cons %d total %d, want 5 and 5", m.ConsecutiveErrors(), m.TotalErrors())
	}
}

// TestTotalThreshold alternates Spawning errors with Running timeouts: the
// SessionStarted in between resets consecutive_errors, so only total_errors
// can reach its limit.
func TestTotalThreshold(t *testing.T) {
	m := New(Thresholds{})
	mustHandle(t, m, EvWorktreeReady(), t0)
	var eff SideEffect
	for i := uint32(1); i <= 20; i++ {
		toSpawning(t, m)
		if i%2 == 1 {
			eff = mustHandle(t, m, EvSessionExited(errExit), t0)
		} else {
			mustHandle(t, m, EvSessionStarted(i), t0)
			if m.ConsecutiveErrors() != 0 {
				t.Fatalf("SessionStarted left consecutive at %d", m.ConsecutiveErrors())
			}
			eff = mustHandle(t, m, EvSessionExited(timeoutExit), t0)
		}
		// A Spawning error follows a Running timeout with no reset in
		// between, so consecutive is 2 there; SessionStarted brings it back.
		wantCons := uint32(1)
		if i > 1 && i%2 == 1 {
			wantCons = 2
		}
		if m.TotalErrors() != i || m.ConsecutiveErrors() != wantCons {
			t.Fatalf("error %d: cons %d total %d, want %d and %d", i, m.ConsecutiveErrors(), m.TotalErrors(), wantCons, i)
		}
		if i < 20 && m.State().Kind != CoolingDown {
			t.Fatalf("error %d: state %v, want CoolingDown", i, m.State())
		}
	}
	want := SideEffect{Kind: LogFatal, Msg: "20 total errors (max 20), last: Timeout"}
	if eff != want || m.State().Kind != Stopped {
		t.Fatalf("20th error: %v / %v, want Stopped / %v", m.State(), eff, want)
	}
}

func TestCustomThresholds(t *testing.T) {
	if got, want := New(Thresholds{MaxTotalErrors: 3}).Thresholds(), (Thresholds{5, 3}); got != want {
		t.Errorf("partial thresholds = %+v, want %+v", got, want)
	}
	if got := New(Thresholds{}).Thresholds(); got != DefaultThresholds() || got != (Thresholds{5, 20}) {
		t.Errorf("zero thresholds = %+v, want {5 20}", got)
	}

	t.Run("consecutive 2", func(t *testing.T) {
		m := Restore(Thresholds{MaxConsecutiveErrors: 2, MaxTotalErrors: 3}, State{Kind: Spawning}, 0, 0)
		mustHandle(t, m, EvSessionExited(errExit), t0)
		toSpawning(t, m)
		eff := mustHandle(t, m, EvSessionExited(ExitOutcome{Kind: Error, Msg: "x"}), t0)
		if want := "2 consecutive errors (max 2), last: Error(x)"; eff.Kind != LogFatal || eff.Msg != want || m.State().Kind != Stopped {
			t.Errorf("got %v / %v, want Stopped / LogFatal(%s)", m.State(), eff, want)
		}
	})
	t.Run("total 3", func(t *testing.T) {
		m := Restore(Thresholds{MaxConsecutiveErrors: 2, MaxTotalErrors: 3}, State{Kind: Spawning}, 0, 0)
		mustHandle(t, m, EvSessionExited(errExit), t0) // cons 1, total 1
		for i := uint32(2); i <= 3; i++ {
			toSpawning(t, m)
			mustHandle(t, m, EvSessionStarted(i), t0)
			eff := mustHandle(t, m, EvSessionExited(timeoutExit), t0)
			if i == 2 && m.State().Kind != CoolingDown {
				t.Fatalf("total 2: state %v, want CoolingDown", m.State())
			}
			if i == 3 {
				if want := "3 total errors (max 3), last: Timeout"; eff.Kind != LogFatal || eff.Msg != want || m.State().Kind != Stopped {
					t.Errorf("got %v / %v, want Stopped / LogFatal(%s)", m.State(), eff, want)
				}
			}
		}
	})
	t.Run("both at once", func(t *testing.T) {
		m := Restore(Thresholds{MaxConsecutiveErrors: 1, MaxTotalErrors: 1}, State{Kind: Running, SessionSeq: 1}, 0, 0)
		eff := mustHandle(t, m, EvSessionExited(timeoutExit), t0)
		if want := "1 consecutive errors (max 1) and 1 total errors (max 1), last: Timeout"; eff.Msg != want {
			t.Errorf("msg = %q, want %q", eff.Msg, want)
		}
	})
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		n    uint32
		want time.Duration
	}{
		{0, 0},
		{1, 2 * time.Second},
		{2, 4 * time.Second},
		{3, 8 * time.Second},
		{4, 16 * time.Second},
		{5, 32 * time.Second},
		{6, 60 * time.Second},
		{7, 60 * time.Second},
		{33, 60 * time.Second},
		{64, 60 * time.Second},
		{math.MaxUint32, 60 * time.Second},
	}
	for _, tt := range tests {
		if got := Backoff(tt.n); got != tt.want {
			t.Errorf("Backoff(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

// TestCoolingDownUntil checks Until = now + Backoff(consecutive) for n = 1..7
// through the machine, with thresholds high enough not to stop.
func TestCoolingDownUntil(t *testing.T) {
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 60 * time.Second, 60 * time.Second}
	m := Restore(Thresholds{MaxConsecutiveErrors: 100, MaxTotalErrors: 100}, State{Kind: BuildingPrompt}, 0, 0)
	now := t0
	for i, d := range want {
		now = now.Add(time.Duration(i) * time.Minute) // a different now each time
		toSpawning(t, m)
		mustHandle(t, m, EvSessionExited(timeoutExit), now)
		if got := m.State(); got.Kind != CoolingDown || !got.Until.Equal(now.Add(d)) {
			t.Errorf("n=%d: state %v, want CoolingDown until now+%v", i+1, got, d)
		}
	}
	// BackoffElapsed is accepted even "early": the runner owns the timer.
	mustHandle(t, m, EvBackoffElapsed(), now)
	if m.State().Kind != BuildingPrompt {
		t.Errorf("BackoffElapsed before Until: state %v, want BuildingPrompt", m.State())
	}
}

// TestInterruptNoCounterChange: one below both limits, an interrupted session
// that exits with an error must neither count nor stop.
func TestInterruptNoCounterChange(t *testing.T) {
	for _, o := range []ExitOutcome{okExit, errExit, timeoutExit} {
		m := Restore(Thresholds{}, State{Kind: Running, SessionSeq: 5}, 4, 19)
		if eff := mustHandle(t, m, EvUrgentMessage(), t0); eff.Kind != CancelSession {
			t.Fatalf("UrgentMessage effect %v, want CancelSession", eff)
		}
		if got := m.State(); got.Kind != Interrupting || got.SessionSeq != 5 {
			t.Fatalf("after UrgentMessage: %v, want Interrupting{session_seq: 5}", got)
		}
		eff := mustHandle(t, m, EvSessionExited(o), t0)
		if eff != (SideEffect{}) || m.State().Kind != BuildingPrompt || m.ConsecutiveErrors() != 4 || m.TotalErrors() != 19 {
			t.Errorf("Interrupting + SessionExited(%v): %v / %v cons %d total %d, want BuildingPrompt / None cons 4 total 19",
				o, m.State(), eff, m.ConsecutiveErrors(), m.TotalErrors())
		}
	}
	// The late exit after GraceExceeded is rejected, still without counting.
	m := Restore(Thresholds{}, State{Kind: Interrupting, SessionSeq: 5}, 4, 19)
	if eff := mustHandle(t, m, EvGraceExceeded(), t0); eff.Kind != ForceStopSession {
		t.Fatalf("GraceExceeded effect %v, want ForceStopSession", eff)
	}
	if _, err := m.Handle(EvSessionExited(errExit), t0); !errors.Is(err, ErrInvalidTransition) {
		t.Errorf("late SessionExited: err %v, want ErrInvalidTransition", err)
	}
	if m.ConsecutiveErrors() != 4 || m.TotalErrors() != 19 {
		t.Errorf("late exit counted: cons %d total %d", m.ConsecutiveErrors(), m.TotalErrors())
	}
}

func TestRestore(t *testing.T) {
	s := State{Kind: Running, SessionSeq: 11}
	m := Restore(Thresholds{MaxConsecutiveErrors: 3}, s, 1, 6)
	if !sameState(m.State(), s) || m.ConsecutiveErrors() != 1 || m.TotalErrors() != 6 || m.Thresholds() != (Thresholds{3, 20}) {
		t.Fatalf("Restore = %v cons %d total %d th %+v", m.State(), m.ConsecutiveErrors(), m.TotalErrors(), m.Thresholds())
	}
	n := New(Thresholds{})
	if n.State() != (State{Kind: Initializing}) || n.ConsecutiveErrors() != 0 || n.TotalErrors() != 0 {
		t.Fatalf("New = %v cons %d total %d", n.State(), n.ConsecutiveErrors(), n.TotalErrors())
	}
	// Counters restored beyond a limit make the next counted error fatal,
	// and saturate instead of wrapping to 0.
	m = Restore(Thresholds{MaxConsecutiveErrors: math.MaxUint32, MaxTotalErrors: math.MaxUint32},
		State{Kind: Spawning}, math.MaxUint32, math.MaxUint32)
	eff := mustHandle(t, m, EvSessionExited(errExit), t0)
	if eff.Kind != LogFatal || m.State().Kind != Stopped || m.TotalErrors() != math.MaxUint32 {
		t.Errorf("saturated: %v / %v total %d", m.State(), eff, m.TotalErrors())
	}
}

// TestHandleAllocs pins the "0 allocations per transition" contract for the
// normal cycle and for a non-fatal error with its backoff.
func TestHandleAllocs(t *testing.T) {
	// Each cycle counts one error; lift the total limit so 100 runs fit.
	m := Restore(Thresholds{MaxTotalErrors: math.MaxUint32}, State{Kind: BuildingPrompt}, 0, 0)
	cycle := []Event{
		EvPromptReady("prompt"), EvSessionStarted(1), EvUrgentMessage(), EvSessionExited(errExit), // interrupted
		EvPromptReady("prompt"), EvSessionExited(timeoutExit), EvBackoffElapsed(), // spawn failure, cons 1
		EvPromptReady("prompt"), EvSessionStarted(2), EvSessionExited(okExit), EvWorktreeReady(), // success
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, ev := range cycle {
			if _, err := m.Handle(ev, t0); err != nil {
				panic(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("Handle allocated %.1f times per cycle, want 0", allocs)
	}
	if m.TotalErrors() < 100 || m.State().Kind != BuildingPrompt {
		t.Fatalf("cycle did not run as intended: %v total %d", m.State(), m.TotalErrors())
	}
}
