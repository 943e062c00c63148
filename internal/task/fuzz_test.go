package task

import (
	"errors"
	"testing"
	"time"
)

// refTask is a deliberately naive model of the machine, keyed by the seed's
// state names, used as the oracle for FuzzTaskMachine.
type refTask struct {
	state        string
	retries, max uint32
}

// step reports whether the reference accepts the transition and applies it.
func (r *refTask) step(pairs map[[2]string]bool, to string, tr TransitionReason) (ok, exhausted bool) {
	if !pairs[[2]string{r.state, to}] {
		return false, false
	}
	if tr != "" {
		known := false
		for _, v := range []TransitionReason{"completed", "aborted", "retry", "prompt_too_long",
			"max_output_tokens", "max_turns", "provider_413", "provider_529", "compaction_failed",
			"stop_hook_blocked", "permission_denied", "sibling_aborted", "orphan_recovered"} {
			known = known || v == tr
		}
		if !known {
			return false, false
		}
	}
	if to == "OPEN" && (tr == "retry" || tr == "orphan_recovered") {
		if r.retries+1 > r.max {
			return false, true
		}
		r.retries++
	}
	r.state = to
	return true, false
}

// fuzzReasons includes the empty reason, an unknown one and a miscased one.
var fuzzReasons = [...]TransitionReason{"", ReasonRetry, ReasonOrphanRecovered, ReasonCompleted,
	ReasonAborted, ReasonMaxTurns, "bogus", "RETRY"}

// FuzzTaskMachine drives a task with random transition sequences and checks
// it against refTask: the same accept/refuse decisions, unchanged on refusal,
// terminal states absorb, retries never exceed max_retries and never go down.
func FuzzTaskMachine(f *testing.F) {
	f.Add([]byte{1, 3, 0, 2, 0, 3, 0, 6, 0, 1, 1, 2, 0, 3, 0, 6, 0, 1, 1, 2, 0, 3, 0, 6, 0, 1, 1, 6, 0, 1, 1})
	f.Add([]byte{0, 2, 1, 0, 2, 0, 3, 0, 10, 0, 1, 2, 2, 0, 3, 0, 10, 0, 1, 2, 10, 0, 6, 4})
	f.Add([]byte{5, 1, 1, 0, 8, 0, 7, 0, 1, 3, 9, 0, 1, 0, 5, 0})
	f.Add([]byte{0, 0, 1, 0, 2, 0, 4, 3, 5, 0, 9, 0, 1, 1})
	pairs := seedPairs(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		max := uint32(data[0] % 5)
		initial := []State{Planned, Open}[data[1]%2]
		tk, err := New("t-f", initial, max)
		if err != nil {
			t.Fatal(err)
		}
		ref := &refTask{state: initial.String(), max: max}
		now := t0
		for i := 2; i+1 < len(data); i += 2 {
			to := State(data[i] % 14) // 12 and 13 are out of range
			tr := fuzzReasons[data[i+1]%byte(len(fuzzReasons))]
			now = now.Add(time.Second)
			before := tk
			ev, err := tk.Transition(to, tr, "fuzz", "step", now)
			ok, exhausted := ref.step(pairs, to.String(), tr)
			if ok != (err == nil) || exhausted != errors.Is(err, ErrRetriesExhausted) {
				t.Fatalf("step %d: %v → %v (%q): err %v; reference ok=%v exhausted=%v", i/2, before.State(), to, tr, err, ok, exhausted)
			}
			if before.State().IsTerminal() && (err == nil || tk.State() != before.State()) {
				t.Fatalf("step %d: terminal %v did not absorb %v: %v", i/2, before.State(), to, err)
			}
			if err != nil {
				if tk != before || ev != (LifecycleEvent{}) {
					t.Fatalf("step %d: refused %v → %v changed %+v to %+v, event %+v", i/2, before.State(), to, before, tk, ev)
				}
				continue
			}
			want := LifecycleEvent{Timestamp: now, EntityType: EntityTask, EntityID: "t-f", From: before.State(), To: to,
				Actor: "fuzz", Reason: "step", TransitionReason: tr}
			if ev != want || tk.State().String() != ref.state || tk.Retries() != ref.retries {
				t.Fatalf("step %d: event %+v state %v retries %d; want %+v, reference %s %d", i/2, ev, tk.State(), tk.Retries(), want, ref.state, ref.retries)
			}
			if tk.Retries() > tk.MaxRetries() || tk.Retries() < before.Retries() {
				t.Fatalf("step %d: retries %d → %d, max %d", i/2, before.Retries(), tk.Retries(), tk.MaxRetries())
			}
		}
	})
}
