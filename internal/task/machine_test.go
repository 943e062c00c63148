package task

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// seedTable is seed 004's "Task Transition Table (exhaustive)" copied by
// hand as From/To names, independently of rows, as the oracle.
const seedTable = `
PLANNED OPEN
PLANNED CANCELLED
OPEN CLAIMED
OPEN WAITING_FOR_SUBTASKS
OPEN CANCELLED
CLAIMED IN_PROGRESS
CLAIMED OPEN
CLAIMED DONE
CLAIMED FAILED
CLAIMED CANCELLED
CLAIMED WAITING_FOR_SUBTASKS
CLAIMED BLOCKED
IN_PROGRESS DONE
IN_PROGRESS FAILED
IN_PROGRESS BLOCKED
IN_PROGRESS WAITING_FOR_SUBTASKS
IN_PROGRESS OPEN
IN_PROGRESS CANCELLED
IN_PROGRESS ORPHANED
ORPHANED DONE
ORPHANED FAILED
ORPHANED OPEN
BLOCKED OPEN
BLOCKED CANCELLED
WAITING_FOR_SUBTASKS DONE
WAITING_FOR_SUBTASKS BLOCKED
WAITING_FOR_SUBTASKS CANCELLED
FAILED OPEN
DONE CLOSED
DONE FAILED
`

func seedPairs(t testing.TB) map[[2]string]bool {
	t.Helper()
	pairs := map[[2]string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(seedTable), "\n") {
		f := strings.Fields(l)
		pairs[[2]string{f[0], f[1]}] = true
	}
	if len(pairs) != 30 {
		t.Fatalf("seed table has %d distinct rows, want 30", len(pairs))
	}
	return pairs
}

func TestTableMatchesSeed(t *testing.T) {
	pairs := seedPairs(t)
	got := Transitions()
	if len(got) != NumTransitions || NumTransitions != len(pairs) {
		t.Fatalf("Transitions() has %d rows, NumTransitions %d, seed %d", len(got), NumTransitions, len(pairs))
	}
	seen := map[[2]string]bool{}
	for _, r := range got {
		k := [2]string{r.From.String(), r.To.String()}
		if !pairs[k] || seen[k] || r.Trigger == "" {
			t.Errorf("row %v → %v (%q): in seed %v, duplicate %v", r.From, r.To, r.Trigger, pairs[k], seen[k])
		}
		seen[k] = true
	}
}

// TestTransitionEveryPair tries all 12 × 12 (state, target) pairs (plus an
// out-of-range target) on a task with retries left: exactly the seed's 30
// rows succeed, with the right event; every other pair is refused with an
// *IllegalTransitionError and the task is unchanged.
func TestTransitionEveryPair(t *testing.T) {
	pairs := seedPairs(t)
	targets := append(AllStates[:], State(12), State(255))
	used := 0
	for _, from := range AllStates {
		for _, to := range targets {
			tk, err := Restore("t-1", from, 1, 3)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := tk.Transition(to, "", "runner", "because", t0)
			if pairs[[2]string{from.String(), to.String()}] {
				used++
				want := LifecycleEvent{Timestamp: t0, EntityType: "task", EntityID: "t-1", From: from, To: to, Actor: "runner", Reason: "because"}
				if err != nil || ev != want || tk.State() != to || tk.Retries() != 1 {
					t.Errorf("%v → %v: %+v, %v, state %v retries %d; want %+v", from, to, ev, err, tk.State(), tk.Retries(), want)
				}
				if !CanTransition(from, to) {
					t.Errorf("CanTransition(%v, %v) = false", from, to)
				}
				continue
			}
			var ite *IllegalTransitionError
			if !errors.As(err, &ite) || !errors.Is(err, ErrIllegalTransition) {
				t.Errorf("%v → %v: error %v, want *IllegalTransitionError", from, to, err)
				continue
			}
			if ite.From != from || ite.To != to || ite.TaskID != "t-1" {
				t.Errorf("%v → %v: error fields %+v", from, to, ite)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || !strings.Contains(msg, from.String()) || !strings.Contains(msg, to.String()) || !strings.Contains(msg, "t-1") {
				t.Errorf("%v → %v: error %q: want one line naming the task and both states", from, to, msg)
			}
			if ev != (LifecycleEvent{}) || tk.State() != from || tk.Retries() != 1 || CanTransition(from, to) {
				t.Errorf("%v → %v refused but event %+v, state %v, retries %d", from, to, ev, tk.State(), tk.Retries())
			}
		}
	}
	if used != 30 {
		t.Errorf("%d pairs allowed, want 30", used)
	}
}

func TestErrorMessages(t *testing.T) {
	tk, _ := Restore("t-7", Done, 3, 3)
	_, err := tk.Transition(Open, ReasonRetry, "op", "", t0)
	if got, want := err.Error(), "task t-7: illegal transition from DONE to OPEN"; got != want {
		t.Errorf("illegal: %q, want %q", got, want)
	}
	tk, _ = Restore("t-7", Failed, 3, 3)
	_, err = tk.Transition(Open, ReasonRetry, "op", "", t0)
	if got, want := err.Error(), "task t-7: retry from FAILED to OPEN: retries exhausted (3 of max_retries 3)"; got != want {
		t.Errorf("exhausted: %q, want %q", got, want)
	}
	_, err = tk.Transition(Closed, "bogus", "op", "", t0) // the table is checked first
	if !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("illegal row with bad reason: %v", err)
	}
	_, err = tk.Transition(Open, "Retry", "op", "", t0) // Transition wants the canonical value
	if got, want := err.Error(), `task t-7: FAILED to OPEN: transition reason "Retry": unknown transition reason`; got != want || !errors.Is(err, ErrUnknownReason) {
		t.Errorf("bad reason: %q, want %q", got, want)
	}
	if tk.State() != Failed || tk.Retries() != 3 {
		t.Errorf("refusals changed the task: %v, %d", tk.State(), tk.Retries())
	}
}

