// Package spend keeps the swarm's spend within its budgets: it holds the
// pure budget.Ledger, feeds it the sessions' costs (as they run and when
// they end), and acts on what it reports: an event at the 80%, 95% and
// 100% marks, the prompt's "budget left", pausing the agents whose budget
// is spent (cancelling their running session), and lifting those pauses
// when a window rolls over (a timer to the rollover, no poll) or a limit
// is raised. The daemon wires it; who may set a limit is the daemon's
// control API's to decide.
package spend

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/budget"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
)

// A budget's pause: by swarmd, with this reason. Only such a pause is
// lifted when the budget allows again; an operator's pause stays theirs.
const (
	actorSwarmd  = "swarmd"
	reasonBudget = "budget_exhausted"
)

// Keeper holds the daemon's budget.Ledger and acts on it: events at the
// 80%, 95% and 100% marks, the prompt's "budget left", pausing agents
// whose budget is spent (cancelling their running session), and lifting
// those pauses when a window rolls over (a timer to the rollover) or a
// limit is raised. It is a runner.Observer for the ended sessions' costs.
type Keeper struct {
	o Options

	mu        sync.Mutex
	ledger    *budget.Ledger
	overrides map[string]store.BudgetLimit // swarmd budget set, by scope
	aborted   map[string]string            // agent -> the session cancelled for its budget
	unpriced  map[string]bool              // models warned about
	timer     *time.Timer
	running   bool // between a Start that succeeded and Stop
	closed    bool // stopped: no timer is armed
}

// Options are what a Keeper reads and acts on.
type Options struct {
	Store   Store                 // the limits set at runtime, the spend of past sessions, the pauses
	Journal Journal               // where limits, pauses and events are written
	Agents  Agents                // the runners of the agents it holds and releases
	Config  func() *config.Config // the config in force (a reload swaps it)
	Metrics Metrics               // who is paused
	Log     *zap.Logger
	// Now is the clock the budgets' windows are read by (time.Now when
	// nil): what is left, the marks, the rollovers.
	Now func() time.Time
	// Exhausted tells the operator that scope's budget is spent.
	Exhausted func(scope, reason string)
	// Resume lifts agent's pause as actor, with why in its event, as
	// `swarmd resume` does.
	Resume func(ctx context.Context, agent, actor, why string) error
}

// Store is what a Keeper reads of swarm.db (*store.DB).
type Store interface {
	BudgetLimits(ctx context.Context) (map[string]store.BudgetLimit, error)
	SpendSince(ctx context.Context, since time.Time) (map[string]store.Spend, error)
	Pauses(ctx context.Context) (map[string]store.PauseRecord, error)
}

// Journal is what a Keeper writes (*store.Journal).
type Journal interface {
	Event(e store.EventRecord)
	Flush(ctx context.Context) error
	SetPause(ctx context.Context, p store.PauseRecord, e store.EventRecord) error
	ClearPause(ctx context.Context, agent string, e store.EventRecord) (store.PauseRecord, bool, error)
	SetBudgetLimit(ctx context.Context, l store.BudgetLimit, e store.EventRecord) error
	ClearBudgetLimit(ctx context.Context, scope string, e store.EventRecord) (bool, error)
}

// Agents are the daemon's runners (*registry.Registry).
type Agents interface {
	Names() []string
	Runner(name string) (*runner.Runner, error)
}

// Metrics are the gauges a Keeper sets (*metrics.Metrics). What is left
// of each budget is not among them: the metrics read it at each scrape
// (LeftUSD), as a window can roll over with nothing to tell.
type Metrics interface {
	SetPaused(agent string, paused bool)
}

// New returns a Keeper with no budgets: Start loads them.
func New(o Options) *Keeper {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Keeper{o: o, ledger: budget.New(), overrides: map[string]store.BudgetLimit{},
		aborted: map[string]string{}, unpriced: map[string]bool{}}
}

// Start loads the budgets of the config in force and what the sessions of
// each window spent so far, and makes the stored pauses agree with them;
// call it before any runner starts. It arms the timer to the next
// rollover, which Stop stops. On a running Keeper it does nothing.
func (k *Keeper) Start(ctx context.Context) error {
	k.mu.Lock()
	running := k.running
	k.closed = false
	k.mu.Unlock()
	if running {
		return nil
	}
	cfg, now := k.o.Config(), k.now()
	if err := k.load(ctx, cfg, now); err != nil {
		return err
	}
	if err := k.reconcile(ctx, cfg, now); err != nil {
		k.Stop()
		return err
	}
	k.mu.Lock()
	k.running = true
	k.mu.Unlock()
	return nil
}

