// Package deploy holds no Go code: these tests check the deployment kit
// beside them (the systemd unit, the Prometheus alerts, the Grafana
// dashboard) against the tools that will read it and against the metrics
// swarmd really exports, so that a renamed metric or a typo in a rule fails
// here rather than in an operator's silent dashboard.
package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/hooks"
	"github.com/swarmd/swarmd/internal/metrics"
	"github.com/swarmd/swarmd/internal/runner"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	unitFile      = "swarmd.service"
	alertsFile    = "prometheus/alerts.yml"
	dashboardFile = "grafana/swarmd.json"
	// installedBinary is where the unit expects swarmd; verify needs a file
	// that exists, so the test's copy of the unit points at /bin/true.
	installedBinary = "/usr/local/bin/swarmd"
)

// ---- systemd unit

// TestSystemdUnitVerifies runs `systemd-analyze verify` on the unit. verify
// exits 0 on unknown keys and bad values alike (it only warns), so any
// output at all fails the test.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("!!! systemd-analyze NOT INSTALLED: deploy/swarmd.service IS NOT VERIFIED. Install the Debian package systemd.")
	}
	unit := readFile(t, unitFile)
	if n := strings.Count(unit, "ExecStart="+installedBinary+" "); n != 1 {
		t.Fatalf("want exactly one ExecStart=%s line, found %d", installedBinary, n)
	}
	verify := func(t *testing.T, text string) string {
		t.Helper()
		dir := t.TempDir()
		path := filepath.Join(dir, unitFile)
		text = strings.Replace(text, "ExecStart="+installedBinary+" ", "ExecStart=/bin/true ", 1)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(t.Context(), analyze, "verify", "--man=no", path)
		cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Sprintf("%s(%v)", out, err)
		}
		return string(out)
	}
	if out := verify(t, unit); strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify %s:\n%s", unitFile, out)
	}
	// The check itself: a misspelt key must be reported, or the empty output
	// above proves nothing.
	broken := strings.Replace(unit, "NoNewPrivileges=yes", "NoNewPrivilege=yes", 1)
	if out := verify(t, broken); !strings.Contains(out, "NoNewPrivilege") {
		t.Errorf("systemd-analyze verify did not report a misspelt key; output %q", out)
	}
}

// TestSystemdUnitContract checks the settings docs/operations.md and the daemon rely
// on, which verify cannot judge.
func TestSystemdUnitContract(t *testing.T) {
	u := parseUnit(t, readFile(t, unitFile))
	want := map[string]string{
		"Type":                     "notify",  // READY=1 once every agent is registered
		"NotifyAccess":             "main",    // sessions inherit NOTIFY_SOCKET
		"KillMode":                 "mixed",   // SIGTERM to swarmd alone: it drains its sessions itself
		"KillSignal":               "SIGTERM", // OperatorStop for every agent
		"Restart":                  "on-failure",
		"RestartPreventExitStatus": "2", // usage or config error: a restart cannot fix it
		"ExecReload":               "/bin/kill -HUP $MAINPID",
		"NoNewPrivileges":          "yes",
		"ProtectSystem":            "strict",
		"PrivateTmp":               "yes",
		"User":                     "swarmd",
	}
	for k, v := range want {
		if got := u.last("Service", k); got != v {
			t.Errorf("[Service] %s=%q, want %q", k, got, v)
		}
	}
	// isolation needs the cgroup subtree delegated, and writable.
	if u.last("Service", "Delegate") != "yes" || u.last("Service", "ProtectControlGroups") == "yes" {
		t.Errorf("Delegate=%q ProtectControlGroups=%q: isolation needs the subtree delegated and writable",
			u.last("Service", "Delegate"), u.last("Service", "ProtectControlGroups"))
	}
	if u.last("Service", "ReadWritePaths") == "" {
		t.Error("ProtectSystem=strict without ReadWritePaths: the agents could not write the repository")
	}
	argv := strings.Fields(u.last("Service", "ExecStart"))
	if len(argv) < 2 || argv[0] != installedBinary || argv[1] != "run" || !slices.Contains(argv, "--config") {
		t.Errorf("ExecStart %q: want %s run --config ...", argv, installedBinary)
	}

	// The watchdog is petted every WatchdogSec/2; a period under a few
	// seconds would restart a daemon busy with a slow disk.
	if wd := unitDuration(t, u.last("Service", "WatchdogSec")); wd < 10*time.Second {
		t.Errorf("WatchdogSec=%v: too short for a daemon on a busy machine", wd)
	}
	// swarmd gives up on a drain after the longest grace_period + 30s
	// (cmd/swarmd/run.go shutdownTimeout) and then archives the logs:
	// systemd's SIGKILL must come later than that.
	stop := unitDuration(t, u.last("Service", "TimeoutStopSec"))
	if drain := config.DefaultGracePeriod + 30*time.Second; stop <= drain+10*time.Second {
		t.Errorf("TimeoutStopSec=%v leaves no time to archive after a %v drain", stop, drain)
	}
}

