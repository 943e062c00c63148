// Package budget keeps the spend of each agent and of the whole swarm
// against their budgets, window by window: how much is spent, which of the
// 80%, 95% and 100% marks a spend crossed, and when a window rolls over.
// It is a pure ledger: no I/O, no clock (time is passed in); the daemon
// feeds it the sessions' costs and acts on what it reports (events, the
// prompt's "budget left", pausing an agent whose budget ran out).
//
// Windows are fixed and aligned to the Unix epoch: a 24h window runs from
// midnight UTC to midnight UTC, a 1h window from the top of each hour. A
// session's spend counts in the window in which it is reported: a running
// session's spend so far (Live) in the current one, and its final cost
// (Commit) in the window in which it ended.
package budget

import (
	"math"
	"slices"
	"strconv"
	"time"
)

// Swarm is the scope name of the swarm's budget (agents' names are
// lowercase words, so none can be it).
const Swarm = "(swarm)"

// DefaultWindow is the window of a budget that names none.
const DefaultWindow = 24 * time.Hour

// Limit is a budget: USD and tokens per window; zero means no limit of
// that kind.
type Limit struct {
	USD    float64
	Tokens int64
	Window time.Duration
}

// Set reports whether the limit limits anything.
func (l Limit) Set() bool { return l.USD > 0 || l.Tokens > 0 }

func (l Limit) window() time.Duration {
	if l.Window <= 0 {
		return DefaultWindow
	}
	return l.Window
}

// Spend is money and tokens spent.
type Spend struct {
	USD    float64
	Tokens int64
}

// Add returns s plus o.
func (s Spend) Add(o Spend) Spend { return Spend{USD: s.USD + o.USD, Tokens: s.Tokens + o.Tokens} }

// Level is how much of a budget is spent: the marks that trigger events.
type Level uint8

// Levels, in order.
const (
	Under     Level = iota // below 80%
	Warn80                 // 80% or more
	Warn95                 // 95% or more
	Exhausted              // 100% or more: the agent is paused
)

func (l Level) String() string {
	switch l {
	case Under:
		return "under 80%"
	case Warn80:
		return "80%"
	case Warn95:
		return "95%"
	case Exhausted:
		return "exhausted"
	}
	return "Level(" + strconv.Itoa(int(l)) + ")"
}

func levelOf(fraction float64) Level {
	switch {
	case fraction >= 1:
		return Exhausted
	case fraction >= 0.95:
		return Warn95
	case fraction >= 0.80:
		return Warn80
	}
	return Under
}

// WindowStart is the start of the window of length w that holds t.
func WindowStart(t time.Time, w time.Duration) time.Time {
	if w <= 0 {
		w = DefaultWindow
	}
	return time.Unix(0, 0).UTC().Add(t.Sub(time.Unix(0, 0)).Truncate(w))
}

// Status is one budget's state at a moment.
type Status struct {
	Scope string // an agent's name, or Swarm
	Limit Limit
	Spent Spend // in the current window, running sessions' spend so far included
	// Fraction is the larger of the spent shares of the USD and token
	// limits (1 is all of it).
	Fraction    float64
	Level       Level
	WindowStart time.Time
	WindowEnd   time.Time
}

// LeftUSD is what is left of the USD limit (negative when over it); ok is
// false when there is no USD limit.
func (s Status) LeftUSD() (usd float64, ok bool) {
	if s.Limit.USD <= 0 {
		return 0, false
	}
	return s.Limit.USD - s.Spent.USD, true
}

// Crossing reports that a budget's spend reached a mark it had not reached
// in its window.
type Crossing struct{ Status }

// account is one budget in its current window.
type account struct {
	scope     string
	limit     Limit
	start     time.Time
	committed Spend
	live      map[string]Spend // running sessions' spend so far, by session id
	reported  Level            // the highest level reported in this window
}

func newAccount(scope string, l Limit, now time.Time, committed Spend) *account {
	a := &account{scope: scope, limit: l, start: WindowStart(now, l.window()), committed: committed,
		live: make(map[string]Spend)}
	a.reported = a.status(now).Level
	return a
}

// roll starts a new window once now is past the current one: what ended
// in the old window no longer counts; running sessions' spend so far does,
// as it will be committed in the new one.
func (a *account) roll(now time.Time) {
	w := a.limit.window()
	if now.Before(a.start.Add(w)) {
		return
	}
	a.start, a.committed = WindowStart(now, w), Spend{}
	a.reported = a.status(now).Level
}

func (a *account) spent() Spend {
	s := a.committed
	for _, l := range a.live {
		s = s.Add(l)
	}
	return s
}

func (a *account) status(now time.Time) Status {
	st := Status{Scope: a.scope, Limit: a.limit, Spent: a.spent(), WindowStart: a.start, WindowEnd: a.start.Add(a.limit.window())}
	if a.limit.USD > 0 {
		st.Fraction = st.Spent.USD / a.limit.USD
	}
	if a.limit.Tokens > 0 {
		st.Fraction = math.Max(st.Fraction, float64(st.Spent.Tokens)/float64(a.limit.Tokens))
	}
	st.Level = levelOf(st.Fraction)
	return st
}

// check reports a mark newly reached, and forgets marks left behind (a
// raised limit) so that reaching them again is reported again.
func (a *account) check(now time.Time) []Crossing {
	st := a.status(now)
	if st.Level <= a.reported {
		a.reported = st.Level
		return nil
	}
	a.reported = st.Level
	return []Crossing{{st}}
}

// Ledger is the budgets of the agents and of the swarm. It is not safe for
// concurrent use: the daemon holds it under a mutex.
type Ledger struct {
	agents map[string]*account
	swarm  *account // nil without a swarm budget
}

