package review

import (
	"errors"
	"strings"
	"testing"
)

// TestResumeEveryStep snapshots a loop after every step of a full run
// (through its stored form, the state's name, as the board keeps it) and checks that
// the resumed loop equals the live one, gives the same next action, and
// behaves the same on the following steps.
func TestResumeEveryStep(t *testing.T) {
	steps := []func(*Loop) error{
		(*Loop).Start,
		func(l *Loop) error { return l.WorkerResult(Done) },
		func(l *Loop) error { return l.ReviewResult(Fail, "add tests", t0) },
		func(l *Loop) error { return l.WorkerResult(Done) },
		func(l *Loop) error { return l.ReviewResult(Fail, "still no tests", t0) },
		func(l *Loop) error { return l.WorkerResult(Done) },
		func(l *Loop) error { return l.ReviewResult(Pass, "LGTM", t0) },
	}
	wantNext := []Next{NextStart, NextWork, NextReview, NextWork, NextReview, NextWork, NextReview, NextMerge}
	for cut := 0; cut <= len(steps); cut++ {
		live := New(0)
		for _, s := range steps[:cut] {
			must(t, s(live))
		}
		snap := live.Snapshot()
		resumed, err := Restore(snap.State.String(), snap)
		if err != nil {
			t.Fatalf("after %d steps: %v", cut, err)
		}
		if !sameSnapshot(resumed.Snapshot(), live.Snapshot()) || resumed.Next() != live.Next() || resumed.Next() != wantNext[cut] {
			t.Fatalf("after %d steps: resumed %+v next %v, live %+v next %v, want next %v",
				cut, resumed.Snapshot(), resumed.Next(), live.Snapshot(), live.Next(), wantNext[cut])
		}
		for i, s := range steps[cut:] {
			errL, errR := s(live), s(resumed)
			if (errL == nil) != (errR == nil) || !sameSnapshot(resumed.Snapshot(), live.Snapshot()) {
				t.Fatalf("after %d+%d steps: live %v %+v, resumed %v %+v", cut, i, errL, live.Snapshot(), errR, resumed.Snapshot())
			}
		}
	}
}

func TestResumeNextPerState(t *testing.T) {
	want := map[State]Next{Init: NextStart, Working: NextWork, Reviewing: NextReview, Complete: NextMerge, Failed: NextNone}
	for _, s := range AllStates {
		l, err := Resume(start(s))
		if err != nil || l.Next() != want[s] || l.MaxIterations() != DefaultMaxIterations {
			t.Errorf("Resume(%v): next %v, max %d, %v; want %v", s, l.Next(), l.MaxIterations(), err, want[s])
		}
	}
}

// TestRestoreUnreadableResumesAsFailed: a stored record that cannot be
// read, by its state's name or by what Resume refuses, gives a failed loop,
// which does nothing more, and says why.
func TestRestoreUnreadableResumesAsFailed(t *testing.T) {
	for _, tc := range []struct {
		state string
		snap  Snapshot
		want  error
	}{
		{"exploded", Snapshot{Iteration: 2}, ErrUnknownState},
		{"", Snapshot{}, ErrUnknownState},
		{"completed", Snapshot{Iteration: 1}, ErrUnknownState}, // not a name the board writes
		{"reviewing", Snapshot{Iteration: 0}, ErrInvalidSnapshot},
		{"working", Snapshot{Iteration: 2, History: []Round{{Iteration: 2, Verdict: Fail}}}, ErrInvalidSnapshot},
	} {
		l, err := Restore(tc.state, tc.snap)
		if !errors.Is(err, tc.want) || l == nil || l.State() != Failed || l.Next() != NextNone || l.Iteration() != tc.snap.Iteration || len(l.History()) != 0 {
			t.Errorf("Restore(%q, %+v) = %+v, %v; want a failed loop and %v", tc.state, tc.snap, l, err, tc.want)
		}
	}
	// A readable record is Resume's loop.
	if l, err := Restore("reviewing", Snapshot{State: Failed, Iteration: 1}); err != nil || l.State() != Reviewing {
		t.Errorf("Restore(reviewing) = %v, %v", l, err)
	}
}

func TestResumeAliasing(t *testing.T) {
	snap := start(Working)
	l, err := Resume(snap)
	must(t, err)
	snap.History[0].Feedback = "changed"
	if r, _ := l.LastRound(); r.Feedback != "redo" {
		t.Error("Resume keeps the caller's History slice")
	}
	// A lowered max_iterations: iteration 4 of 3 resumes, the next FAIL ends it.
	s := Snapshot{State: Reviewing, Iteration: 4, MaxIterations: 3}
	l, err = Resume(s)
	must(t, err)
	must(t, l.ReviewResult(Fail, "no", t0))
	if l.State() != Failed || l.Failure() != ReasonMaxIterations {
		t.Errorf("FAIL past a lowered max: %v %q", l.State(), l.Failure())
	}
}

func TestResumeRejects(t *testing.T) {
	fail := func(i uint32) Round { return Round{Iteration: i, Verdict: Fail} }
	pass := func(i uint32) Round { return Round{Iteration: i, Verdict: Pass} }
	tests := []struct {
		snap Snapshot
		want string
	}{
		{Snapshot{State: 7}, "state State(7) unknown"},
		{Snapshot{State: Working, Iteration: 1, Failure: ReasonAgentError}, `failure "agent_error" in state working`},
		{Snapshot{State: Failed, Failure: "exploded"}, `failure "exploded" unknown`},
		{Snapshot{State: Init, Iteration: 1}, "state init with iteration 1 and 0 rounds, want none"},
		{Snapshot{State: Reviewing}, "state reviewing at iteration 0"},
		{Snapshot{State: Working, Iteration: 3, History: []Round{fail(2), fail(1)}}, "history[1]: iteration 1 after 2, want increasing from 1"},
		{Snapshot{State: Working, Iteration: 3, History: []Round{fail(0)}}, "history[0]: iteration 0 after 0, want increasing from 1"},
		{Snapshot{State: Working, Iteration: 2, History: []Round{fail(1), fail(2)}}, "history[1]: iteration 2 in state working at iteration 2"},
		{Snapshot{State: Failed, Iteration: 2, History: []Round{fail(3)}}, "history[0]: iteration 3 in state failed at iteration 2"},
		{Snapshot{State: Complete, Iteration: 2, History: []Round{{Iteration: 1, Verdict: Done}}}, "history[0]: verdict done, want pass or fail"},
		{Snapshot{State: Failed, Iteration: 2, History: []Round{pass(1), pass(2)}}, "history[1]: pass verdict in state failed at its own iteration"},
		{Snapshot{State: Reviewing, Iteration: 1, History: []Round{pass(1)}}, "history[0]: iteration 1 in state reviewing at iteration 1"},
	}
	for _, tt := range tests {
		l, err := Resume(tt.snap)
		if l != nil || !errors.Is(err, ErrInvalidSnapshot) || !strings.HasPrefix(err.Error(), "review: resume: invalid snapshot: "+tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Resume(%+v) = %v; want error starting %q", tt.snap, err, tt.want)
		}
	}
}