type unit map[string]map[string][]string

func (u unit) last(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

func parseUnit(t *testing.T, text string) unit {
	t.Helper()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", unitFile, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// unitDuration parses the systemd time spans the unit uses ("90s", "5min").
func unitDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(strings.Replace(s, "min", "m", 1))
	if err != nil {
		t.Fatalf("time span %q: %v", s, err)
	}
	return d
}

// ---- what swarmd exports

// exported is one scrape of a metrics.Metrics fed with every kind of event:
// the sample names a query can select and the label values seen.
type exported struct {
	names  map[string]bool
	values map[string]map[string]bool // label -> values
}

// closedLabels are the labels whose values are a fixed set; a query that
// matches any other value of them is a typo.
var closedLabels = []string{"state", "outcome", "urgency", "event", "result"}

// promSynthetic are series Prometheus itself adds to every target.
var promSynthetic = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped"}

func scrapeExported(t *testing.T) exported {
	t.Helper()
	m := metrics.New(metrics.BuildInfo{Version: "test", Commit: "test", GoVersion: "go"})
	m.AddAgent(runner.Snapshot{Agent: "alice"})
	now := time.Now()
	m.OnTransition(runner.Transition{
		Agent: "alice", At: now, From: agent.State{Kind: agent.Running}, Event: agent.EvUrgentMessage(),
		To: agent.State{Kind: agent.Interrupting}, Effect: agent.SideEffect{Kind: agent.CancelSession},
		UrgentCommitted: now.Add(-time.Millisecond), Seq: 1, ConsecutiveErrors: 1, TotalErrors: 2,
	})
	for _, k := range []agent.OutcomeKind{agent.Success, agent.Error, agent.Timeout} {
		m.OnSessionEnd(runner.SessionRecord{Agent: "alice", Outcome: agent.ExitOutcome{Kind: k},
			Result: backend.Result{Started: now.Add(-time.Minute), Ended: now}})
	}
	m.OnSessionEnd(runner.SessionRecord{Agent: "alice", Outcome: agent.ExitOutcome{Kind: agent.Error}, Interrupted: true,
		Result: backend.Result{Started: now.Add(-time.Minute), Ended: now}})
	m.OnSessionEnd(runner.SessionRecord{Agent: "alice", Outcome: agent.ExitOutcome{Kind: agent.Error}, ForceStopped: true,
		Result: backend.Result{Started: now.Add(-time.Minute), Ended: now}})
	for _, ev := range []hooks.Event{hooks.AgentStart, hooks.SessionStart, hooks.SessionEnd, hooks.AgentStopped} {
		for _, r := range []string{hooks.OutcomeOK, hooks.OutcomeError, hooks.OutcomeTimeout, hooks.OutcomeBlocked} {
			m.HookRun(string(ev), r)
		}
	}
	m.MailSent(true, 1)
	m.MailSent(false, 1)
	m.SetPending(map[string]int{"alice": 1})
	m.AddTokens("alice", "input", 10)
	m.AddCost("alice", "claude", 0.01)
	m.AddToolCalls("alice", 1)
	m.StoreWriter(func() (int64, time.Duration, time.Duration) { return 1, time.Millisecond, 0 })
	m.Providers(func() []metrics.ProviderState {
		return []metrics.ProviderState{{Name: "claude/ab12cd34", Up: false, RetryAfter: time.Minute}}
	})

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	e := exported{names: map[string]bool{}, values: map[string]map[string]bool{}}
	for _, n := range promSynthetic {
		e.names[n] = true
	}
	for name, f := range fams {
		switch f.GetType().String() {
		case "HISTOGRAM":
			e.names[name+"_bucket"], e.names[name+"_sum"], e.names[name+"_count"] = true, true, true
		case "SUMMARY":
			e.names[name], e.names[name+"_sum"], e.names[name+"_count"] = true, true, true
		default:
			e.names[name] = true
		}
		for _, s := range f.GetMetric() {
			for _, lp := range s.GetLabel() {
				if e.values[lp.GetName()] == nil {
					e.values[lp.GetName()] = map[string]bool{}
				}
				e.values[lp.GetName()][lp.GetValue()] = true
			}
		}
	}
	// The metrics (docs/operations.md) every rule and panel is built on.
	for _, n := range []string{"swarmd_agent_state", "swarmd_sessions_total", "swarmd_interrupt_latency_seconds_bucket", "process_start_time_seconds"} {
		if !e.names[n] {
			t.Fatalf("the scrape has no %s; names: %v", n, e.names)
		}
	}
	for _, s := range agent.AllStates {
		if !e.values["state"][s.String()] {
			t.Fatalf("the scrape has no state=%q", s)
		}
	}
	return e
}

// check returns the problems of one PromQL expression: metric names swarmd
// does not export and values of closed labels it never uses.
func (e exported) check(expr string) []string {
	var problems []string
	names, matchers, err := promqlRefs(expr)
	if err != nil {
		return []string{err.Error()}
	}
	for _, n := range names {
		if !e.names[n] {
			problems = append(problems, fmt.Sprintf("unknown metric %s", n))
		}
	}
	for _, m := range matchers {
		if !slices.Contains(closedLabels, m.label) || strings.Contains(m.value, "$") {
			continue
		}
		vals := []string{m.value}
		if m.op == "=~" || m.op == "!~" {
			if !plainAlternation.MatchString(m.value) {
				continue // a real regex: nothing to compare
			}
			vals = strings.Split(m.value, "|")
		}
		for _, v := range vals {
			if !e.values[m.label][v] {
				problems = append(problems, fmt.Sprintf("%s=%q is not a value swarmd exports", m.label, v))
			}
		}
	}
	return problems
}

var plainAlternation = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)