func TestRetries(t *testing.T) {
	type step struct {
		to      State
		tr      TransitionReason
		retries uint32 // after the step
		err     error  // nil, ErrRetriesExhausted, ErrIllegalTransition
	}
	tests := []struct {
		name  string
		start State
		max   uint32
		steps []step
	}{
		{"fail and retry up to max_retries 3", InProgress, 3, []step{
			{Failed, "", 0, nil}, {Open, ReasonRetry, 1, nil}, {Claimed, "", 1, nil}, {InProgress, "", 1, nil},
			{Failed, "", 1, nil}, {Open, ReasonRetry, 2, nil}, {Claimed, "", 2, nil}, {Failed, "", 2, nil},
			{Open, ReasonRetry, 3, nil}, {Claimed, "", 3, nil}, {InProgress, "", 3, nil}, {Failed, "", 3, nil},
			{Open, ReasonRetry, 3, ErrRetriesExhausted},
			{Open, ReasonOrphanRecovered, 3, ErrRetriesExhausted},
			{Closed, "", 3, ErrIllegalTransition},
		}},
		{"orphan recovery counts, then FAILED past max", InProgress, 1, []step{
			{Orphaned, "", 0, nil}, {Open, ReasonOrphanRecovered, 1, nil}, {Claimed, "", 1, nil},
			{InProgress, "", 1, nil}, {Orphaned, "", 1, nil},
			{Open, ReasonOrphanRecovered, 1, ErrRetriesExhausted}, {Failed, ReasonAborted, 1, nil},
		}},
		{"max_retries 0 never retries", Failed, 0, []step{
			{Open, ReasonRetry, 0, ErrRetriesExhausted}, {Open, "", 0, nil},
		}},
		{"other ways into OPEN are not counted", Planned, 1, []step{
			{Open, "", 0, nil}, {Claimed, "", 0, nil}, {Open, "", 0, nil}, {Claimed, "", 0, nil},
			{InProgress, "", 0, nil}, {Open, ReasonAborted, 0, nil}, {Claimed, "", 0, nil},
			{Blocked, "", 0, nil}, {Open, ReasonCompleted, 0, nil}, {Claimed, "", 0, nil},
			{InProgress, "", 0, nil}, {Done, ReasonCompleted, 0, nil}, {Failed, "", 0, nil},
			{Open, "", 0, nil}, // the review loop's rework
		}},
		{"retry reason counts only into OPEN", Claimed, 1, []step{
			{InProgress, ReasonRetry, 0, nil}, {Failed, ReasonRetry, 0, nil}, {Open, ReasonRetry, 1, nil},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk, err := Restore("t-2", tt.start, 0, tt.max)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				before := tk
				ev, err := tk.Transition(s.to, s.tr, "a", "r", t0)
				if s.err == nil && err != nil || s.err != nil && !errors.Is(err, s.err) {
					t.Fatalf("step %d %v → %v (%q): error %v, want %v", i, before.State(), s.to, s.tr, err, s.err)
				}
				if err != nil {
					if tk != before {
						t.Fatalf("step %d: refused transition changed %+v to %+v", i, before, tk)
					}
					var re *RetriesExhaustedError
					if errors.As(err, &re) && (re.Retries != before.Retries() || re.MaxRetries != tt.max || re.From != before.State() || re.Reason != s.tr) {
						t.Fatalf("step %d: %+v", i, re)
					}
					continue
				}
				if tk.State() != s.to || tk.Retries() != s.retries || ev.TransitionReason != s.tr {
					t.Fatalf("step %d: state %v retries %d event %+v; want %v, %d", i, tk.State(), tk.Retries(), ev, s.to, s.retries)
				}
				if tk.Retries() > tk.MaxRetries() {
					t.Fatalf("step %d: retries %d > max %d", i, tk.Retries(), tk.MaxRetries())
				}
			}
		})
	}
}

