package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/internal/proc"
)

// ScriptStep is what one scripted session does, in order: read the prompt,
// print, start a setsid grandchild, sleep, print the success record, exit.
type ScriptStep struct {
	Print      []string      // lines printed to stdout
	PrintEvery time.Duration // pause between printed lines; 0 prints them at once
	Sleep      time.Duration // after printing
	Exit       int           // exit code, 0..255
	// IgnoreSignals ignores SIGINT and SIGTERM, so a cancel is ignored and
	// the session has to be force-stopped.
	IgnoreSignals bool
	// SetsidChild starts `setsid sleep 3600 &` before sleeping: a grandchild
	// in a new session that holds the output pipe, like an agent CLI's tool
	// shell.
	SetsidChild bool
	NoResult    bool // do not print the success record
}

// ScriptedConfig configures the scripted backend.
type ScriptedConfig struct {
	Name         string // default "scripted"
	Steps        []ScriptStep
	CancelSignal syscall.Signal // default SIGTERM
}

// Scripted is a test and demo backend made of real processes: session n runs
// `/bin/sh -c` with a script generated from Steps[(n-1) % len(Steps)] for the agent's nth session. Like
// Claude Code it prints a success record, and like it, exit code 0 without
// that record is an error.
type Scripted struct {
	sup     *proc.Supervisor
	cfg     ScriptedConfig
	scripts []string

	mu      sync.Mutex
	started map[string]int // sessions started per agent
}

var _ Backend = (*Scripted)(nil)

// ResultRecord is the success record the scripted backend prints: Claude
// Code's stream-json result line.
const ResultRecord = `{"type":"result","is_error":false}`

// NewScripted returns a scripted backend.
func NewScripted(sup *proc.Supervisor, cfg ScriptedConfig) (*Scripted, error) {
	if sup == nil {
		return nil, errors.New("backend: new scripted backend: nil supervisor")
	}
	if len(cfg.Steps) == 0 {
		return nil, errors.New("backend: new scripted backend: no steps")
	}
	if cfg.Name == "" {
		cfg.Name = "scripted"
	}
	if cfg.CancelSignal == 0 {
		cfg.CancelSignal = syscall.SIGTERM
	}
	b := &Scripted{sup: sup, cfg: cfg, started: make(map[string]int)}
	for i, st := range cfg.Steps {
		if st.Exit < 0 || st.Exit > 255 {
			return nil, fmt.Errorf("backend: new scripted backend: step %d: exit code %d out of 0..255", i+1, st.Exit)
		}
		b.scripts = append(b.scripts, st.script())
	}
	return b, nil
}

// Name is the configured backend name.
func (b *Scripted) Name() string { return b.cfg.Name }

// Start starts the agent's next session with its step's script. Steps go by
// the sessions started for the agent, not by seq: a retry after an error
// keeps its seq but runs the next step.
func (b *Scripted) Start(ctx context.Context, spec Spec) (Session, error) {
	b.mu.Lock()
	n := b.started[spec.Agent]
	b.started[spec.Agent] = n + 1
	b.mu.Unlock()
	return startSession(ctx, b.sup, spec, launch{
		path:      "/bin/sh",
		args:      []string{"-c", b.scripts[n%len(b.scripts)]},
		cancelSig: b.cfg.CancelSignal,
		parser:    &resultParser{},
		tail:      true,
	})
}

func (st ScriptStep) script() string {
	var b strings.Builder
	if st.IgnoreSignals {
		b.WriteString("trap '' INT TERM\n")
	}
	b.WriteString("cat >/dev/null\n") // read the whole prompt, so writing it never blocks
	for i, line := range st.Print {
		if i > 0 && st.PrintEvery > 0 {
			b.WriteString("sleep " + seconds(st.PrintEvery) + "\n")
		}
		b.WriteString("printf '%s\\n' " + shellQuote(line) + "\n")
	}
	if st.SetsidChild {
		b.WriteString("setsid sleep 3600 &\n")
	}
	if st.Sleep > 0 {
		b.WriteString("sleep " + seconds(st.Sleep) + "\n")
	}
	if !st.NoResult {
		b.WriteString("printf '%s\\n' " + shellQuote(ResultRecord) + "\n")
	}
	b.WriteString("exit " + strconv.Itoa(st.Exit) + "\n")
	return b.String()
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// shellQuote quotes s for sh as one word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// resultParser looks for a Claude-style result line.
type resultParser struct {
	success bool
	errText string
}

func (p *resultParser) Line(line []byte) {
	if !bytes.Contains(line, []byte(`"result"`)) {
		return // most lines: skip the JSON decoder
	}
	var rec struct {
		Type    string `json:"type"`
		IsError *bool  `json:"is_error"`
		Result  string `json:"result"`
	}
	if json.Unmarshal(line, &rec) != nil || rec.Type != "result" || rec.IsError == nil {
		return
	}
	if *rec.IsError {
		p.success, p.errText = false, rec.Result
		return
	}
	p.success, p.errText = true, ""
}

func (p *resultParser) Verdict() (bool, string) { return p.success, p.errText }