// ---- a small PromQL reader

type matcher struct{ label, op, value string }

type token struct {
	kind byte // 'i' identifier, 's' string, 'n' number or duration, 'v' $variable, 'p' punctuation
	text string
}

// PromQL words that are not metric names when they stand alone.
var promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
	"group_left", "group_right", "atan2", "inf", "nan"}

// Aggregations may put their grouping before the parenthesis: sum by (x) (...).
var promqlAggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
	"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}

// promqlRefs returns the metric names an expression selects and its label
// matchers. It is a reader for checking names, not a validator: promtool,
// when installed, checks the syntax.
func promqlRefs(expr string) (names []string, matchers []matcher, err error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return nil, nil, err
	}
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		next := func(k int) token {
			if i+k < len(toks) {
				return toks[i+k]
			}
			return token{}
		}
		switch {
		case tk.kind == 'p' && tk.text == "{":
			j := i + 1
			for ; j < len(toks) && toks[j].text != "}"; j++ {
				if toks[j].kind == 'i' && j+2 < len(toks) && toks[j+1].kind == 'p' && toks[j+2].kind == 's' {
					m := matcher{toks[j].text, toks[j+1].text, toks[j+2].text}
					matchers = append(matchers, m)
					if m.label == "__name__" && m.op == "=" {
						names = append(names, m.value)
					}
					j += 2
				}
			}
			i = j
		case tk.kind == 'p' && tk.text == "[":
			for i < len(toks) && toks[i].text != "]" {
				i++
			}
		case tk.kind != 'i':
		case slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, tk.text):
			if next(1).text == "(" {
				for i < len(toks) && toks[i].text != ")" {
					i++
				}
			}
		case next(1).text == "(":
			// a function call
		case slices.Contains(promqlAggregations, tk.text) && (next(1).text == "by" || next(1).text == "without"):
		case slices.Contains(promqlKeywords, strings.ToLower(tk.text)):
		default:
			names = append(names, tk.text)
		}
	}
	return names, matchers, nil
}

