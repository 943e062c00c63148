package config

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/swarmd/swarmd/internal/budget"
	"go.yaml.in/yaml/v3"
)

// Tools is an agent's tool policy: rules a tool call must match (allow,
// when not empty) and must not match (deny). A rule is a tool name as the
// backend reports it, * matching any characters, optionally with a
// specifier for its input in parentheses: Bash, mcp__github__*,
// Bash(git:*), Bash(npm run *). A nil list is not set (the defaults'
// applies); an empty one is set, to nothing.
type Tools struct {
	Allow []string
	Deny  []string
}

// Limits bound how many sessions run at once, so that the host never runs
// out before the kernel has to act (package admission); zero values are no
// limit.
type Limits struct {
	MaxRunning         int            // sessions of all agents at once
	PerProvider        map[string]int // sessions of one provider at once, by backend type
	MinAvailableMemory int            // bytes of available memory a session needs to start
	// SessionNice is how many nice values below the daemon the process
	// trees it starts run (sessions, hooks, merge gates); 0: at its own.
	SessionNice int
	// DaemonCPUs is how many threads run the daemon's own Go code at once
	// (GOMAXPROCS, which its sessions do not inherit); 0: Go's default.
	DaemonCPUs int
	// DaemonTimerSlack is how late the kernel may wake the daemon's
	// threads from a timed sleep (their timer slack, which its sessions do
	// not inherit); 0: the slack the daemon was started with.
	DaemonTimerSlack time.Duration
}

// maxDaemonCPUs is the Go runtime's own ceiling on GOMAXPROCS.
const maxDaemonCPUs = 1024

// maxDaemonTimerSlack bounds limits.daemon_timer_slack: the daemon's own
// timers (a 2 ms second look, a 20 ms journal flush) must stay close.
const maxDaemonTimerSlack = 10 * time.Millisecond

// limitsFields are the keys of limits.
func (d *decoder) limitsFields(l *Limits) []field {
	return []field{
		{"max_running", "Sessions of all agents running at once; the others wait for a slot, in order. 0: no limit.", d.intTo(&l.MaxRunning, 0, maxInt)},
		{"per_provider", "Sessions of one provider running at once, by backend type (claude, codex, gemini, command, scripted): {claude: 4}.", d.providerLimitsTo(&l.PerProvider)},
		{"min_available_memory", "Bytes of available memory (MemAvailable) the host must have for a session to start; below it sessions wait. 0: no minimum.",
			d.intTo(&l.MinAvailableMemory, 0, maxInt)},
		{"session_nice", "How many nice values below the daemon's priority sessions, hooks and merge gates run (0 to 19), so that the daemon's bookkeeping never waits for a CPU behind them; 19 on a host given to the swarm. 0: at the daemon's priority.",
			d.intTo(&l.SessionNice, 0, 19)},
		{"daemon_cpus", "How many CPUs the daemon's own Go code runs on at once (its GOMAXPROCS, which sessions, hooks and gates do not inherit; a GOMAXPROCS in the daemon's environment wins). 1 spends less of the daemon's CPU on a host the sessions keep busy, and delays urgent mail. 0: every CPU the host or the daemon's cgroup gives it.",
			d.intTo(&l.DaemonCPUs, 0, maxDaemonCPUs)},
		{"daemon_timer_slack", "How late the kernel may wake the daemon's threads from a timed sleep (their timer slack; sessions, hooks and gates keep the one the daemon was started with), at most 10ms. The Go runtime's threads sleep 20µs at a time while the daemon works; 5ms lets them sleep longer, which took 12–23% off the daemon's CPU and 40% off a lone session's context switches in the benchmarks. Applied when the daemon starts, by executing itself again (same pid). 0s: the slack the daemon was started with.",
			d.slackTo(&l.DaemonTimerSlack)},
	}
}

