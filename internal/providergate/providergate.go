// Package providergate shares each provider's health among the agents that
// use it: one provider.Health per provider and credentials (Key), put
// before every session start as a runner.Gate, fed by what the sessions
// show (their ends, and their streams as they run), each change of state
// written to the event log. The pure health rules are package provider's;
// this package holds them, waits on them and reports them.
package providergate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/metrics"
	"github.com/swarmd/swarmd/internal/provider"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
)

// Event names of provider health in the event log: one per change of a
// provider's state, its Agent column the provider's name.
var providerEvents = map[provider.State]string{
	provider.Healthy:     "ProviderHealthy",
	provider.RateLimited: "ProviderRateLimited",
	provider.Down:        "ProviderDown",
	provider.Probing:     "ProviderProbing",
}

// credentialEnv are the variables that tell one provider account from
// another, per backend type: the API key or token (keys), and the endpoint
// and where the CLI keeps its own settings (others). HOME counts only when
// no key is set: the CLI then uses a login stored under it.
var credentialEnv = map[string]struct{ keys, others []string }{
	config.TypeClaude: {[]string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"},
		[]string{"ANTHROPIC_BASE_URL", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "ANTHROPIC_VERTEX_PROJECT_ID", "CLAUDE_CONFIG_DIR"}},
	config.TypeCodex: {[]string{"OPENAI_API_KEY", "CODEX_HOME"}, []string{"OPENAI_BASE_URL"}},
	config.TypeGemini: {[]string{"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS"},
		[]string{"GOOGLE_GEMINI_BASE_URL", "GOOGLE_CLOUD_PROJECT", "GOOGLE_GENAI_USE_VERTEXAI"}},
}

// Key names the provider and credentials an agent's sessions use:
// the backend type and a hash of the credential variables of its sessions'
// environment (the daemon's, the backend's env, the agent's env), so that
// agents with one key share a health and the name reveals no secret. ""
// for backends without a provider (command, scripted).
func Key(b config.Backend, a config.Agent, environ []string) string {
	vars, ok := credentialEnv[b.Type]
	if !ok {
		return ""
	}
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for _, layer := range []map[string]string{b.Env, a.Env} {
		for k, v := range layer {
			env[k] = v
		}
	}
	var id strings.Builder
	for _, k := range vars.keys {
		if v := env[k]; v != "" {
			id.WriteString(k + "=" + v + "\n")
		}
	}
	if id.Len() == 0 {
		id.WriteString("HOME=" + env["HOME"] + "\n")
	}
	for _, k := range vars.others {
		if v := env[k]; v != "" {
			id.WriteString(k + "=" + v + "\n")
		}
	}
	sum := sha256.Sum256([]byte(id.String()))
	return b.Type + "/" + hex.EncodeToString(sum[:4])
}

// Journal is where the gates write each change of a provider's state
// (*store.Journal).
type Journal interface {
	Event(store.EventRecord)
}

// Gates keeps one provider.Health per provider and credentials,
// shared by the runners of its agents (runner.Gate).
type Gates struct {
	log     *zap.Logger
	journal Journal

	mu      sync.Mutex
	backoff provider.Backoff
	byKey   map[string]*Gate
	byAgent map[string]*Gate    // the agent's current provider
	last    map[string]liveSeen // by agent: what its session's stream already reported
}

// liveSeen is what a running session's stream told a provider already, so
// that each piece of trouble is reported once, and whether the provider has
// answered it since its trouble (its tokens grew).
type liveSeen struct {
	session string
	until   time.Time
	err     string
	// tokens are the session's tokens as last reported; errTokens what
	// they were when it first showed an error.
	tokens, errTokens int64
	released          bool // Stuck returned it
}

// answered: the provider has answered the session since its error.
func (s liveSeen) answered() bool { return s.tokens > s.errTokens }

func New(cfg *config.Config, j Journal, log *zap.Logger) *Gates {
	return &Gates{log: log, journal: j, byKey: map[string]*Gate{}, byAgent: map[string]*Gate{},
		last: map[string]liveSeen{}, backoff: provider.Backoff{Base: cfg.Providers.Backoff, Max: cfg.Providers.MaxBackoff}}
}