func (k *Keeper) now() time.Time { return k.o.Now() }

// limitOf is scope's limit under cfg: the file's, with a USD limit set at
// runtime in its place.
func (k *Keeper) limitOf(cfg *config.Config, scope string) budget.Limit {
	b := cfg.SwarmBudget
	if scope != budget.Swarm {
		a, _ := cfg.Agent(scope)
		b = a.Budget
	}
	l := budget.Limit{USD: b.USD, Tokens: int64(b.Tokens), Window: b.Window}
	if o, ok := k.overrides[scope]; ok {
		l.USD = o.USD
	}
	return l
}

// load reads the runtime limits and what the sessions of each window spent
// so far, and sets every budget of cfg. It is called at start, before any
// runner, and at a reload.
func (k *Keeper) load(ctx context.Context, cfg *config.Config, now time.Time) error {
	overrides, err := k.o.Store.BudgetLimits(ctx)
	if err != nil {
		return fmt.Errorf("budgets: %w", err)
	}
	spent := map[time.Duration]map[string]store.Spend{}
	spendIn := func(w time.Duration) (map[string]store.Spend, error) {
		if s, ok := spent[w]; ok {
			return s, nil
		}
		s, err := k.o.Store.SpendSince(ctx, budget.WindowStart(now, w))
		spent[w] = s
		return s, err
	}
	k.mu.Lock()
	k.overrides = overrides
	var cs []budget.Crossing
	for _, scope := range append(cfg.AgentNames(), budget.Swarm) {
		l := k.limitOf(cfg, scope)
		s, err := spendIn(max(l.Window, time.Minute))
		if err != nil {
			k.mu.Unlock()
			return fmt.Errorf("budgets: %w", err)
		}
		var committed budget.Spend
		for agent, sp := range s {
			if scope == budget.Swarm || agent == scope {
				committed = committed.Add(budget.Spend{USD: sp.CostUSD, Tokens: sp.TokensIn + sp.TokensOut})
			}
		}
		cs = append(cs, k.ledger.SetLimit(scope, l, committed, now)...)
	}
	for _, scope := range k.ledger.Scopes() {
		if _, ok := cfg.Agent(scope); !ok && scope != budget.Swarm {
			k.ledger.Remove(scope)
		}
	}
	k.mu.Unlock()
	k.announce(cs)
	return nil
}

// reconcile makes the stored pauses agree with the budgets before the
// runners start: an agent whose budget is spent is paused, and a budget
// pause whose budget allows again (the window rolled over while swarmd was
// down, the file raised it) is lifted. A pause it makes tells the operator
// (Exhausted) once per spent budget, as the crossing does while the daemon
// runs: the budget was spent while no daemon ran (a session's outcome
// recovered from its log, a limit lowered in the file), or its crossing's
// pause was never stored, and no alert said so. An agent found paused
// already was told of at its pause.
func (k *Keeper) reconcile(ctx context.Context, cfg *config.Config, now time.Time) error {
	pauses, err := k.o.Store.Pauses(ctx)
	if err != nil {
		return fmt.Errorf("budgets: %w", err)
	}
	told := map[string]bool{} // budgets spent, by scope: a swarm's pauses every agent
	for _, a := range cfg.Agents {
		p, paused := pauses[a.Name]
		k.mu.Lock()
		st, spent := k.ledger.Exhausted(a.Name, now)
		k.mu.Unlock()
		e := store.EventRecord{At: now, Agent: a.Name, From: "Initializing", To: "Initializing", Actor: actorSwarmd}
		switch {
		case spent && !paused:
			e.Event, e.Reason = store.EventPaused, exhaustedDetail(st, a.Name)
			err = k.o.Journal.SetPause(ctx, store.PauseRecord{Agent: a.Name, Actor: actorSwarmd, Reason: reasonBudget, Since: now}, e)
			if err == nil && !told[st.Scope] {
				told[st.Scope] = true
				k.o.Exhausted(st.Scope, "budget_exhausted: "+spentText(st))
			}
		case !spent && paused && ourPause(p.Actor, p.Reason):
			e.Event, e.Reason = store.EventResumed, "its budget allows again (the window rolled over, or the limit was raised)"
			_, _, err = k.o.Journal.ClearPause(ctx, a.Name, e)
		}
		if err != nil {
			return fmt.Errorf("budgets: %w", err)
		}
	}
	k.arm(now)
	return nil
}