// slackTo reads limits.daemon_timer_slack: a duration from 0 to
// maxDaemonTimerSlack.
func (d *decoder) slackTo(dst *time.Duration) value {
	dur := d.durTo(dst, true)
	parse := dur.set
	dur.set = func(path string, v *yaml.Node) bool {
		before := *dst
		if !parse(path, v) {
			return false
		}
		if *dst > maxDaemonTimerSlack {
			d.errorf(v.Line, path, "at most %s, got %s", FormatDuration(maxDaemonTimerSlack), v.Value)
			*dst = before
			return false
		}
		return true
	}
	return dur
}

// providerLimitsTo reads limits.per_provider: backend type -> a positive count.
func (d *decoder) providerLimitsTo(dst *map[string]int) value {
	sch := &schemaNode{Type: []string{"object"}, Values: &schemaNode{Type: []string{"integer"}, Minimum: intPtr(1)}}
	return value{func(path string, v *yaml.Node) bool {
		out, before := map[string]int{}, len(d.errs)
		for _, e := range d.entries(v, path, 0) {
			p := join(path, e.k.Value)
			if !slices.Contains(backendTypes, e.k.Value) {
				d.errorf(e.k.Line, p, "%q is not a backend type (want one of %s)", e.k.Value, strings.Join(backendTypes, ", "))
				continue
			}
			var n int
			if e.v.Kind != yaml.ScalarNode || e.v.ShortTag() != "!!int" || e.v.Decode(&n) != nil || n < 1 {
				d.errorf(e.v.Line, p, "want a positive integer, got %s", describe(e.v))
				continue
			}
			out[e.k.Value] = n
		}
		*dst = out
		return len(d.errs) == before
	}, sch}
}

// Budget is a spending limit per window: USD, tokens (input and output),
// or both; zero is no limit of that kind.
type Budget struct {
	USD    float64
	Tokens int
	Window time.Duration
	// has records the keys the file gave, so that an agent's budget
	// overrides the defaults' key by key.
	has budgetKeys
}

type budgetKeys uint8

const (
	hasUSD budgetKeys = 1 << iota
	hasTokens
	hasWindow
)

// Limited reports whether the budget limits anything.
func (b Budget) Limited() bool { return b.USD > 0 || b.Tokens > 0 }

// Price is a model's price in USD per million tokens. Cache reads and
// writes cost the input price unless they have their own.
type Price struct {
	Input, Output         float64
	CacheRead, CacheWrite float64
}

