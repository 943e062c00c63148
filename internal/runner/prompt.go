package runner

import (
	"fmt"
	"strconv"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/worktree"
)

// A session's prompt: why it runs, building it (BuildingPrompt, where an
// agent with nothing to do idles) and storing it. What becomes of the mail
// and task it carried is outcome.go's.

// WhyKind says why a session is about to run; the prompt tells the agent.
type WhyKind uint8

// Reasons a session runs.
const (
	WhyFirst WhyKind = iota
	WhyAfterSuccess
	WhyAfterError
	WhyAfterInterrupt
	WhyAfterTurnLimit  // the last session reached max_turns (Detail: the backend's reason)
	WhyAfterToolDenied // the last session called a tool its policy refuses (Detail: the call and the rule)
	WhyAfterBudget     // the last session was stopped when the budget ran out (Detail: the reason)
)

// Why is the reason the next session runs, with detail (an error's text, an
// urgent message's id).
type Why struct {
	Kind   WhyKind
	Detail string
}

// PromptRequest is what a Prompter gets to build one session's prompt.
type PromptRequest struct {
	Agent     string
	Role      string
	SessionID string
	Seq       uint32
	Worktree  worktree.Worktree
	Why       Why
	// MayIdle: the last session said DONE, so a prompt with no mail and no
	// task is not worth a session (Prompt.Idle).
	MayIdle bool
}

// Prompt is a built prompt. Watermark is the highest mailbox message id the
// prompt accounts for: urgent mail at or below it is already in the prompt
// and needs no interrupt.
type Prompt struct {
	Text      string
	Watermark int64
	Mail      int   // messages the prompt carries
	Task      int64 // the task the prompt carries (claimed or continued), 0 for none
	NewTask   bool  // Task was claimed for this prompt: Started moves it on
	Review    int64 // the task whose review the prompt asks for, 0 for none
	// Idle: the agent said it is done and has no mail and no task. No
	// session starts; the runner waits for Wake.
	Idle bool
	// Head is the worktree's HEAD the prompt was built on, "" when the
	// prompter did not read it: nothing runs in the worktree between the
	// prompt and the spawn, so it is the session's HeadBefore, and the
	// runner need not read it again.
	Head string
}

func (r *Runner) buildPrompt() {
	r.applyPending()
	if r.cfg.MaxSessions > 0 && r.started >= r.cfg.MaxSessions {
		r.apply(agent.EvOperatorStop(), "runner", "max_sessions: "+strconv.Itoa(r.started)+" sessions run")
		return
	}
	r.nextSeq()
	r.sessionID = newSessionID(r.cfg.Name, r.seq)
	// Urgent mail the runner heard of before consuming was committed before
	// it, so the prompt holds it (or it was no longer pending).
	r.mu.Lock()
	known := r.maxUrgent
	r.mu.Unlock()
	if r.signalled {
		r.waiting.Store(true)
	}
	p, err := r.cfg.Prompter.Build(r.stopCtx, PromptRequest{
		Agent:     r.cfg.Name,
		Role:      r.cfg.Role,
		SessionID: r.sessionID,
		Seq:       r.seq,
		Worktree:  r.wt,
		Why:       r.why,
		MayIdle:   r.signalled,
	})
	if err == nil {
		r.claimed, r.carried = p.Mail > 0 || p.Task != 0, p.Mail
		r.task, r.newTask, r.review = p.Task, p.NewTask, p.Review
		r.watermark = max(r.watermark, p.Watermark, known)
		r.promptHead = p.Head
	}
	stopping := r.external()
	if stopping || err != nil || p.Idle {
		r.settleTicket(backend.Result{}, false) // no session: the next waiter may go
	}
	if stopping {
		return
	}
	if err != nil {
		if r.storeRefused(err) {
			return // step builds it again
		}
		r.storeAnswered()
		r.apply(agent.EvFatalError(fmt.Sprintf("build prompt: %v", err)), "runner", "")
		return
	}
	r.storeAnswered()
	if p.Idle {
		r.waitIdle()
		return
	}
	r.waiting.Store(false)
	r.apply(agent.EvPromptReady(p.Text), "runner", strconv.Itoa(len(p.Text))+" bytes")
}

// waitIdle waits in BuildingPrompt, starting no session, until a wake-up
// (mail or a task may be there), urgent mail or a stop; step then builds the
// prompt again.
func (r *Runner) waitIdle() {
	r.setIdle(true)
	defer r.setIdle(false)
	select {
	case <-r.wakeCh:
	case <-r.urgentCh:
	case <-r.stopCtx.Done():
	}
	r.waiting.Store(false)
}

func (r *Runner) setIdle(idle bool) {
	now := time.Now()
	r.mu.Lock()
	if r.snap.Idle == idle {
		r.mu.Unlock()
		return
	}
	r.snap.Idle = idle
	r.snap.Version++
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	if r.cfg.Observer != nil {
		r.cfg.Observer.OnIdle(r.cfg.Name, idle, now)
	}
}

// storePrompt keeps the prompt for the session about to spawn and writes
// it where the log store says; package logs owns the file itself.
func (r *Runner) storePrompt(p string) error {
	r.lastPrompt = p
	return logs.WritePrompt(r.cfg.Logs.PromptPath(r.cfg.Name, r.seq), p)
}
