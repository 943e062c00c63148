package agent

import (
	"strings"
	"testing"
	"time"
)

// refModel is an independent, deliberately naive model of the seed table,
// keyed by strings, used as the oracle for FuzzMachine.
type refModel struct {
	state       StateKind
	seq         uint32
	until       time.Time
	cons, total uint32
	maxC, maxT  uint32
}

type refRow struct {
	to        StateKind
	effect    EffectKind
	countErr  bool // consecutive++ and total++, may divert to CoolingDown/Stopped
	resetCons bool
}

var refTable = map[string]refRow{
	"Initializing/WorktreeReady":         {to: BuildingPrompt},
	"BuildingPrompt/PromptReady":         {to: Spawning, effect: StorePrompt},
	"Spawning/SessionStarted":            {to: Running, resetCons: true},
	"Spawning/SessionExited/Error":       {countErr: true},
	"Spawning/SessionExited/Timeout":     {countErr: true},
	"Running/SessionExited/Success":      {to: SessionComplete, resetCons: true},
	"Running/SessionExited/Error":        {countErr: true},
	"Running/SessionExited/Timeout":      {countErr: true},
	"Running/UrgentMessage":              {to: Interrupting, effect: CancelSession},
	"Interrupting/SessionExited/Success": {to: BuildingPrompt},
	"Interrupting/SessionExited/Error":   {to: BuildingPrompt},
	"Interrupting/SessionExited/Timeout": {to: BuildingPrompt},
	"Interrupting/GraceExceeded":         {to: BuildingPrompt, effect: ForceStopSession},
	"SessionComplete/WorktreeReady":      {to: BuildingPrompt, effect: IncrementSession},
	"CoolingDown/BackoffElapsed":         {to: BuildingPrompt},
}

func refBackoff(n uint32) time.Duration {
	if n == 0 {
		return 0
	}
	d := 2 * time.Second
	for i := uint32(1); i < n; i++ {
		d *= 2
		if d >= time.Minute {
			return time.Minute
		}
	}
	return d
}

// step returns the expected effect kind and whether the event is accepted.
func (r *refModel) step(ev Event, now time.Time) (EffectKind, bool) {
	switch ev.Kind {
	case OperatorStop, FatalError:
		if r.state == Stopped {
			return NoEffect, true
		}
		eff := LogFatal
		if ev.Kind == OperatorStop {
			eff = NoEffect
			if r.state == Running || r.state == Interrupting {
				eff = CancelSession
			}
		}
		r.state = Stopped
		return eff, true
	}
	key := r.state.String() + "/" + ev.Kind.String()
	if ev.Kind == SessionExited {
		key += "/" + ev.Outcome.Kind.String()
	}
	row, ok := refTable[key]
	if !ok {
		return NoEffect, false
	}
	if row.resetCons {
		r.cons = 0
	}
	if row.countErr {
		r.cons++
		r.total++
		if r.cons >= r.maxC || r.total >= r.maxT {
			r.state = Stopped
			return LogFatal, true
		}
		r.state = CoolingDown
		r.until = now.Add(refBackoff(r.cons))
		return NoEffect, true
	}
	switch {
	case ev.Kind == SessionStarted:
		r.seq = ev.Seq
	case row.to != Interrupting:
		// Interrupting keeps the Running seq; other targets carry none.
		r.seq = 0
	}
	r.state = row.to
	return row.effect, true
}

// decodeEvent turns two fuzz bytes into an event, including out-of-range
// event (0, 10) and outcome (3) kinds.
func decodeEvent(k, p byte) Event {
	ev := Event{Kind: EventKind(k % 11)}
	switch ev.Kind {
	case PromptReady:
		ev.Prompt = strings.Repeat("p", int(p%4))
	case SessionStarted:
		ev.Seq = uint32(p)
	case SessionExited:
		ev.Outcome = ExitOutcome{Kind: OutcomeKind(p % 4)}
		if ev.Outcome.Kind == Error {
			ev.Outcome.Msg = "exit status " + string(rune('0'+p%10))
		}
	case FatalError:
		ev.Msg = "fatal " + string(rune('a'+p%26))
	}
	return ev
}