// ForAgent is the gate of agent's provider key (nil: none), made on first
// use, and makes it agent's provider: the one its status, its sessions'
// streams and the metrics go by. Call it when the agent's runner takes
// the gate (starts, or a reload's settings are applied); ForKey gets a
// gate for a runner or settings that may yet be dropped.
func (g *Gates) ForAgent(agent, key string) runner.Gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	if key == "" {
		delete(g.byAgent, agent)
		return nil
	}
	pg := g.gate(key)
	g.byAgent[agent] = pg
	return pg
}

// ForKey is the gate of provider key (nil: none), made on first use,
// without making it any agent's provider: a reload builds its settings
// with it before it knows whether it will apply them.
func (g *Gates) ForKey(key string) runner.Gate {
	if key == "" {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gate(key)
}

// gate is key's gate, made on first use; g.mu held. A gate no agent uses
// any more is kept, with its health: the provider is the same provider
// if an agent takes its key again, and a runner may still hold it until
// its new settings apply.
func (g *Gates) gate(key string) *Gate {
	pg := g.byKey[key]
	if pg == nil {
		pg = &Gate{g: g, key: key, h: provider.New(g.backoff), wake: make(chan struct{})}
		g.byKey[key] = pg
	}
	return pg
}

// Remove forgets agent (a reload removed it and its runner has stopped):
// its provider, unless another agent uses it, is no longer reported.
func (g *Gates) Remove(agent string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.byAgent, agent)
	delete(g.last, agent)
}

