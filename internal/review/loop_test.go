package review

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

type event struct {
	name  string
	apply func(*Loop) error
}

var events = []event{
	{"Start", (*Loop).Start},
	{"WorkerResult(none)", func(l *Loop) error { return l.WorkerResult(NoSignal) }},
	{"WorkerResult(done)", func(l *Loop) error { return l.WorkerResult(Done) }},
	{"WorkerResult(pass)", func(l *Loop) error { return l.WorkerResult(Pass) }},
	{"WorkerResult(fail)", func(l *Loop) error { return l.WorkerResult(Fail) }},
	{"CompleteWithoutReview", (*Loop).CompleteWithoutReview},
	{"ReviewResult(none)", func(l *Loop) error { return l.ReviewResult(NoSignal, "hmm", t0) }},
	{"ReviewResult(done)", func(l *Loop) error { return l.ReviewResult(Done, "DONE", t0) }},
	{"ReviewResult(pass)", func(l *Loop) error { return l.ReviewResult(Pass, "PASS: ok", t0) }},
	{"ReviewResult(fail)", func(l *Loop) error { return l.ReviewResult(Fail, "FAIL: no tests", t0) }},
	{"Fail(agent_error)", func(l *Loop) error { return l.Fail(ReasonAgentError) }},
	{"Fail(cancelled)", func(l *Loop) error { return l.Fail(ReasonCancelled) }},
	{"Fail(bogus)", func(l *Loop) error { return l.Fail("bogus") }},
}

// start returns the snapshot each state is tested from: iteration 2 of 3
// after one FAIL round, except init.
func start(s State) Snapshot {
	fail1 := []Round{{Iteration: 1, Verdict: Fail, Feedback: "redo", At: t0}}
	switch s {
	case Init:
		return Snapshot{State: Init}
	case Complete:
		return Snapshot{State: s, Iteration: 2, History: append(fail1, Round{Iteration: 2, Verdict: Pass, At: t0})}
	case Failed:
		return Snapshot{State: s, Iteration: 2, History: fail1, Failure: ReasonAgentError}
	}
	return Snapshot{State: s, Iteration: 2, History: fail1}
}