func lexPromQL(s string) ([]token, error) {
	var toks []token
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment runs to the end of the line
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			var b strings.Builder
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && c != '`' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			toks = append(toks, token{'s', b.String()})
			i = j + 1
		case c == '$':
			j := i + 1
			for j < len(s) && (isIdent(s[j], false) || s[j] == '{' || s[j] == '}') {
				j++
			}
			toks = append(toks, token{'v', s[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.':
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || isIdent(s[j], true)) {
				j++
			}
			toks = append(toks, token{'n', s[i:j]})
			i = j
		case isIdent(c, true):
			j := i
			for j < len(s) && isIdent(s[j], false) {
				j++
			}
			toks = append(toks, token{'i', s[i:j]})
			i = j
		default:
			if i+1 < len(s) && slices.Contains([]string{"=~", "!~", "!=", "==", ">=", "<="}, s[i:i+2]) {
				toks = append(toks, token{'p', s[i : i+2]})
				i += 2
				continue
			}
			toks = append(toks, token{'p', string(c)})
			i++
		}
	}
	return toks, nil
}

// TestPromQLCheckCatchesMistakes is the check's own test: the mistakes it
// exists for are reported, and correct PromQL is not.
func TestPromQLCheckCatchesMistakes(t *testing.T) {
	e := scrapeExported(t)
	good := []string{
		`sum by (job, instance, agent) (increase(swarmd_sessions_total{outcome=~"error|timeout"}[30m])) > 0.5`,
		`histogram_quantile(0.99, sum by (le) (rate(swarmd_interrupt_latency_seconds_bucket{job=~"$job"}[$__rate_interval])))`,
		`swarmd_agent_total_errors and on (job, instance, agent) swarmd_agent_state{state="Stopped"} == 1 # a comment with bogus_name`,
		`sum(rate(swarmd_session_duration_seconds_sum[1h])) / sum(rate(swarmd_session_duration_seconds_count[1h] offset 5m))`,
		`topk(3, swarmd_mailbox_pending) or up{job="swarmd"} == 0 or absent(up) * 1e3`,
		`{__name__="swarmd_cost_usd_total"}`,
	}
	for _, expr := range good {
		if p := e.check(expr); len(p) > 0 {
			t.Errorf("%s: %v", expr, p)
		}
	}
	bad := map[string]string{
		`rate(swarmd_session_total[5m])`:                                 "unknown metric swarmd_session_total",
		`swarmd_agent_state{state="Runing"} == 1`:                        `state="Runing"`,
		`sum by (le) (rate(swarmd_interrupt_latency_seconds[5m]))`:       "unknown metric swarmd_interrupt_latency_seconds",
		`increase(swarmd_sessions_total{outcome=~"error|timeouts"}[1h])`: `outcome="timeouts"`,
		`swarmd_agent_state{state!="stopped"}`:                           `state="stopped"`,
		`sum without (agent) (swarmd_tokens) by (kind)`:                  "unknown metric swarmd_tokens",
		`{__name__="swarmd_costs"}`:                                      "unknown metric swarmd_costs",
	}
	for expr, want := range bad {
		if p := e.check(expr); !strings.Contains(strings.Join(p, "; "), want) {
			t.Errorf("%s: problems %v, want one containing %q", expr, p, want)
		}
	}
}