// Providers tunes the health kept per provider and credentials: the
// circuit breaker that server errors open waits Backoff, doubling at each
// failed probe up to MaxBackoff.
type Providers struct {
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// Defaults of the limits' keys (docs/configuration.md).
const (
	DefaultBudgetWindow       = budget.DefaultWindow // 24h, the budget's
	DefaultProviderBackoff    = 2 * time.Second
	DefaultProviderMaxBackoff = 5 * time.Minute
	DefaultDaemonTimerSlack   = 5 * time.Millisecond
	minBudgetWindow           = time.Minute
)

// PriceFor is the price of model: its own entry, else the entry of the
// backend's configured model, else the "*" entry; ok is false when none
// applies, and named is false when only "*" does.
func (c *Config) PriceFor(model, configured string) (p Price, named, ok bool) {
	for _, k := range []string{model, configured} {
		if p, ok := c.Prices[k]; ok && k != "" {
			return p, true, true
		}
	}
	p, ok = c.Prices["*"]
	return p, false, ok
}

// Cost is the USD cost of tokens at p.
func (p Price) Cost(input, output, cacheRead, cacheWrite int64) float64 {
	cr, cw := p.CacheRead, p.CacheWrite
	if cr == 0 {
		cr = p.Input
	}
	if cw == 0 {
		cw = p.Input
	}
	return (float64(input)*p.Input + float64(output)*p.Output + float64(cacheRead)*cr + float64(cacheWrite)*cw) / 1e6
}

func (d *decoder) toolsFields(t *Tools) []field {
	return []field{
		{"allow", "Tool rules a call must match (none: every tool); the backend's tool names, * for any characters, NAME(SPEC) to match its input.",
			d.toolRulesTo(&t.Allow)},
		{"deny", "Tool rules a call must not match; deny wins over allow.", d.toolRulesTo(&t.Deny)},
	}
}

// toolRulesTo reads a list of tool rules: NAME or NAME(SPEC).
func (d *decoder) toolRulesTo(dst *[]string) value {
	v := d.strListTo(dst, true)
	check := v.set
	v.set = func(path string, n *yaml.Node) bool {
		if !check(path, n) {
			return false
		}
		ok := true
		for i, r := range *dst {
			if problem := toolRuleProblem(r); problem != "" {
				d.errorf(n.Content[i].Line, index(path, i), "%q %s", r, problem)
				ok = false
			}
		}
		return ok
	}
	return v
}

func toolRuleProblem(r string) string {
	open := strings.IndexByte(r, '(')
	switch {
	case strings.TrimSpace(r) != r:
		return "has spaces around it (write the tool name alone)"
	case open < 0 && strings.ContainsRune(r, ')'):
		return "has a ')' without a '(' (write NAME or NAME(SPEC))"
	case open == 0:
		return "has no tool name before '(' (write NAME(SPEC), such as Bash(git:*))"
	case open > 0 && !strings.HasSuffix(r, ")"):
		return "does not end with ')' (write NAME(SPEC), such as Bash(git:*))"
	case strings.ContainsAny(r[:max(open, 0)], " \t") || open < 0 && strings.ContainsAny(r, " \t"):
		return "has a space in the tool name (a specifier goes in parentheses: Bash(git status))"
	}
	return ""
}

// checkTools refuses a rule that is both allowed and denied: one of the
// two is a mistake.
func (d *decoder) checkTools(t Tools, line int, path string) bool {
	for _, r := range t.Allow {
		for _, x := range t.Deny {
			if r == x {
				d.errorf(line, path, "%q is in both allow and deny (deny wins; remove it from one)", r)
				return false
			}
		}
	}
	return true
}

func (d *decoder) budgetFields(b *Budget, swarm bool) []field {
	what := "the agent"
	if swarm {
		what = "all agents together"
	}
	return []field{
		{"usd", "US dollars " + what + " may spend per window (0: no limit).", d.floatTo(&b.USD, &b.has, hasUSD)},
		{"tokens", "Input and output tokens " + what + " may use per window (0: no limit).", d.bitInt(&b.Tokens, &b.has, hasTokens)},
		{"window", "The budget's window, aligned to the Unix epoch (24h: midnight to midnight UTC).", d.bitDur(&b.Window, &b.has, hasWindow)},
	}
}

// floatTo reads a non-negative finite number and marks bit in has.
func (d *decoder) floatTo(dst *float64, has *budgetKeys, bit budgetKeys) value {
	sch := &schemaNode{Type: []string{"number"}, Minimum: intPtr(0)}
	return value{func(path string, v *yaml.Node) bool {
		f, err := strconv.ParseFloat(v.Value, 64)
		if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float") || err != nil {
			d.errorf(v.Line, path, "want a number, got %s", describe(v))
			return false
		}
		if f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			d.errorf(v.Line, path, "must be a number, 0 or more, got %s", v.Value)
			return false
		}
		*dst = f
		if has != nil {
			*has |= bit
		}
		return true
	}, sch}
}

func (d *decoder) bitInt(dst *int, has *budgetKeys, bit budgetKeys) value {
	v := d.intTo(dst, 0, maxInt)
	set := v.set
	v.set = func(path string, n *yaml.Node) bool {
		ok := set(path, n)
		if ok {
			*has |= bit
		}
		return ok
	}
	return v
}

func (d *decoder) bitDur(dst *time.Duration, has *budgetKeys, bit budgetKeys) value {
	v := d.durTo(dst, false)
	v.schema.Default = FormatDuration(DefaultBudgetWindow)
	set := v.set
	v.set = func(path string, n *yaml.Node) bool {
		if !set(path, n) {
			return false
		}
		if *dst < minBudgetWindow {
			d.errorf(n.Line, path, "must be at least %s, got %s", FormatDuration(minBudgetWindow), n.Value)
			return false
		}
		*has |= bit
		return true
	}
	return v
}