// TestEvents applies every event in every state. Accepted events must give
// the listed state, iteration, round count and failure; every other
// (state, event) pair must be refused with the listed error and leave the
// loop unchanged. Every state change must be a row of the seed table.
func TestEvents(t *testing.T) {
	type want struct {
		state   State
		iter    uint32
		rounds  int
		failure FailureReason
	}
	allowed := map[[2]string]want{
		{"init", "Start"}:                    {Working, 1, 0, ""},
		{"init", "Fail(agent_error)"}:        {Failed, 0, 0, ReasonAgentError},
		{"init", "Fail(cancelled)"}:          {Failed, 0, 0, ReasonCancelled},
		{"working", "WorkerResult(none)"}:    {Working, 2, 1, ""},
		{"working", "WorkerResult(done)"}:    {Reviewing, 2, 1, ""},
		{"working", "WorkerResult(pass)"}:    {Working, 2, 1, ""},
		{"working", "WorkerResult(fail)"}:    {Failed, 2, 1, ReasonFailSignal},
		{"working", "CompleteWithoutReview"}: {Complete, 2, 1, ""},
		{"working", "Fail(agent_error)"}:     {Failed, 2, 1, ReasonAgentError},
		{"working", "Fail(cancelled)"}:       {Failed, 2, 1, ReasonCancelled},
		{"reviewing", "ReviewResult(none)"}:  {Reviewing, 2, 1, ""},
		{"reviewing", "ReviewResult(done)"}:  {Reviewing, 2, 1, ""},
		{"reviewing", "ReviewResult(pass)"}:  {Complete, 2, 2, ""},
		{"reviewing", "ReviewResult(fail)"}:  {Working, 3, 2, ""},
		{"reviewing", "Fail(agent_error)"}:   {Failed, 2, 1, ReasonAgentError},
		{"reviewing", "Fail(cancelled)"}:     {Failed, 2, 1, ReasonCancelled},
	}
	wrongState := map[string]State{
		"Start": Init, "WorkerResult(none)": Working, "WorkerResult(done)": Working, "WorkerResult(pass)": Working,
		"WorkerResult(fail)": Working, "CompleteWithoutReview": Working, "ReviewResult(none)": Reviewing,
		"ReviewResult(done)": Reviewing, "ReviewResult(pass)": Reviewing, "ReviewResult(fail)": Reviewing,
	}
	for _, s := range AllStates {
		for _, ev := range events {
			l, err := Resume(start(s))
			if err != nil {
				t.Fatal(err)
			}
			before := l.Snapshot()
			err = ev.apply(l)
			after := l.Snapshot()
			if w, ok := allowed[[2]string{s.String(), ev.name}]; ok {
				if err != nil || after.State != w.state || after.Iteration != w.iter || len(after.History) != w.rounds || after.Failure != w.failure {
					t.Errorf("%v + %s: %v, %+v; want %+v", s, ev.name, err, after, w)
				}
				if after.State != s && !CanTransition(s, after.State) {
					t.Errorf("%v + %s took %v → %v, not in the seed table", s, ev.name, s, after.State)
				}
				continue
			}
			switch want, wrong := wrongState[ev.name]; {
			case ev.name == "Fail(bogus)":
				if !errors.Is(err, ErrInvalidReason) {
					t.Errorf("%v + %s: %v, want ErrInvalidReason", s, ev.name, err)
				}
			case wrong:
				var we *WrongStateError
				if !errors.As(err, &we) || !errors.Is(err, ErrWrongState) || we.State != s || we.Want != want {
					t.Errorf("%v + %s: %v, want *WrongStateError{State: %v, Want: %v}", s, ev.name, err, s, want)
				}
			default: // Fail from a terminal state
				var ie *InvalidTransitionError
				if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidTransition) || ie.From != s || ie.To != Failed {
					t.Errorf("%v + %s: %v, want *InvalidTransitionError{%v, failed}", s, ev.name, err, s)
				}
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("%v + %s: multi-line error %q", s, ev.name, err)
			}
			if !sameSnapshot(before, after) {
				t.Errorf("%v + %s refused but changed %+v to %+v", s, ev.name, before, after)
			}
		}
	}
}

func sameSnapshot(a, b Snapshot) bool {
	if a.State != b.State || a.Iteration != b.Iteration || a.MaxIterations != b.MaxIterations ||
		a.Failure != b.Failure || len(a.History) != len(b.History) {
		return false
	}
	for i := range a.History {
		if a.History[i].Iteration != b.History[i].Iteration || a.History[i].Verdict != b.History[i].Verdict ||
			a.History[i].Feedback != b.History[i].Feedback || !a.History[i].At.Equal(b.History[i].At) {
			return false
		}
	}
	return true
}