// States are the providers' health for the metrics, by name: those some
// agent uses now. A provider every agent has left (removed by a reload, or
// given other credentials) would otherwise keep its last state in the
// metrics for as long as the daemon runs, and a down one alert forever.
func (g *Gates) States() []metrics.ProviderState {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	used := make(map[*Gate]bool, len(g.byKey))
	for _, pg := range g.byAgent {
		used[pg] = true
	}
	out := make([]metrics.ProviderState, 0, len(used))
	for key, pg := range g.byKey {
		if !used[pg] {
			continue
		}
		st := metrics.ProviderState{Name: key, Up: pg.h.State() == provider.Healthy}
		if u := pg.h.Until(); u.After(now) {
			st.RetryAfter = u.Sub(now)
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Condition is what agent's provider's state means for it, for status:
// "provider down since 12:00:05Z (API error 529)", "rate limited until
// 12:01:00Z (rate limited (429))"; "" while the provider takes sessions.
// Every agent of the provider shows it, the ones whose session still runs
// too.
func (g *Gates) Condition(agent string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	pg := g.byAgent[agent]
	if pg == nil {
		return ""
	}
	switch pg.h.State() {
	case provider.RateLimited:
		return "rate limited until " + clock(pg.h.Until()) + " (" + pg.cause + ")"
	case provider.Down, provider.Probing:
		s := "provider down since " + clock(pg.outSince) + " (" + pg.cause + ")"
		if p := pg.h.Prober(); p != "" {
			s += "; " + p + "'s session probes it"
		} else if u := pg.h.Until(); !u.IsZero() {
			s += "; next probe at " + clock(u)
		}
		return s
	}
	return ""
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05Z") }

// Outage is a provider that has taken no session for a while.
type Outage struct {
	Key, Cause string
	Since      time.Time
	Agents     []string
}

// Overdue returns, once per outage, each provider that some agent uses
// and that has taken no session for at least after by now: the operator
// is told of it.
func (g *Gates) Overdue(now time.Time, after time.Duration) []Outage {
	g.mu.Lock()
	var out []Outage
	var gates []*Gate
	used := make(map[*Gate]bool, len(g.byKey))
	for _, pg := range g.byAgent {
		used[pg] = true
	}
	for _, pg := range g.byKey {
		if used[pg] && !pg.outSince.IsZero() && !pg.told && now.Sub(pg.outSince) >= after {
			pg.told = true
			out = append(out, Outage{Key: pg.key, Cause: pg.cause, Since: pg.outSince})
			gates = append(gates, pg)
		}
	}
	g.mu.Unlock()
	for i, pg := range gates {
		out[i].Agents = pg.agents()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// SetBackoff applies a reloaded providers section.
func (g *Gates) SetBackoff(cfg *config.Config) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.backoff = provider.Backoff{Base: cfg.Providers.Backoff, Max: cfg.Providers.MaxBackoff}
	for _, pg := range g.byKey {
		pg.h.SetBackoff(g.backoff)
	}
}

// Progress passes a running session's trouble with its provider on at
// once, so that the other agents hold while the CLI is still retrying; and
// the first answer a probe session gets (tokens in its stream, after its
// CLI's own retries too), so that the breaker closes and the others start
// then, not at the probe's end.
func (g *Gates) Progress(rec runner.ProgressRecord) {
	p := rec.Progress
	limited := p.RateLimitedUntil.After(time.Now())
	g.mu.Lock()
	pg := g.byAgent[rec.Agent]
	seen := g.last[rec.Agent]
	if seen.session != rec.SessionID {
		seen = liveSeen{session: rec.SessionID}
	}
	seen.tokens = p.Usage.Tokens()
	var r provider.Report
	switch {
	case limited && p.RateLimitedUntil.After(seen.until):
		seen.until = p.RateLimitedUntil
		r = provider.Report{Outcome: provider.RateLimit, Reset: p.RateLimitedUntil, Cause: "rate limited (429)", Agent: rec.Agent}
	case p.ProviderError != "" && seen.err == "":
		seen.err, seen.errTokens = p.ProviderError, seen.tokens
		r = provider.Report{Outcome: provider.Failure, Cause: p.ProviderError, Agent: rec.Agent}
	}
	// A session that showed no trouble is not kept: nothing is stuck, and
	// a running session's every record would otherwise write the map.
	if seen.err != "" || !seen.until.IsZero() {
		g.last[rec.Agent] = seen
	}
	g.mu.Unlock()
	switch {
	case pg == nil:
	case r.Outcome != provider.Neutral:
		pg.report(r)
	case !limited && seen.tokens > 0 && (seen.err == "" || seen.answered()):
		g.probeAnswered(rec.Agent)
	}
}

// Stuck returns, once per session, the agents whose running session keeps
// retrying against a provider whose breaker has been open (down, or
// probed by another agent) for at least after by now: the session showed
// a provider error and has had no answer since. Ending such a session
// loses nothing the provider would give it, and leaves one probe at a time
// to find the provider back: the others then start at once, instead of
// whenever their CLI's own backoff (up to half a minute) retries next.
func (g *Gates) Stuck(now time.Time, after time.Duration) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for agent, pg := range g.byAgent {
		seen := g.last[agent]
		st := pg.h.State()
		if seen.err == "" || seen.released || seen.answered() || pg.outSince.IsZero() || now.Sub(pg.outSince) < after ||
			(st != provider.Down && st != provider.Probing) || pg.h.Prober() == agent {
			continue
		}
		seen.released = true
		g.last[agent] = seen
		out = append(out, agent)
	}
	sort.Strings(out)
	return out
}

// probeAnswered closes agent's provider's breaker when agent runs its probe
// and the provider has answered it.
func (g *Gates) probeAnswered(agent string) {
	g.mu.Lock()
	pg := g.byAgent[agent]
	probing := pg != nil && pg.h.Prober() == agent
	g.mu.Unlock()
	if probing {
		pg.report(provider.Report{Outcome: provider.OK, Probe: true, Agent: agent})
	}
}

// Gate is one provider's health as a runner.Gate.
type Gate struct {
	g   *Gates
	key string
	h   *provider.Health // guarded by g.mu
	// wake is closed (and replaced) at every report: waiters look again.
	wake chan struct{}
	// outSince is when the provider stopped taking sessions (zero while it
	// takes them), told whether the operator was told of this outage;
	// guarded by g.mu.
	outSince time.Time
	told     bool
	cause    string
}

var _ runner.Gate = (*Gate)(nil)

// Acquire waits until the provider admits agent: a timer to the end of a
// hold, or the next report (a probe's end), never a poll.
func (pg *Gate) Acquire(ctx context.Context, agent string, waiting func(string)) (runner.Ticket, error) {
	for {
		pg.g.mu.Lock()
		adm, ch := pg.h.Admit(agent, time.Now())
		wake := pg.wake
		pg.g.mu.Unlock()
		pg.emit(ch)
		if adm.OK {
			return &Ticket{pg: pg, agent: agent, probe: adm.Probe}, nil
		}
		waiting(adm.Reason)
		var t *time.Timer
		var tc <-chan time.Time
		if !adm.Until.IsZero() {
			t = time.NewTimer(time.Until(adm.Until))
			tc = t.C
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-tc:
		}
		if t != nil {
			t.Stop()
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

func (pg *Gate) report(r provider.Report) {
	pg.g.mu.Lock()
	ch := pg.h.Report(r, time.Now())
	close(pg.wake)
	pg.wake = make(chan struct{})
	pg.g.mu.Unlock()
	pg.emit(ch)
}

// emit records a change of the provider's state: one event and one log
// line, whichever agent's session showed it.
func (pg *Gate) emit(c *provider.Change) {
	if c == nil {
		return
	}
	pg.g.mu.Lock()
	switch {
	case c.To == provider.Healthy:
		pg.outSince, pg.told = time.Time{}, false
	case pg.outSince.IsZero():
		pg.outSince = time.Now()
	}
	if c.Cause != "" && c.To != provider.Healthy {
		pg.cause = c.Cause
	}
	pg.g.mu.Unlock()
	agents := pg.agents()
	reason := providerReason(c, agents)
	pg.g.log.Info("provider "+c.To.String(), zap.String("provider", pg.key), zap.String("from", c.From.String()),
		zap.String("reason", reason), zap.Strings("agents", agents))
	pg.g.journal.Event(store.EventRecord{At: time.Now(), Agent: pg.key, From: c.From.String(), Event: providerEvents[c.To],
		To: c.To.String(), Actor: "swarmd", Reason: reason})
}

// agents are the agents that use the provider now.
func (pg *Gate) agents() []string {
	pg.g.mu.Lock()
	defer pg.g.mu.Unlock()
	var out []string
	for a, x := range pg.g.byAgent {
		if x == pg {
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out
}

func providerReason(c *provider.Change, agents []string) string {
	who := strings.Join(agents, ", ")
	switch c.To {
	case provider.RateLimited:
		return c.Cause + " (seen by " + c.Agent + "): every agent of this provider (" + who + ") waits until " +
			c.Until.UTC().Format(time.RFC3339)
	case provider.Down:
		return c.Cause + " (seen by " + c.Agent + "): its agents (" + who + ") wait until " +
			c.Until.UTC().Format(time.RFC3339) + ", then one probe session tests it"
	case provider.Probing:
		return c.Agent + "'s session tests the provider; the others wait for it"
	}
	return c.Cause + " (" + c.Agent + "): its agents (" + who + ") go on"
}

// Ticket is a granted start; Done reports what the session showed.
type Ticket struct {
	pg    *Gate
	agent string
	probe bool
}

// Probe reports whether the session tests a provider that was down.
func (t *Ticket) Probe() bool { return t.probe }

func (t *Ticket) Done(res backend.Result, ran bool) {
	// What the session's stream showed is of no use once it has ended
	// (Stuck looks at running sessions only).
	t.pg.g.mu.Lock()
	delete(t.pg.g.last, t.agent)
	t.pg.g.mu.Unlock()
	r := outcome(res, ran)
	r.Agent, r.Probe = t.agent, t.probe
	if r.Outcome == provider.Neutral && !t.probe {
		return
	}
	t.pg.report(r)
}

// outcome is what a session showed of its provider: an answer, a
// rate limit, a failure, or nothing (it never started, stopped before an
// answer, or failed for a reason of its own, such as an invalid key).
func outcome(res backend.Result, ran bool) provider.Report {
	switch {
	case !ran:
		return provider.Report{}
	case res.Outcome == backend.OutcomeSuccess:
		return provider.Report{Outcome: provider.OK}
	case res.RateLimited:
		return provider.Report{Outcome: provider.RateLimit, Reset: res.RetryAfter, Cause: "rate limited (429)"}
	case res.ProviderError != "":
		return provider.Report{Outcome: provider.Failure, Cause: res.ProviderError}
	case res.Fatal == "" && res.Turns > 0:
		return provider.Report{Outcome: provider.OK}
	}
	return provider.Report{}
}

// AgentKey names the provider of an agent's sessions.
func AgentKey(cfg *config.Config, a config.Agent) string {
	b, ok := cfg.Backends[a.Backend]
	if !ok {
		return ""
	}
	return Key(b, a, os.Environ())
}