// mergeLimits overlays an agent's tools and budget on the defaults': a
// list or a budget key the agent gives replaces the defaults' one.
func mergeLimits(out *AgentSettings, over AgentSettings) {
	if over.Tools.Allow != nil {
		out.Tools.Allow = over.Tools.Allow
	}
	if over.Tools.Deny != nil {
		out.Tools.Deny = over.Tools.Deny
	}
	b := over.Budget
	if b.has&hasUSD != 0 {
		out.Budget.USD = b.USD
	}
	if b.has&hasTokens != 0 {
		out.Budget.Tokens = b.Tokens
	}
	if b.has&hasWindow != 0 {
		out.Budget.Window = b.Window
	}
	out.Budget.has |= b.has
}

// pricesTo reads prices: model name -> price.
func (d *decoder) pricesTo(dst *map[string]Price) value {
	entry := objectSchema(d.priceFields(&Price{}))
	entry.Type = []string{"object"}
	entry.Required = []string{"input", "output"}
	sch := &schemaNode{Type: []string{"object"}, Values: entry, KeyRE: nonBlank}
	return value{func(path string, v *yaml.Node) bool {
		out, before := map[string]Price{}, len(d.errs)
		for _, e := range d.entries(v, path, 0) {
			val, ok := d.resolve(e.v)
			p := join(path, e.k.Value)
			if !ok {
				continue
			}
			if strings.TrimSpace(e.k.Value) == "" {
				d.errorf(e.k.Line, p, "a model name must not be empty")
				continue
			}
			if val.Kind != yaml.MappingNode {
				d.errorf(val.Line, p, "want a mapping with input and output (USD per million tokens), got %s", describe(val))
				continue
			}
			var pr Price
			set := d.mapping(val, p, d.priceFields(&pr))
			for _, k := range []string{"input", "output"} {
				if !set.present(k) {
					d.errorf(e.k.Line, join(p, k), "is required (USD per million tokens)")
				}
			}
			out[e.k.Value] = pr
		}
		*dst = out
		return len(d.errs) == before
	}, sch}
}

func (d *decoder) priceFields(p *Price) []field {
	return []field{
		{"input", "USD per million input tokens.", d.floatTo(&p.Input, nil, 0)},
		{"output", "USD per million output tokens.", d.floatTo(&p.Output, nil, 0)},
		{"cache_read", "USD per million tokens read from the prompt cache (default: the input price).", d.floatTo(&p.CacheRead, nil, 0)},
		{"cache_write", "USD per million tokens written to the prompt cache (default: the input price).", d.floatTo(&p.CacheWrite, nil, 0)},
	}
}

func (d *decoder) providersFields(p *Providers) []field {
	return []field{
		{"backoff", "How long a provider's agents wait after a server error before one probe session tests it.", d.durTo(&p.Backoff, false)},
		{"max_backoff", "The longest wait: each failed probe doubles it up to this.", d.durTo(&p.MaxBackoff, false)},
	}
}

// finishLimits checks what the limits' keys say together. agents are the
// raw forms of cfg.Agents, in order.
func (d *decoder) finishLimits(cfg *Config, top keySet, agents []*rawAgent) {
	if cfg.Providers.MaxBackoff < cfg.Providers.Backoff {
		d.errorf(top.at("providers"), "providers.max_backoff", "%s is shorter than providers.backoff (%s)",
			FormatDuration(cfg.Providers.MaxBackoff), FormatDuration(cfg.Providers.Backoff))
	}
	if !d.checkTools(cfg.Defaults.Tools, top.at("defaults"), "defaults.tools") {
		return
	}
	for i, a := range cfg.Agents {
		if i < len(agents) {
			d.checkTools(a.Tools, agents[i].set.at("tools"), join(agents[i].path, "tools"))
		}
	}
}