func ourPause(actor, reason string) bool { return actor == actorSwarmd && reason == reasonBudget }

// Price is runner.Config.Price, and the cost of a running session's usage
// so far: the backend's own record (u.CostUSD) where it reports one, else
// tokens times the configured price of the model ($0 without one: the
// session shows as unpriced, and the model is logged once). A price named for the model itself counts when it
// is higher than the record: the operator says what that model costs them,
// and a budget must not count less than either figure (a running Claude
// Code session reports its cost only at its end, so the price is what
// stops it in time; its record must not then undo that).
func (k *Keeper) Price(backendName, model string, u backend.Usage) float64 {
	cfg := k.o.Config()
	p, named, ok := cfg.PriceFor(model, cfg.Backends[backendName].Model)
	priced := p.Cost(u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens)
	switch {
	case u.CostUSD > 0 && named:
		return math.Max(u.CostUSD, priced)
	case u.CostUSD > 0:
		return u.CostUSD
	case ok:
		return priced
	}
	key := backendName + "/" + model
	k.mu.Lock()
	warn := !k.unpriced[key] && u.Tokens() > 0
	k.unpriced[key] = true
	k.mu.Unlock()
	if warn {
		k.o.Log.Warn("no price for this model: its sessions show as unpriced and count $0 against USD budgets (add it under prices:)",
			zap.String("backend", backendName), zap.String("model", model))
	}
	return 0
}

// cost is what a usage costs (price), and its tokens.
func (k *Keeper) cost(backendName, model string, u backend.Usage) budget.Spend {
	return budget.Spend{USD: k.Price(backendName, model, u), Tokens: u.InputTokens + u.OutputTokens}
}

// Progress takes a running session's spend so far (runner.Config.OnProgress,
// on the session's output goroutine: no waiting here).
func (k *Keeper) Progress(rec runner.ProgressRecord) {
	s := k.cost(rec.Backend, rec.Progress.Model, rec.Progress.Usage)
	now := k.now()
	k.mu.Lock()
	cs := k.ledger.Live(rec.Agent, rec.SessionID, s, now)
	st, spent := k.ledger.Exhausted(rec.Agent, now)
	abort := spent && k.aborted[rec.Agent] != rec.SessionID
	if abort {
		k.aborted[rec.Agent] = rec.SessionID
	}
	k.mu.Unlock()
	if len(cs) > 0 || abort {
		go k.act(cs, st, spent)
	}
}

// OnSessionEnd implements runner.Observer: the session's final cost (the
// runner priced it if its backend reported none). An agent whose budget it
// spent is paused here, on its runner's goroutine, before it can build
// another prompt.
func (k *Keeper) OnSessionEnd(rec runner.SessionRecord) {
	u := rec.Result.Usage
	now := k.now()
	k.mu.Lock()
	cs := k.ledger.Commit(rec.Agent, rec.SessionID, budget.Spend{USD: u.CostUSD, Tokens: u.InputTokens + u.OutputTokens}, now)
	st, spent := k.ledger.Exhausted(rec.Agent, now)
	k.mu.Unlock()
	if len(cs) > 0 || spent {
		k.act(cs, st, spent)
	}
	if !spent {
		// A session that a spend so far stopped may have cost less in the
		// end: a pause the budget no longer needs is lifted.
		if r, err := k.o.Agents.Runner(rec.Agent); err == nil {
			if p, paused := r.Paused(); paused && ourPause(p.Actor, p.Reason) {
				go k.release("its budget allows again")
			}
		}
	}
}

func (k *Keeper) OnTransition(runner.Transition) {}
func (k *Keeper) OnIdle(string, bool, time.Time) {}

// act records the marks reached and holds the agents of a spent budget.
func (k *Keeper) act(cs []budget.Crossing, st budget.Status, spent bool) {
	k.announce(cs)
	if !spent {
		return
	}
	agents := []string{st.Scope}
	if st.Scope == budget.Swarm {
		agents = k.o.Agents.Names()
	}
	for _, name := range agents {
		k.hold(name, st)
	}
	k.arm(k.now())
}

