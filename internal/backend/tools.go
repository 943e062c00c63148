package backend

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ToolPolicy is an agent's tool policy (the config's tools: allow and
// deny). A rule is a tool name as the backend's stream reports it (Bash,
// command_execution, run_shell_command), where * matches any run of
// characters (mcp__github__*), optionally followed by a specifier in
// parentheses that the call's input must match: Bash(git:*) is any command
// that starts with "git", Bash(git *) any that matches the pattern.
//
// A call is refused when a deny rule matches it, or when Allow is not empty
// and no allow rule matches it. The backends pass the policy to the CLI's
// own mechanism where it has one (Claude Code's --allowedTools and
// --disallowedTools, Gemini CLI's policy files), and a session whose
// stream shows a refused call is cancelled all the same: the CLI's own
// mechanism may be off (--dangerously-skip-permissions) or missing (Codex).
type ToolPolicy struct {
	Allow []string
	Deny  []string
}

// Empty reports whether the policy allows every tool.
func (p ToolPolicy) Empty() bool { return len(p.Allow) == 0 && len(p.Deny) == 0 }

// ToolDenial is a tool call that the policy refused.
type ToolDenial struct {
	Tool  string
	Input string // the call's input summary
	// Why names the rule: "tools.deny: Bash", "not in tools.allow".
	Why string
}

// String is "Bash (rm -rf /): tools.deny: Bash", for a reason or a prompt.
func (d ToolDenial) String() string {
	s := d.Tool
	if in := oneLineInput(d.Input, 120); in != "" {
		s += " (" + in + ")"
	}
	return s + ": " + d.Why
}

// Check returns how the policy refuses a call of tool with input, and
// false when it allows it.
func (p ToolPolicy) Check(tool, input string) (ToolDenial, bool) {
	for _, r := range p.Deny {
		if ruleMatches(r, tool, input) {
			return ToolDenial{Tool: tool, Input: input, Why: "tools.deny: " + r}, true
		}
	}
	if len(p.Allow) == 0 {
		return ToolDenial{}, false
	}
	for _, r := range p.Allow {
		if ruleMatches(r, tool, input) {
			return ToolDenial{}, false
		}
	}
	return ToolDenial{Tool: tool, Input: input, Why: "not in tools.allow"}, true
}

// SplitToolRule splits a rule into its tool name pattern and its specifier
// ("" when it has none).
func SplitToolRule(rule string) (name, spec string, hasSpec bool) {
	rule = strings.TrimSpace(rule)
	i := strings.IndexByte(rule, '(')
	if i < 0 || !strings.HasSuffix(rule, ")") {
		return rule, "", false
	}
	return rule[:i], rule[i+1 : len(rule)-1], true
}

func ruleMatches(rule, tool, input string) bool {
	name, spec, hasSpec := SplitToolRule(rule)
	if !wildcard(name, tool) {
		return false
	}
	if !hasSpec {
		return true
	}
	if prefix, ok := strings.CutSuffix(spec, ":*"); ok {
		return strings.HasPrefix(strings.TrimSpace(input), prefix)
	}
	return wildcard(spec, strings.TrimSpace(input))
}

// wildcard matches s against pattern, where * matches any run of characters
// (slashes and spaces included) and everything else matches itself.
func wildcard(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

func oneLineInput(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		cut := n
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// claudeToolArgs maps a policy to Claude Code's flags: --allowedTools lets
// a tool run without asking (with --print nobody can answer, so in effect
// only those run unless the args bypass permissions), --disallowedTools
// takes a tool away from the model.
func claudeToolArgs(p ToolPolicy) []string {
	var args []string
	for _, t := range p.Allow {
		args = append(args, "--allowedTools", t)
	}
	for _, t := range p.Deny {
		args = append(args, "--disallowedTools", t)
	}
	return args
}

// geminiShell is Gemini CLI's shell tool, the one whose policy rules take a
// command prefix.
const geminiShell = "run_shell_command"

// geminiPolicy renders a policy as a Gemini CLI policy file (--policy):
// deny rules at the top priority, allow rules above a catch-all deny when
// there is an allow list. A specifier of the shell tool becomes its
// commandPrefix; other specifiers are left to swarmd's own check (the rule
// then covers the whole tool for an allow, and nothing for a deny).
func geminiPolicy(p ToolPolicy) string {
	var b strings.Builder
	b.WriteString("# Written by swarmd for one session from the agent's tools policy.\n")
	rule := func(tool, decision string, priority int) {
		name, spec, hasSpec := SplitToolRule(tool)
		if hasSpec && name != geminiShell {
			if decision == "deny" {
				return
			}
			hasSpec = false
		}
		fmt.Fprintf(&b, "\n[[rule]]\ntoolName = %s\n", strconv.Quote(name))
		if hasSpec {
			prefix := strings.TrimSuffix(strings.TrimSuffix(spec, ":*"), "*")
			fmt.Fprintf(&b, "commandPrefix = %s\n", strconv.Quote(strings.TrimSpace(prefix)))
		}
		fmt.Fprintf(&b, "decision = %q\npriority = %d\n", decision, priority)
	}
	for _, t := range p.Deny {
		rule(t, "deny", 999)
	}
	for _, t := range p.Allow {
		rule(t, "allow", 500)
	}
	if len(p.Allow) > 0 {
		rule("*", "deny", 1)
	}
	return b.String()
}

// writeGeminiPolicy writes the session's policy file in dir ("": the
// system's temporary directory) and returns the --policy arguments and the
// file's path; the caller removes the file when the session ends.
func writeGeminiPolicy(p ToolPolicy, sessionID, dir string) (args []string, path string, err error) {
	f, err := os.CreateTemp(dir, "swarmd-"+sessionID+"-*.toml")
	if err != nil {
		return nil, "", fmt.Errorf("write the gemini tools policy: %w", err)
	}
	_, werr := f.WriteString(geminiPolicy(p))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(f.Name())
		return nil, "", fmt.Errorf("write the gemini tools policy: %w", werr)
	}
	return []string{"--policy", f.Name()}, f.Name(), nil
}
