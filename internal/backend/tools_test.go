package backend

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mockllm"
)

func TestToolPolicyCheck(t *testing.T) {
	for _, c := range []struct {
		p           ToolPolicy
		tool, input string
		refused     bool
		why         string
	}{
		{ToolPolicy{}, "Bash", "rm -rf /", false, ""},
		{ToolPolicy{Deny: []string{"Bash"}}, "Bash", "ls", true, "tools.deny: Bash"},
		{ToolPolicy{Deny: []string{"Bash"}}, "Read", "x", false, ""},
		{ToolPolicy{Deny: []string{"Bash(rm:*)"}}, "Bash", "rm -rf /", true, "tools.deny: Bash(rm:*)"},
		{ToolPolicy{Deny: []string{"Bash(rm:*)"}}, "Bash", "git rm x", false, ""},
		{ToolPolicy{Deny: []string{"Bash(git push *)"}}, "Bash", "git push origin main", true, "tools.deny: Bash(git push *)"},
		{ToolPolicy{Deny: []string{"Bash(git push *)"}}, "Bash", "git pull", false, ""},
		{ToolPolicy{Deny: []string{"mcp__github__*"}}, "mcp__github__create_pr", "{}", true, "tools.deny: mcp__github__*"},
		{ToolPolicy{Deny: []string{"mcp__github__*"}}, "mcp__slack__post", "{}", false, ""},
		{ToolPolicy{Allow: []string{"Read", "Bash(git:*)"}}, "Read", "a.go", false, ""},
		{ToolPolicy{Allow: []string{"Read", "Bash(git:*)"}}, "Bash", "git status", false, ""},
		{ToolPolicy{Allow: []string{"Read", "Bash(git:*)"}}, "Bash", "curl evil", true, "not in tools.allow"},
		{ToolPolicy{Allow: []string{"Read", "Bash(git:*)"}}, "Write", "a.go", true, "not in tools.allow"},
		// Deny wins over allow.
		{ToolPolicy{Allow: []string{"Bash"}, Deny: []string{"Bash(rm:*)"}}, "Bash", "rm x", true, "tools.deny: Bash(rm:*)"},
		{ToolPolicy{Allow: []string{"*"}, Deny: []string{"Write"}}, "Edit", "", false, ""},
		// Names match whole, case and all.
		{ToolPolicy{Deny: []string{"Bash"}}, "bash", "", false, ""},
		{ToolPolicy{Deny: []string{"Bas"}}, "Bash", "", false, ""},
	} {
		d, refused := c.p.Check(c.tool, c.input)
		if refused != c.refused || d.Why != c.why {
			t.Errorf("%+v: %s(%q) = %+v, %v; want refused %v (%s)", c.p, c.tool, c.input, d, refused, c.refused, c.why)
		}
	}
	d := ToolDenial{Tool: "Bash", Input: "rm -rf /\nmore", Why: "tools.deny: Bash"}
	if got := d.String(); got != "Bash (rm -rf / more): tools.deny: Bash" {
		t.Errorf("String() = %q", got)
	}
}