// New returns a ledger with no budgets.
func New() *Ledger { return &Ledger{agents: make(map[string]*account)} }

// SetLimit sets the budget of scope (an agent or Swarm): a limit that
// limits nothing keeps counting scope's spend (for swarmd budget) and
// holds nothing. It reports a mark the new limit puts scope past. A budget
// that is new, or whose window length changes, starts from committed: what
// scope's ended sessions spent in the window that holds now; otherwise the
// ledger's own count goes on. A new budget reports no mark it starts past
// (a restart must not repeat the events of before it); Exhausted tells
// whether it starts spent.
func (l *Ledger) SetLimit(scope string, lim Limit, committed Spend, now time.Time) []Crossing {
	old := l.account(scope)
	var out []Crossing
	a := newAccount(scope, lim, now, committed)
	if old != nil {
		old.roll(now)
		a.live = old.live
		if old.limit.window() == lim.window() {
			a.committed, a.reported = old.committed, old.reported
			out = a.check(now)
		}
	}
	if scope == Swarm {
		l.swarm = a
	} else {
		l.agents[scope] = a
	}
	return out
}

// Remove forgets scope (an agent removed from the config).
func (l *Ledger) Remove(scope string) {
	if scope == Swarm {
		l.swarm = nil
		return
	}
	delete(l.agents, scope)
}

// Limit is scope's limit (zero when it has none or is not known).
func (l *Ledger) Limit(scope string) Limit {
	if a := l.account(scope); a != nil {
		return a.limit
	}
	return Limit{}
}

func (l *Ledger) account(scope string) *account {
	if scope == Swarm {
		return l.swarm
	}
	return l.agents[scope]
}

// accounts are the budgets an agent's spend counts against.
func (l *Ledger) accounts(agent string) []*account {
	var out []*account
	if a := l.agents[agent]; a != nil {
		out = append(out, a)
	}
	if l.swarm != nil {
		out = append(out, l.swarm)
	}
	return out
}

// Live records a running session's spend so far, and reports the marks it
// reached.
func (l *Ledger) Live(agent, session string, s Spend, now time.Time) []Crossing {
	var out []Crossing
	for _, a := range l.accounts(agent) {
		a.roll(now)
		a.live[session] = s
		out = append(out, a.check(now)...)
	}
	return out
}

// Commit records an ended session's final spend in place of its spend so
// far, and reports the marks it reached.
func (l *Ledger) Commit(agent, session string, s Spend, now time.Time) []Crossing {
	var out []Crossing
	for _, a := range l.accounts(agent) {
		a.roll(now)
		delete(a.live, session)
		a.committed = a.committed.Add(s)
		out = append(out, a.check(now)...)
	}
	return out
}

// Status is scope's budget at now; ok is false when it has none.
func (l *Ledger) Status(scope string, now time.Time) (Status, bool) {
	a := l.account(scope)
	if a == nil {
		return Status{}, false
	}
	a.roll(now)
	return a.status(now), true
}

// Of is the budgets that apply to agent at now, its own first.
func (l *Ledger) Of(agent string, now time.Time) []Status {
	var out []Status
	for _, a := range l.accounts(agent) {
		a.roll(now)
		out = append(out, a.status(now))
	}
	return out
}

// Exhausted returns the first budget of agent's that is spent at now.
func (l *Ledger) Exhausted(agent string, now time.Time) (Status, bool) {
	for _, st := range l.Of(agent, now) {
		if st.Level == Exhausted {
			return st, true
		}
	}
	return Status{}, false
}

// Tightest is, of the budgets that apply to agent, the one with the
// highest level (the least left): what the agent's prompt tells it.
func (l *Ledger) Tightest(agent string, now time.Time) (Status, bool) {
	sts := l.Of(agent, now)
	if len(sts) == 0 {
		return Status{}, false
	}
	return slices.MaxFunc(sts, func(a, b Status) int {
		switch {
		case a.Fraction > b.Fraction:
			return 1
		case a.Fraction < b.Fraction:
			return -1
		}
		return 0
	}), true
}

// LeftUSD is the least USD left of the budgets that apply to agent; ok is
// false when none has a USD limit.
func (l *Ledger) LeftUSD(agent string, now time.Time) (usd float64, ok bool) {
	for _, st := range l.Of(agent, now) {
		if left, has := st.LeftUSD(); has && (!ok || left < usd) {
			usd, ok = left, true
		}
	}
	return usd, ok
}

// SharedUSD reports whether the swarm has a USD limit: then what is left
// of every agent's budget (LeftUSD) moves with any agent's spend.
func (l *Ledger) SharedUSD() bool { return l.swarm != nil && l.swarm.limit.USD > 0 }

// Scopes is every scope the ledger counts: the agents' names sorted, then
// Swarm if it is counted.
func (l *Ledger) Scopes() []string {
	out := make([]string, 0, len(l.agents)+1)
	for n := range l.agents {
		out = append(out, n)
	}
	slices.Sort(out)
	if l.swarm != nil {
		out = append(out, Swarm)
	}
	return out
}

// NextRollover is the earliest end of a window among the budgets that are
// exhausted at now (zero when none is): the moment a paused agent may go
// on. A scope without a limit is never exhausted.
func (l *Ledger) NextRollover(now time.Time) time.Time {
	var next time.Time
	for _, s := range l.Scopes() {
		st, _ := l.Status(s, now)
		if st.Level == Exhausted && (next.IsZero() || st.WindowEnd.Before(next)) {
			next = st.WindowEnd
		}
	}
	return next
}