// ---- Prometheus alerts

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func TestAlertRules(t *testing.T) {
	data := readFile(t, alertsFile)
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(data))
	dec.KnownFields(true) // a misspelt key (anotations:) is an error, not an ignored field
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	e := scrapeExported(t)
	seen := map[string]bool{}
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || seen[r.Alert] {
				t.Errorf("rule %q: want a unique alert name", r.Alert)
			}
			seen[r.Alert] = true
			alerts = append(alerts, r.Alert)
			if _, err := model.ParseDuration(cmpOr(r.For, "0s")); err != nil {
				t.Errorf("%s: for: %v", r.Alert, err)
			}
			if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want a summary and a description", r.Alert)
			}
			for _, p := range e.check(r.Expr) {
				t.Errorf("%s: %s", r.Alert, p)
			}
		}
	}
	// The alerts issue 6 asks for.
	for _, a := range []string{"SwarmdDown", "SwarmdAgentStopped", "SwarmdSessionErrorRateHigh", "SwarmdAgentStalled", "SwarmdInterruptLatencyHigh"} {
		if !seen[a] {
			t.Errorf("no alert %s (have %v)", a, alerts)
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestAlertRulesPromtool checks the rules with promtool and runs them on
// recorded series: each alert fires when it should and not otherwise.
func TestAlertRulesPromtool(t *testing.T) {
	promtool := lookPromtool(t)
	if out, err := exec.CommandContext(t.Context(), promtool, "check", "rules", alertsFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	// promtool test rules compares annotations too; the tests are about
	// when alerts fire, so they run on a copy without them.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "alerts.yml"), withoutAnnotations(t, readFile(t, alertsFile)))
	writeFile(t, filepath.Join(dir, "alerts_test.yml"), alertTests)
	cmd := exec.CommandContext(t.Context(), promtool, "test", "rules", "alerts_test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// lookPromtool finds promtool, or skips loudly; with
// SWARMD_REQUIRE_PROMTOOL=1 (CI, which installs it) a missing promtool
// fails the test instead, so that a green run has checked the rules.
func lookPromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		msg := "!!! promtool NOT INSTALLED: the alert rules and the dashboard's queries are checked only for YAML, JSON " +
			"and metric names, not for PromQL syntax or firing behaviour. Install the Debian package prometheus."
		if os.Getenv("SWARMD_REQUIRE_PROMTOOL") == "1" {
			t.Fatal(msg + " (SWARMD_REQUIRE_PROMTOOL=1)")
		}
		t.Skip(msg)
	}
	return p
}

func withoutAnnotations(t *testing.T, data string) string {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(data), &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == "annotations" {
					n.Content = slices.Delete(n.Content, i, i+2)
					i -= 2
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&doc)
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// alertTests are promtool unit tests of alerts.yml. Series are per minute
// unless the test says otherwise; 'a+bxN' grows by b for N steps.
const alertTests = `
rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
  # The daemon stops answering after 2 minutes.
  - interval: 1m
    input_series:
      - series: 'up{job="swarmd", instance="h:9464"}'
        values: '1 1 0x10'
    alert_rule_test:
      - {eval_time: 3m, alertname: SwarmdDown, exp_alerts: []}
      - eval_time: 6m
        alertname: SwarmdDown
        exp_alerts: [{exp_labels: {severity: critical, job: swarmd, instance: "h:9464"}}]

  # alice stops for good after 4 minutes; bob stops for 5 minutes only (a
  # daemon shutting down, an operator's quick restart).
  - interval: 1m
    input_series:
      - {series: 'swarmd_agent_state{job="swarmd", instance="h:9464", agent="alice", state="Stopped"}', values: '0x4 1x40'}
      - {series: 'swarmd_agent_total_errors{job="swarmd", instance="h:9464", agent="alice"}', values: '0x4 20x40'}
      - {series: 'swarmd_agent_state{job="swarmd", instance="h:9464", agent="bob", state="Stopped"}', values: '0x4 1x5 0x35'}
      - {series: 'swarmd_agent_total_errors{job="swarmd", instance="h:9464", agent="bob"}', values: '0x45'}
    alert_rule_test:
      - {eval_time: 12m, alertname: SwarmdAgentStopped, exp_alerts: []}
      - eval_time: 25m
        alertname: SwarmdAgentStopped
        exp_alerts: [{exp_labels: {severity: warning, job: swarmd, instance: "h:9464", agent: alice}}]

  # Every 5 minutes: carol's sessions fail 4 times in 5; dave has failed
  # once, in his only session; erin succeeds; ivan is interrupted by urgent
  # mail 4 times in 5, which is not failing.
  - interval: 5m
    input_series:
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="carol", outcome="error"}', values: '0+4x12'}
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="carol", outcome="success"}', values: '0+1x12'}
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="dave", outcome="error"}', values: '0 1x12'}
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="erin", outcome="success"}', values: '0+1x12'}
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="erin", outcome="error"}', values: '0x12'}
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="ivan", outcome="interrupted"}', values: '0+4x12'}
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="ivan", outcome="success"}', values: '0+1x12'}
    alert_rule_test:
      - eval_time: 50m
        alertname: SwarmdSessionErrorRateHigh
        exp_alerts: [{exp_labels: {severity: warning, job: swarmd, instance: "h:9464", agent: carol}}]

  # Every 5 minutes over 5 hours of a daemon started at time 0: frank ends a
  # session every 45 minutes until 2h15m, then ends none; grace is Stopped;
  # heidi ends one every 45 minutes throughout; judy ends none from 2h15m
  # either, as she is idle (nothing to do) from then on, and kim is paused.
  - interval: 5m
    input_series:
      - {series: 'process_start_time_seconds{job="swarmd", instance="h:9464"}', values: '0x60'}
      - {series: 'swarmd_agent_state{job="swarmd", instance="h:9464", agent="frank", state="Stopped"}', values: '0x60'}
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="frank", outcome="success"}', values: '0x8 1x9 2x9 3x34'}
      - {series: 'swarmd_agent_state{job="swarmd", instance="h:9464", agent="grace", state="Stopped"}', values: '1x60'}
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="grace", outcome="success"}', values: '0x60'}
      - {series: 'swarmd_agent_state{job="swarmd", instance="h:9464", agent="heidi", state="Stopped"}', values: '0x60'}
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="heidi", outcome="success"}', values: '0x8 1x9 2x9 3x9 4x9 5x9 6x6'}
      - {series: 'swarmd_agent_state{job="swarmd", instance="h:9464", agent="judy", state="Stopped"}', values: '0x60'}
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="judy", outcome="success"}', values: '0x8 1x9 2x9 3x34'}
      - {series: 'swarmd_agent_idle{job="swarmd", instance="h:9464", agent="judy"}', values: '0x27 1x33'}
      - {series: 'swarmd_agent_paused{job="swarmd", instance="h:9464", agent="judy"}', values: '0x60'}
      - {series: 'swarmd_agent_state{job="swarmd", instance="h:9464", agent="kim", state="Stopped"}', values: '0x60'}
      - {series: 'swarmd_sessions_total{job="swarmd", instance="h:9464", agent="kim", outcome="success"}', values: '0x8 1x9 2x9 3x34'}
      - {series: 'swarmd_agent_idle{job="swarmd", instance="h:9464", agent="kim"}', values: '0x60'}
      - {series: 'swarmd_agent_paused{job="swarmd", instance="h:9464", agent="kim"}', values: '0x27 1x33'}
    alert_rule_test:
      - {eval_time: 110m, alertname: SwarmdAgentStalled, exp_alerts: []}
      - {eval_time: 4h, alertname: SwarmdAgentStalled, exp_alerts: []}
      - eval_time: 4h50m
        alertname: SwarmdAgentStalled
        exp_alerts: [{exp_labels: {severity: warning, job: swarmd, instance: "h:9464", agent: frank}}]

  # Urgent mail takes seconds to interrupt: every observation is over 2.5s.
  - interval: 1m
    input_series:
      - {series: 'swarmd_interrupt_latency_seconds_bucket{job="swarmd", instance="h:9464", le="0.001"}', values: '0x40'}
      - {series: 'swarmd_interrupt_latency_seconds_bucket{job="swarmd", instance="h:9464", le="1"}', values: '0x40'}
      - {series: 'swarmd_interrupt_latency_seconds_bucket{job="swarmd", instance="h:9464", le="2.5"}', values: '0x40'}
      - {series: 'swarmd_interrupt_latency_seconds_bucket{job="swarmd", instance="h:9464", le="+Inf"}', values: '0+2x40'}
    alert_rule_test:
      - eval_time: 35m
        alertname: SwarmdInterruptLatencyHigh
        exp_alerts: [{exp_labels: {severity: warning, job: swarmd, instance: "h:9464"}}]
`

// ---- Grafana dashboard

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// dashboardExprs returns every PromQL expression of the dashboard, named by
// where it is.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal([]byte(readFile(t, dashboardFile)), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q: want both", d.UID, d.Title)
	}
	exprs := map[string]string{}
	ids := map[int]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: bad gridPos %+v", p.Title, p.GridPos)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: want the ${datasource} variable as data source", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
				}
				exprs[fmt.Sprintf("panel %q %s", p.Title, tg.RefID)] = tg.Expr
			}
		}
	}
	walk(d.Panels)
	// Variable queries: label_values(selector, label) names a selector.
	for _, v := range d.Templating.List {
		q, _ := v.Query.(string)
		if v.Type != "query" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q: want label_values(selector, label)", v.Name, q)
			continue
		}
		exprs["variable "+v.Name] = m[1]
	}
	return exprs
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*[A-Za-z_][A-Za-z0-9_]*\)$`)

func TestDashboard(t *testing.T) {
	exprs := dashboardExprs(t)
	e := scrapeExported(t)
	used := map[string]bool{}
	for where, expr := range exprs {
		for _, p := range e.check(expr) {
			t.Errorf("%s: %s\n%s", where, p, expr)
		}
		names, _, _ := promqlRefs(expr)
		for _, n := range names {
			used[n] = true
		}
	}
	// What issue 6 asks the dashboard to show.
	for _, n := range []string{"swarmd_agent_state", "swarmd_sessions_total", "swarmd_interrupt_latency_seconds_bucket",
		"swarmd_mailbox_pending", "swarmd_hook_runs_total", "swarmd_tokens_total", "swarmd_cost_usd_total"} {
		if !used[n] {
			t.Errorf("no panel uses %s", n)
		}
	}
}

// TestDashboardPromtool checks the syntax of every dashboard query with
// promtool, as recording rules (Grafana's range variables replaced).
func TestDashboardPromtool(t *testing.T) {
	promtool := lookPromtool(t)
	exprs := dashboardExprs(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	r := strings.NewReplacer("$__rate_interval", "5m", "$__range", "6h", "$__interval", "1m")
	for i, k := range keys {
		q, err := json.Marshal(r.Replace(exprs[k])) // a JSON string is a YAML string
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "      - record: dashboard:expr%d # %s\n        expr: %s\n", i, strconv.Quote(k), q)
	}
	path := filepath.Join(t.TempDir(), "dashboard_rules.yml")
	writeFile(t, path, b.String())
	if out, err := exec.CommandContext(t.Context(), promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s\n%s", err, out, b.String())
	}
}

// ---- helpers

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