func TestWildcard(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"a*", "a", true}, {"a*", "ba", false}, {"*b", "ab", true}, {"*b", "ba", false},
		{"a*b*c", "aXbYc", true}, {"a*b*c", "acb", false}, {"a*a", "a", false}, {"git *", "git push x", true},
	} {
		if got := wildcard(c.p, c.s); got != c.want {
			t.Errorf("wildcard(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

func TestToolPolicyArgs(t *testing.T) {
	p := ToolPolicy{Allow: []string{"Read", "Bash(git:*)"}, Deny: []string{"WebFetch"}}
	want := []string{"--allowedTools", "Read", "--allowedTools", "Bash(git:*)", "--disallowedTools", "WebFetch"}
	if got := claudeToolArgs(p); !slices.Equal(got, want) {
		t.Errorf("claude args %q, want %q", got, want)
	}
	gp := geminiPolicy(ToolPolicy{Allow: []string{"read_file", "run_shell_command(git:*)", "write_file(*.go)"},
		Deny: []string{"web_fetch", "write_file(*.env)"}})
	for _, want := range []string{
		"toolName = \"web_fetch\"\ndecision = \"deny\"\npriority = 999\n",
		"toolName = \"read_file\"\ndecision = \"allow\"\npriority = 500\n",
		"toolName = \"run_shell_command\"\ncommandPrefix = \"git\"\ndecision = \"allow\"\npriority = 500\n",
		// A specifier Gemini CLI cannot express: the allow covers the tool,
		// the deny is left to swarmd.
		"toolName = \"write_file\"\ndecision = \"allow\"\npriority = 500\n",
		"toolName = \"*\"\ndecision = \"deny\"\npriority = 1\n",
	} {
		if !strings.Contains(gp, want) {
			t.Errorf("gemini policy lacks %q:\n%s", want, gp)
		}
	}
	if strings.Contains(gp, `*.env`) || strings.Count(gp, "[[rule]]") != 5 {
		t.Errorf("gemini policy:\n%s", gp)
	}
	args, path, err := writeGeminiPolicy(ToolPolicy{Deny: []string{"web_fetch"}}, "s-1", "")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	if b, err := os.ReadFile(path); err != nil || !slices.Equal(args, []string{"--policy", path}) ||
		!strings.Contains(string(b), `toolName = "web_fetch"`) {
		t.Fatalf("args %q, file %q: %v", args, b, err)
	}
}

// TestDeniedToolCancelsSession: a CLI that starts a refused call (whatever
// it would do with it) is cancelled at once; the session ends with abort
// reason permission_denied and names the call, and its policy file is gone.
func TestDeniedToolCancelsSession(t *testing.T) {
	bin := fakeCLI(t, `echo '{"type":"system","subtype":"init","model":"claude-test"}'
echo '{"type":"assistant","message":{"id":"m1","model":"claude-test","usage":{"input_tokens":100,"output_tokens":10},"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}'
echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1"}]}}'
echo '{"type":"assistant","message":{"id":"m2","model":"claude-test","usage":{"input_tokens":200,"output_tokens":5},"content":[{"type":"text","text":"..."}]}}'
echo '{"type":"assistant","message":{"id":"m2","model":"claude-test","usage":{"input_tokens":200,"output_tokens":20},"content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"rm -rf /tmp/x"}}]}}'
sleep 300
echo '{"type":"result","is_error":false,"result":"never"}'
`)
	c, err := NewClaude(newSupervisor(t), AgentCLIConfig{Command: bin})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t)
	sp.Tools = ToolPolicy{Deny: []string{"Bash(rm:*)"}}
	var progress []Progress
	sp.OnProgress = func(p Progress) { progress = append(progress, p) }
	began := time.Now()
	r := run(t, c, sp)
	if d := time.Since(began); d > fatalGrace+3*time.Second {
		t.Errorf("session took %v", d)
	}
	if r.Outcome != OutcomeError || r.AbortReason != AbortPermissionDenied || r.Denied == nil ||
		r.Denied.Tool != "Bash" || r.Denied.Input != "rm -rf /tmp/x" || r.Denied.Why != "tools.deny: Bash(rm:*)" {
		t.Fatalf("result %+v denied %+v", r, r.Denied)
	}
	if !strings.Contains(r.Reason, "permission_denied: tool Bash (rm -rf /tmp/x)") {
		t.Errorf("reason %q", r.Reason)
	}
	// No result record: the usage is the responses' own, each counted once
	// at its latest (m2's update comes with the denied call, so it is read
	// before the cancel whatever the timing).
	if r.Usage != (Usage{InputTokens: 300, OutputTokens: 30}) || r.Model != "claude-test" {
		t.Errorf("usage %+v model %q", r.Usage, r.Model)
	}
	if len(progress) == 0 || progress[len(progress)-1].Usage != r.Usage || progress[0].Model != "claude-test" {
		t.Errorf("progress %+v", progress)
	}
	// The gemini backend writes a policy file for the session and removes
	// it at the end.
	g, err := NewGemini(newSupervisor(t), AgentCLIConfig{Command: fakeCLI(t, `for a; do [ -f "$a" ] && echo "{\"type\":\"error\",\"message\":\"$a\"}"; done
echo '{"type":"result","status":"success"}'`)})
	if err != nil {
		t.Fatal(err)
	}
	sp = spec(t)
	sp.Tools = ToolPolicy{Deny: []string{"web_fetch"}}
	r = run(t, g, sp)
	log := readLog(t, sp.LogPath)
	i := strings.Index(log, "swarmd-"+sp.SessionID)
	if r.Outcome != OutcomeSuccess || i < 0 {
		t.Fatalf("result %+v; the CLI got no policy file:\n%s", r, log)
	}
	path := log[strings.LastIndex(log[:i], `"message":"`)+len(`"message":"`):]
	path = path[:strings.IndexByte(path, '"')]
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("policy file %s left after the session: %v", path, err)
	}
}

// TestClaudeDeniedToolReal: the real Claude Code with Bash denied still
// reports the model's Bash call in its stream; swarmd cancels the session
// there, and the command never runs.
func TestClaudeDeniedToolReal(t *testing.T) {
	rig := newCLIRig(t, claudeKind, nil, mockllm.Shell("touch ran.txt"), mockllm.Text("done"))
	sp := rig.spec(t)
	sp.Tools = ToolPolicy{Deny: []string{"Bash"}}
	s := rig.start(t, sp)
	r := waitCLI(t, s, sp, cliLimit)
	if r.AbortReason != AbortPermissionDenied || r.Denied == nil || r.Denied.Tool != "Bash" || r.Denied.Input != "touch ran.txt" {
		t.Fatalf("result %+v\nlog:\n%s", r, logOf(t, sp))
	}
	if _, err := os.Stat(rig.repo + "/ran.txt"); err == nil {
		t.Fatal("the denied command ran")
	}
}

// TestGeminiDeniedToolReal: Gemini CLI under --yolo takes the tool away
// with the session's policy file, and swarmd cancels the session at the
// call all the same.
func TestGeminiDeniedToolReal(t *testing.T) {
	rig := newCLIRig(t, geminiKind, nil, mockllm.Shell("touch ran.txt"), mockllm.Text("done"))
	sp := rig.spec(t)
	sp.Tools = ToolPolicy{Allow: []string{"read_file"}}
	s := rig.start(t, sp)
	r := waitCLI(t, s, sp, cliLimit)
	if r.AbortReason != AbortPermissionDenied || r.Denied == nil || r.Denied.Tool != "run_shell_command" ||
		r.Denied.Why != "not in tools.allow" {
		t.Fatalf("result %+v\nlog:\n%s", r, logOf(t, sp))
	}
	if _, err := os.Stat(rig.repo + "/ran.txt"); err == nil {
		t.Fatal("the denied command ran")
	}
}

// TestProviderTrouble: each CLI's way of reporting a server error, an
// overload or a lost connection (as the real CLIs printed them against
// mockllm) is a ProviderError; rate limits, authentication errors and
// successes are not.
func TestProviderTrouble(t *testing.T) {
	for _, c := range []struct {
		name  string
		p     func() Reporter
		lines []string
		exit  int
		want  string // substring of ProviderError; "" for none
	}{
		{"claude 500", func() Reporter { return newClaudeParser(nil) }, []string{
			`{"type":"system","subtype":"api_retry","attempt":1,"max_retries":1,"retry_delay_ms":612,"error_status":500,"error":"server_error"}`,
			`{"type":"result","is_error":true,"api_error_status":500,"terminal_reason":"api_error","result":"API Error: 500"}`,
		}, 1, "API error 500 Internal Server Error"},
		{"claude 529", func() Reporter { return newClaudeParser(nil) }, []string{
			`{"type":"system","subtype":"api_retry","attempt":1,"retry_delay_ms":577,"error_status":529,"error":"overloaded"}`,
		}, 1, "API error 529"},
		{"claude dropped", func() Reporter { return newClaudeParser(nil) }, []string{
			`{"type":"system","subtype":"api_retry","attempt":1,"retry_delay_ms":508,"error_status":null,"error":"unknown"}`,
			`{"type":"assistant","error":"server_error","is_api_error_message":true,"api_error":"connection_failed","message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error: Connection dropped"}]}}`,
		}, 1, "network error"},
		{"claude 429", func() Reporter { return newClaudeParser(nil) }, []string{
			`{"type":"assistant","error":"rate_limit","is_api_error_message":true,"api_error_status":429,"message":{"model":"<synthetic>","content":[]}}`,
			`{"type":"result","is_error":true,"api_error_status":429,"terminal_reason":"api_error","result":"API Error: Request rejected (429)"}`,
		}, 1, ""},
		{"codex 500", func() Reporter { return newCodexParser(nil) }, []string{
			`{"type":"error","message":"Reconnecting... 1/1 (We’re currently experiencing high demand, which may cause temporary errors.)"}`,
			`{"type":"turn.failed","error":{"message":"We’re currently experiencing high demand, which may cause temporary errors."}}`,
		}, 1, "high demand"},
		{"codex dropped", func() Reporter { return newCodexParser(nil) }, []string{
			`{"type":"turn.failed","error":{"message":"stream disconnected before completion: error sending request"}}`,
		}, 1, "stream disconnected"},
		{"gemini 500", func() Reporter { return newGeminiParser(nil) }, []string{
			`{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: {\"error\":{\"code\":500,\"message\":\"mockllm: 500 Internal Server Error\",\"status\":\"INTERNAL\"}}]"}}`,
		}, 244, "500"},
		{"gemini exit 503", func() Reporter { return newGeminiParser(nil) }, nil, 247, "API error 503 Service Unavailable"},
		{"gemini fetch failed", func() Reporter { return newGeminiParser(nil) }, []string{
			`{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: exception TypeError: fetch failed sending request]"}}`,
		}, 1, "fetch failed"},
		{"gemini 429", func() Reporter { return newGeminiParser(nil) }, nil, 173, ""},
	} {
		p := c.p()
		for _, l := range c.lines {
			p.Line([]byte(l))
		}
		r, _, _ := finish(p, c.exit)
		if c.want == "" && r.ProviderError != "" || !strings.Contains(r.ProviderError, c.want) {
			t.Errorf("%s: ProviderError %q, want %q", c.name, r.ProviderError, c.want)
		}
		if got := p.Progress().ProviderError; got != r.ProviderError {
			t.Errorf("%s: Progress().ProviderError %q, Result %q", c.name, got, r.ProviderError)
		}
	}
}

// TestGeminiSuggestedRetry: a quota error that Gemini CLI gave up on tells
// its RetryInfo only in words; the reset is read from them.
func TestGeminiSuggestedRetry(t *testing.T) {
	c := newFakeClock()
	p := newGeminiParser(c.now)
	p.Line([]byte(`{"type":"init","model":"auto"}`))
	p.Line([]byte(`{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: Resource has been exhausted (e.g. check quota).\nSuggested retry after 20s.]\nPlease wait and try again later."},"stats":{"input_tokens":10,"output_tokens":5,"models":{"mock":{"total_tokens":15},"gemini-x":{"total_tokens":0}}}}`))
	r, ok, _ := finish(p, 173)
	if ok || !r.RateLimited || r.RetryAfter.Before(epoch.Add(20*time.Second)) || r.RetryAfter.After(epoch.Add(25*time.Second)) {
		t.Fatalf("ok %v RateLimited %v RetryAfter %v", ok, r.RateLimited, r.RetryAfter)
	}
	if r.ProviderError != "" || r.Model != "mock" {
		t.Errorf("ProviderError %q model %q", r.ProviderError, r.Model)
	}
	if pr := p.Progress(); !pr.RateLimited || !pr.RateLimitedUntil.Equal(r.RetryAfter) {
		t.Errorf("progress %+v", pr)
	}
}