// announce writes an event per mark reached.
func (k *Keeper) announce(cs []budget.Crossing) {
	for _, c := range cs {
		ev, what := store.EventBudgetWarning, "budget "+c.Level.String()+" spent: "
		if c.Level == budget.Exhausted {
			ev, what = store.EventBudgetExhausted, "budget_exhausted: "
		}
		e := store.EventRecord{At: k.now(), Agent: c.Scope, Event: ev, Actor: actorSwarmd, Reason: what + spentText(c.Status)}
		if r, err := k.o.Agents.Runner(c.Scope); err == nil {
			e = stateEvent(r.Snapshot(), e.At, ev, actorSwarmd, e.Reason)
		}
		k.o.Journal.Event(e)
		k.o.Log.Info("budget", zap.String("scope", c.Scope), zap.String("level", c.Level.String()), zap.String("reason", e.Reason))
		if c.Level == budget.Exhausted {
			k.o.Exhausted(c.Scope, e.Reason)
		}
	}
}

// hold pauses an agent for a spent budget (unless it is paused already:
// an operator's pause stays the operator's) and cancels its running
// session.
func (k *Keeper) hold(name string, st budget.Status) {
	r, err := k.o.Agents.Runner(name)
	if err != nil {
		return
	}
	detail := exhaustedDetail(st, name)
	if _, paused := r.Paused(); !paused {
		at := k.now()
		r.Pause(runner.Pause{Actor: actorSwarmd, Reason: reasonBudget, Since: at})
		k.o.Metrics.SetPaused(name, true)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := k.o.Journal.SetPause(ctx, store.PauseRecord{Agent: name, Actor: actorSwarmd, Reason: reasonBudget, Since: at},
				stateEvent(r.Snapshot(), at, store.EventPaused, actorSwarmd, detail))
			if err != nil {
				k.o.Log.Error("store a budget pause", zap.String("agent", name), zap.Error(err))
			}
		}()
	}
	if s := r.Snapshot(); !s.SessionStarted.IsZero() {
		r.Abort(backend.AbortBudgetExhausted, detail)
	}
}

// arm sets the timer to the next rollover of a spent budget: the moment a
// paused agent may go on. No poll.
func (k *Keeper) arm(now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
	next := k.ledger.NextRollover(now)
	if next.IsZero() || k.closed {
		return
	}
	k.timer = time.AfterFunc(next.Sub(now)+10*time.Millisecond, func() { k.release("the budget window rolled over") })
}