func TestRetryCounterSaturation(t *testing.T) {
	tk, _ := Restore("t-3", Failed, math.MaxUint32-1, math.MaxUint32)
	if !tk.CanRetry() {
		t.Fatal("CanRetry = false below max")
	}
	if _, err := tk.Transition(Open, ReasonRetry, "", "", t0); err != nil || tk.Retries() != math.MaxUint32 {
		t.Fatalf("last retry: %v, retries %d", err, tk.Retries())
	}
	tk, _ = Restore("t-3", Failed, math.MaxUint32, math.MaxUint32)
	if _, err := tk.Transition(Open, ReasonRetry, "", "", t0); !errors.Is(err, ErrRetriesExhausted) || tk.Retries() != math.MaxUint32 {
		t.Fatalf("retry at MaxUint32: %v, retries %d", err, tk.Retries())
	}
	// Restored above a lowered max_retries: accepted, and no retry is left.
	tk, err := Restore("t-3", Orphaned, 5, 2)
	if err != nil || tk.CanRetry() {
		t.Fatalf("Restore above max: %v, CanRetry %v", err, tk.CanRetry())
	}
	if _, err := tk.Transition(Open, ReasonOrphanRecovered, "", "", t0); !errors.Is(err, ErrRetriesExhausted) {
		t.Fatalf("retry above max: %v", err)
	}
}

func TestNewAndRestore(t *testing.T) {
	for _, s := range AllStates {
		tk, err := New("t-4", s, DefaultMaxRetries)
		if ok := s == Planned || s == Open; ok != (err == nil) {
			t.Errorf("New in %v: %v", s, err)
		} else if ok && (tk.State() != s || tk.Retries() != 0 || tk.MaxRetries() != 3 || tk.ID() != "t-4") {
			t.Errorf("New in %v = %+v", s, tk)
		} else if !ok && (!errors.Is(err, ErrInvalidTask) || !strings.Contains(err.Error(), s.String())) {
			t.Errorf("New in %v: error %v", s, err)
		}
		if tk, err := Restore("t-4", s, 2, 3); err != nil || tk.State() != s || tk.Retries() != 2 || tk.MaxRetries() != 3 {
			t.Errorf("Restore in %v = %+v, %v", s, tk, err)
		}
	}
	for _, err := range []error{
		func() error { _, err := New("", Open, 3); return err }(),
		func() error { _, err := Restore("", Open, 0, 3); return err }(),
		func() error { _, err := Restore("t-5", State(12), 0, 3); return err }(),
	} {
		if !errors.Is(err, ErrInvalidTask) || strings.Contains(err.Error(), "\n") {
			t.Errorf("error %v, want one-line ErrInvalidTask", err)
		}
	}
}

// TestEventCarriesEverything checks that Transition copies actor, reason and
// transition reason and the caller's time untouched.
func TestEventCarriesEverything(t *testing.T) {
	tk, _ := New("t-6", Open, DefaultMaxRetries)
	when := time.Date(2030, 5, 6, 7, 8, 9, 10, time.FixedZone("x", 3600))
	ev, err := tk.Transition(Claimed, ReasonRetry, "agent:alice", "claim_next", when)
	if err != nil {
		t.Fatal(err)
	}
	want := LifecycleEvent{Timestamp: when, EntityType: EntityTask, EntityID: "t-6", From: Open, To: Claimed,
		Actor: "agent:alice", Reason: "claim_next", TransitionReason: ReasonRetry}
	if ev != want || ev.Timestamp.Location() != when.Location() {
		t.Errorf("event %+v, want %+v", ev, want)
	}
}

// TestTransitionAllocs pins the "0 allocations per transition" contract,
// including a counted retry.
func TestTransitionAllocs(t *testing.T) {
	tk, _ := Restore("t-8", Open, 0, math.MaxUint32)
	type step struct {
		to State
		tr TransitionReason
	}
	cycle := []step{{Claimed, ""}, {InProgress, ""}, {Orphaned, ""}, {Open, ReasonOrphanRecovered},
		{Claimed, ""}, {Done, ReasonCompleted}, {Failed, ""}, {Open, ReasonRetry}}
	allocs := testing.AllocsPerRun(100, func() {
		for _, s := range cycle {
			if _, err := tk.Transition(s.to, s.tr, "runner", "r", t0); err != nil {
				panic(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("Transition allocated %.1f times per cycle, want 0", allocs)
	}
	if tk.Retries() < 200 || tk.State() != Open {
		t.Fatalf("cycle did not run as intended: %v retries %d", tk.State(), tk.Retries())
	}
}