// TestLoopScenarios runs whole loops through the public events.
func TestLoopScenarios(t *testing.T) {
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	fb := func(i int) string { return "feedback " + strconv.Itoa(i) }
	tests := []struct {
		name    string
		max     uint32
		reviews []Signal // reviewer verdicts, one per iteration
		state   State
		iter    uint32
		failure FailureReason
	}{
		{"pass first time", 0, []Signal{Pass}, Complete, 1, ""},
		{"fail then pass", 0, []Signal{Fail, Pass}, Complete, 2, ""},
		{"pass on the last allowed iteration", 3, []Signal{Fail, Fail, Pass}, Complete, 3, ""},
		{"three fails with the default max", 0, []Signal{Fail, Fail, Fail}, Failed, 3, ReasonMaxIterations},
		{"max 1: one fail is too many", 1, []Signal{Fail}, Failed, 1, ReasonMaxIterations},
		{"max 5", 5, []Signal{Fail, Fail, Fail, Fail, Pass}, Complete, 5, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(tt.max)
			if l.State() != Init || l.Iteration() != 0 || l.Next() != NextStart {
				t.Fatalf("new loop: %v iteration %d next %v", l.State(), l.Iteration(), l.Next())
			}
			must(t, l.Start())
			for i, v := range tt.reviews {
				if l.State() != Working || l.Next() != NextWork || l.Iteration() != uint32(i+1) {
					t.Fatalf("round %d: %v iteration %d next %v", i, l.State(), l.Iteration(), l.Next())
				}
				if i > 0 {
					if r, ok := l.LastRound(); !ok || r.Verdict != Fail || r.Feedback != fb(i-1) {
						t.Fatalf("round %d: last round %+v, %v", i, r, ok)
					}
				}
				must(t, l.WorkerResult(NoSignal)) // a session that ended without reporting
				must(t, l.WorkerResult(Done))
				if l.Next() != NextReview {
					t.Fatalf("round %d: next %v after DONE", i, l.Next())
				}
				must(t, l.ReviewResult(NoSignal, "still looking", at(i)))
				must(t, l.ReviewResult(v, fb(i), at(i)))
			}
			if l.State() != tt.state || l.Iteration() != tt.iter || l.Failure() != tt.failure {
				t.Fatalf("end: %v iteration %d failure %q; want %v %d %q", l.State(), l.Iteration(), l.Failure(), tt.state, tt.iter, tt.failure)
			}
			if want := map[State]Next{Complete: NextMerge, Failed: NextNone}[tt.state]; l.Next() != want {
				t.Fatalf("end: next %v, want %v", l.Next(), want)
			}
			h := l.History()
			if len(h) != len(tt.reviews) {
				t.Fatalf("history has %d rounds, want %d", len(h), len(tt.reviews))
			}
			for i, r := range h {
				want := Round{Iteration: uint32(i + 1), Verdict: tt.reviews[i], Feedback: fb(i), At: at(i)}
				if r != want {
					t.Errorf("round %d = %+v, want %+v", i, r, want)
				}
			}
			if l.Iteration() > l.MaxIterations() {
				t.Errorf("iteration %d past max %d", l.Iteration(), l.MaxIterations())
			}
			h[0].Feedback = "mutated"
			if l.History()[0].Feedback == "mutated" {
				t.Error("History() aliases the loop's rounds")
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestErrorMessages(t *testing.T) {
	l := New(0)
	tests := []struct {
		err  error
		want string
	}{
		{l.ReviewResult(Pass, "", t0), "review: review result in state init: wrong state (want reviewing)"},
		{l.Fail("oops"), `review: fail with reason "oops": unknown failure reason`},
		{func() error { must(t, l.Fail(ReasonCancelled)); return l.Fail(ReasonCancelled) }(), "review: invalid transition from failed to failed"},
	}
	for _, tt := range tests {
		if tt.err == nil || tt.err.Error() != tt.want {
			t.Errorf("error %v, want %q", tt.err, tt.want)
		}
	}
	if l.Failure() != ReasonCancelled {
		t.Errorf("failure %q after a refused second Fail", l.Failure())
	}
}

func TestNames(t *testing.T) {
	for n, want := range map[Next]string{NextNone: "none", NextStart: "start", NextWork: "work", NextReview: "review", NextMerge: "merge", 9: "Next(9)"} {
		if n.String() != want {
			t.Errorf("Next(%d) = %q, want %q", n, n, want)
		}
	}
	for s, want := range map[Signal]string{NoSignal: "none", Done: "done", Pass: "pass", Fail: "fail", 4: "Signal(4)"} {
		if s.String() != want {
			t.Errorf("Signal(%d) = %q, want %q", s, s, want)
		}
		got, err := ParseSignal(want)
		if s <= Fail && (err != nil || got != s) || s > Fail && !errors.Is(err, ErrUnknownSignal) {
			t.Errorf("ParseSignal(%q) = %v, %v", want, got, err)
		}
	}
	for _, r := range []FailureReason{ReasonMaxIterations, ReasonAgentError, ReasonFailSignal, ReasonCancelled} {
		if !r.Valid() {
			t.Errorf("%q not valid", r)
		}
	}
	if FailureReason("").Valid() || FailureReason("MAX_ITERATIONS").Valid() {
		t.Error("invalid failure reasons accepted")
	}
}

// Reopen sends passed work back to its worker at the next iteration, its
// rounds kept, and the rework is reviewed again; only a complete loop is
// reopened, and a reopened loop's record resumes as it was.
func TestReopenReviewsTheReworkAgain(t *testing.T) {
	l := New(3)
	now := time.Unix(1700000000, 0)
	for _, step := range []func() error{l.Start, func() error { return l.WorkerResult(Done) },
		func() error { return l.ReviewResult(Pass, "fine", now) }} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	if l.State() != Working || l.Iteration() != 2 || len(l.History()) != 1 {
		t.Fatalf("reopened: %v at %d with %d rounds, want working at 2 with 1", l.State(), l.Iteration(), len(l.History()))
	}
	r, err := Resume(l.Snapshot())
	if err != nil {
		t.Fatalf("resume a reopened loop: %v", err)
	}
	if err := r.WorkerResult(Done); err != nil || r.State() != Reviewing {
		t.Fatalf("the rework's DONE: %v, %v; want reviewing", r.State(), err)
	}
	if err := r.Reopen(); err == nil {
		t.Error("a loop under review was reopened")
	}
	if err := r.ReviewResult(Pass, "still fine", now); err != nil || r.State() != Complete || len(r.History()) != 2 {
		t.Fatalf("the rework's PASS: %v with %d rounds, %v", r.State(), len(r.History()), err)
	}
	if _, err := Resume(r.Snapshot()); err != nil {
		t.Fatalf("resume the rework's completed loop: %v", err)
	}
}

// Retry restarts a failed loop at the next iteration with as many more
// rounds as it had, its rounds kept; only a failed loop is retried, and
// a retried loop's record resumes as it is.
func TestRetryReviewsAgainWithMoreRounds(t *testing.T) {
	l := New(2)
	now := time.Unix(1700000000, 0)
	for _, step := range []func() error{l.Start, func() error { return l.WorkerResult(Done) },
		func() error { return l.ReviewResult(Fail, "no", now) }, func() error { return l.WorkerResult(Done) },
		func() error { return l.ReviewResult(Fail, "still no", now) }} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if l.State() != Failed || l.Failure() != ReasonMaxIterations {
		t.Fatalf("after two FAILs of two: %v (%s)", l.State(), l.Failure())
	}
	if err := l.Retry(); err != nil {
		t.Fatal(err)
	}
	if l.State() != Working || l.Iteration() != 3 || l.MaxIterations() != 4 || l.Failure() != "" || len(l.History()) != 2 {
		t.Fatalf("retried: %v at %d of %d (%q) with %d rounds, want working at 3 of 4 with 2",
			l.State(), l.Iteration(), l.MaxIterations(), l.Failure(), len(l.History()))
	}
	r, err := Resume(l.Snapshot())
	if err != nil {
		t.Fatalf("resume a retried loop: %v", err)
	}
	if err := r.Retry(); err == nil {
		t.Error("a working loop was retried")
	}
	if err := r.WorkerResult(Done); err != nil {
		t.Fatal(err)
	}
	if err := r.ReviewResult(Fail, "no again", now); err != nil || r.State() != Working || r.Iteration() != 4 {
		t.Fatalf("a FAIL with a round left: %v at %d, %v; want working at 4", r.State(), r.Iteration(), err)
	}
	if err := r.WorkerResult(Done); err != nil {
		t.Fatal(err)
	}
	if err := r.ReviewResult(Fail, "no, last", now); err != nil || r.State() != Failed || r.Failure() != ReasonMaxIterations {
		t.Fatalf("the last FAIL: %v (%s), %v; want failed, max_iterations", r.State(), r.Failure(), err)
	}
}