// release lifts the budget pauses of agents whose budgets allow again.
func (k *Keeper) release(why string) {
	now := k.now()
	for _, name := range k.o.Agents.Names() {
		r, err := k.o.Agents.Runner(name)
		if err != nil {
			continue
		}
		p, paused := r.Paused()
		k.mu.Lock()
		_, spent := k.ledger.Exhausted(name, now)
		k.mu.Unlock()
		if !paused || !ourPause(p.Actor, p.Reason) || spent {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = k.o.Resume(ctx, name, actorSwarmd, why)
		cancel()
		if err != nil {
			k.o.Log.Warn("lift a budget pause", zap.String("agent", name), zap.Error(err))
		}
	}
	k.arm(now)
}

// Holds says why a budget keeps an agent paused: swarmd resume refuses
// while its budget is spent.
func (k *Keeper) Holds(name string) (string, bool) {
	now := k.now()
	k.mu.Lock()
	st, spent := k.ledger.Exhausted(name, now)
	k.mu.Unlock()
	if !spent {
		return "", false
	}
	how := "swarmd budget set " + name + " USD"
	if st.Scope == budget.Swarm {
		how = "swarmd budget set --swarm USD"
	}
	return fmt.Sprintf("agent %s is held by its budget (%s); it goes on when the window rolls over at %s, or raise it with %s",
		name, spentText(st), st.WindowEnd.UTC().Format(time.RFC3339), how), true
}

// Note is prompt.Builder.Budget: what is left, once 80% of a budget is
// spent.
func (k *Keeper) Note(agent string) string {
	k.mu.Lock()
	st, ok := k.ledger.Tightest(agent, k.now())
	k.mu.Unlock()
	if !ok || st.Level < budget.Warn80 {
		return ""
	}
	whose := "your budget"
	if st.Scope == budget.Swarm {
		whose = "the swarm's budget (all agents together)"
	}
	var left string
	if usd, ok := st.LeftUSD(); ok {
		left = FormatUSD(math.Max(usd, 0)) + " of " + FormatUSD(st.Limit.USD)
	}
	if st.Limit.Tokens > 0 {
		if left != "" {
			left += ", "
		}
		left += TokensText(st.Limit.Tokens-st.Spent.Tokens) + " of " + TokensText(st.Limit.Tokens) + " tokens"
	}
	return fmt.Sprintf("%s left of %s: %.0f%% spent in the %s window that ends %s", left, whose, 100*st.Fraction,
		config.FormatDuration(st.WindowEnd.Sub(st.WindowStart)), st.WindowEnd.UTC().Format("2006-01-02 15:04 UTC"))
}

// LeftUSD is what each agent may still spend in its current window, the
// least left of its own budget and the swarm's (negative when over), for
// the agents of the registry that have a USD limit: the metrics read it at
// each scrape, so that it is never the value of a window that has rolled
// over since (a gauge set on spend was, until the agent's next session).
func (k *Keeper) LeftUSD() map[string]float64 {
	names := k.o.Agents.Names()
	now := k.now()
	out := make(map[string]float64, len(names))
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, name := range names {
		if left, ok := k.ledger.LeftUSD(name, now); ok {
			out[name] = left
		}
	}
	return out
}

// Statuses are `swarmd budget`'s rows: the agents in config order, then the
// swarm.
func (k *Keeper) Statuses(cfg *config.Config, now time.Time) []control.BudgetStatus {
	var out []control.BudgetStatus
	for _, scope := range append(cfg.AgentNames(), budget.Swarm) {
		k.mu.Lock()
		st, ok := k.ledger.Status(scope, now)
		o, set := k.overrides[scope]
		k.mu.Unlock()
		if !ok {
			continue
		}
		bs := control.BudgetStatus{Scope: scope, LimitUSD: st.Limit.USD, LimitTokens: st.Limit.Tokens,
			Window: config.FormatDuration(st.WindowEnd.Sub(st.WindowStart)), WindowStart: st.WindowStart, WindowEnd: st.WindowEnd,
			SpentUSD: st.Spent.USD, SpentTokens: st.Spent.Tokens, Percent: 100 * st.Fraction, Level: st.Level.String(), Source: "config"}
		if set {
			bs.Source = "set by " + o.Actor + " " + o.SetAt.UTC().Format(time.RFC3339)
		}
		if r, err := k.o.Agents.Runner(scope); err == nil {
			p, paused := r.Paused()
			bs.Paused = paused && ourPause(p.Actor, p.Reason)
		}
		out = append(out, bs)
	}
	return out
}

// Set is swarmd budget set: store the runtime limit (or clear it), then
// hold or release the agents it concerns.
func (k *Keeper) Set(ctx context.Context, req control.BudgetSetRequest, actor string) error {
	cfg := k.o.Config()
	if _, ok := cfg.Agent(req.Scope); !ok && req.Scope != budget.Swarm {
		return fmt.Errorf("%w: %q is not an agent of this daemon (or give --swarm)", control.ErrUnknownAgent, req.Scope)
	}
	if req.USD < 0 || math.IsNaN(req.USD) || math.IsInf(req.USD, 0) {
		return fmt.Errorf("%w: budget set: %v is not an amount of US dollars, 0 or more", control.ErrConflict, req.USD)
	}
	now := k.now()
	e := store.EventRecord{At: now, Agent: req.Scope, Event: store.EventBudgetSet, Actor: actor}
	if r, err := k.o.Agents.Runner(req.Scope); err == nil {
		e = stateEvent(r.Snapshot(), now, store.EventBudgetSet, actor, "")
	}
	var err error
	if req.Clear {
		e.Reason = "back to the config's limit"
		_, err = k.o.Journal.ClearBudgetLimit(ctx, req.Scope, e)
	} else {
		e.Reason = "USD limit " + FormatUSD(req.USD) + " per window (0: none)"
		err = k.o.Journal.SetBudgetLimit(ctx, store.BudgetLimit{Scope: req.Scope, USD: req.USD, Actor: actor, SetAt: now}, e)
	}
	if err != nil {
		return fmt.Errorf("budget set %s: %w", req.Scope, err)
	}
	k.mu.Lock()
	if req.Clear {
		delete(k.overrides, req.Scope)
	} else {
		k.overrides[req.Scope] = store.BudgetLimit{Scope: req.Scope, USD: req.USD, Actor: actor, SetAt: now}
	}
	cs := k.ledger.SetLimit(req.Scope, k.limitOf(cfg, req.Scope), budget.Spend{}, now)
	k.mu.Unlock()
	k.reapply(cs, now)
	return nil
}

// reapply acts on changed limits: marks reached, agents newly held,
// agents released.
func (k *Keeper) reapply(cs []budget.Crossing, now time.Time) {
	k.announce(cs)
	for _, name := range k.o.Agents.Names() {
		k.mu.Lock()
		st, spent := k.ledger.Exhausted(name, now)
		k.mu.Unlock()
		if spent {
			k.hold(name, st)
		}
	}
	k.release("its budget was raised")
}

// Reload applies a reloaded config's budgets.
func (k *Keeper) Reload(ctx context.Context, cfg *config.Config) {
	if err := k.o.Journal.Flush(ctx); err != nil {
		k.o.Log.Warn("config reload: budgets", zap.Error(err))
	}
	if err := k.load(ctx, cfg, k.now()); err != nil {
		k.o.Log.Warn("config reload: budgets", zap.Error(err))
		return
	}
	k.reapply(nil, k.now())
}

// Stop stops the rollover timer; safe before Start and more than once.
func (k *Keeper) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.running, k.closed = false, true
	if k.timer != nil {
		k.timer.Stop()
	}
}