func FuzzMachine(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 2, 0, 3, 5})
	// Initializing → ... → Running → SessionComplete → BuildingPrompt.
	f.Add([]byte{4, 20, 1, 0, 2, 1, 3, 7, 4, 0, 1, 0, 2, 1})
	// Repeated spawn failures with tiny thresholds.
	f.Add([]byte{1, 2, 1, 0, 2, 0, 4, 1, 7, 0, 2, 0, 4, 2, 7, 0, 2, 0, 4, 1})
	// Interrupt, grace, late exit, operator stop, then anything.
	f.Add([]byte{3, 3, 1, 0, 2, 0, 3, 9, 5, 0, 6, 0, 4, 1, 8, 0, 1, 0, 9, 3, 4, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		// Small thresholds (0 = default) so that limits are reached often.
		th := Thresholds{MaxConsecutiveErrors: uint32(data[0] % 8), MaxTotalErrors: uint32(data[1] % 24)}
		data = data[2:]
		m := New(th)
		eff := m.Thresholds()
		if th.MaxConsecutiveErrors == 0 && eff.MaxConsecutiveErrors != 5 || th.MaxTotalErrors == 0 && eff.MaxTotalErrors != 20 {
			t.Fatalf("thresholds %+v resolved to %+v", th, eff)
		}
		ref := &refModel{state: Initializing, maxC: eff.MaxConsecutiveErrors, maxT: eff.MaxTotalErrors}
		now := t0
		for i := 0; i+1 < len(data); i += 2 {
			ev := decodeEvent(data[i], data[i+1])
			now = now.Add(time.Duration(data[i+1]) * time.Millisecond)
			before, bc, bt := m.State(), m.ConsecutiveErrors(), m.TotalErrors()

			got, err := m.Handle(ev, now)
			wantEff, ok := ref.step(ev, now)

			if ok != (err == nil) {
				t.Fatalf("step %d: %v + %v: err %v, reference accepts=%v", i/2, before, ev, err, ok)
			}
			if err != nil {
				if m.State() != before || m.ConsecutiveErrors() != bc || m.TotalErrors() != bt || got != (SideEffect{}) {
					t.Fatalf("step %d: rejected %v changed %v to %v (cons %d→%d total %d→%d), effect %v",
						i/2, ev, before, m.State(), bc, m.ConsecutiveErrors(), bt, m.TotalErrors(), got)
				}
				continue
			}
			s := m.State()
			if before.Kind == Stopped && (s.Kind != Stopped || got != (SideEffect{})) {
				t.Fatalf("step %d: Stopped + %v left Stopped: %v / %v", i/2, ev, s, got)
			}
			if s.Kind != ref.state || got.Kind != wantEff {
				t.Fatalf("step %d: %v + %v = %v / %v, reference %v / %v", i/2, before, ev, s, got, ref.state, wantEff)
			}
			if (s.Kind == Running || s.Kind == Interrupting) && s.SessionSeq != ref.seq {
				t.Fatalf("step %d: %v, reference seq %d", i/2, s, ref.seq)
			}
			if s.Kind == CoolingDown && !s.Until.Equal(ref.until) {
				t.Fatalf("step %d: %v, reference until %v", i/2, s, ref.until)
			}
			if m.ConsecutiveErrors() != ref.cons || m.TotalErrors() != ref.total {
				t.Fatalf("step %d: %v + %v: cons %d total %d, reference %d %d",
					i/2, before, ev, m.ConsecutiveErrors(), m.TotalErrors(), ref.cons, ref.total)
			}
			switch got.Kind {
			case StorePrompt:
				if got.Prompt != ev.Prompt {
					t.Fatalf("step %d: StorePrompt %q, want %q", i/2, got.Prompt, ev.Prompt)
				}
			case LogFatal:
				if ev.Kind == FatalError && got.Msg != ev.Msg ||
					ev.Kind == SessionExited && !strings.HasSuffix(got.Msg, ", last: "+ev.Outcome.String()) {
					t.Fatalf("step %d: LogFatal(%q) for %v", i/2, got.Msg, ev)
				}
			}
			if m.TotalErrors() > eff.MaxTotalErrors || m.ConsecutiveErrors() > eff.MaxConsecutiveErrors {
				t.Fatalf("step %d: cons %d total %d exceed %+v", i/2, m.ConsecutiveErrors(), m.TotalErrors(), eff)
			}
			if m.ConsecutiveErrors() > m.TotalErrors() {
				t.Fatalf("step %d: cons %d > total %d", i/2, m.ConsecutiveErrors(), m.TotalErrors())
			}
		}
	})
}