// spentText is "alice spent $10.02 of $10.00 in the 24h window to
// 2026-03-05T00:00:00Z".
func spentText(st budget.Status) string {
	who := st.Scope
	if who == budget.Swarm {
		who = "the swarm"
	}
	var what string
	if st.Limit.USD > 0 {
		what = FormatUSD(st.Spent.USD) + " of " + FormatUSD(st.Limit.USD)
	}
	if st.Limit.Tokens > 0 {
		if what != "" {
			what += ", "
		}
		what += TokensText(st.Spent.Tokens) + " of " + TokensText(st.Limit.Tokens) + " tokens"
	}
	return who + " spent " + what + " (" + strconv.FormatFloat(100*st.Fraction, 'f', 0, 64) + "%) in the " +
		config.FormatDuration(st.WindowEnd.Sub(st.WindowStart)) + " window to " + st.WindowEnd.UTC().Format(time.RFC3339)
}

// exhaustedDetail is the reason of a budget's pause and of the session it
// cancelled.
func exhaustedDetail(st budget.Status, agent string) string {
	d := "budget_exhausted: " + spentText(st)
	if st.Scope == budget.Swarm {
		d += " (" + agent + " is paused with every agent)"
	}
	return d
}

// FormatUSD is "$0", "$0.0033" under a dollar, "$12.34" above.
func FormatUSD(usd float64) string {
	if usd == 0 {
		return "$0"
	}
	if usd < 1 {
		return "$" + strconv.FormatFloat(usd, 'f', 4, 64)
	}
	return "$" + strconv.FormatFloat(usd, 'f', 2, 64)
}

// TokensText is FormatTokens with "0" for none.
func TokensText(n int64) string {
	if n <= 0 {
		return "0"
	}
	return FormatTokens(n)
}

// FormatTokens is a token count for a table: "950", "12.3k", "4.5M"; "-" for none.
func FormatTokens(n int64) string {
	switch {
	case n <= 0:
		return "-"
	case n < 1000:
		return strconv.FormatInt(n, 10)
	case n < 1_000_000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
}

// stateEvent is an event of agent s.Agent that leaves its state as it is.
func stateEvent(s runner.Snapshot, at time.Time, event, actor, reason string) store.EventRecord {
	st := s.State.Kind.String()
	sess := s.SessionID
	if s.SessionStarted.IsZero() {
		sess = "" // no session runs
	}
	return store.EventRecord{At: at, Agent: s.Agent, From: st, Event: event, To: st, Actor: actor, Reason: reason,
		SessionID: sess, Seq: s.Seq}
}
