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
	NewTask   bool  // Task was claimed for this prompt: the session's Begin starts it
	Review    int64 // the task whose review the prompt asks for, 0 for none
	// ReviewHead is the commit the review request shows: the task's frozen
	// head as the prompt read it ("" for none). The verdict is on it.
	ReviewHead string
	// Idle: the agent said it is done and has no mail and no task. No
	// session starts; the runner waits for Wake.
	Idle bool
	// Head is the worktree's HEAD the prompt was built on, "" when the
	// prompter did not read it: nothing runs in the worktree between the
	// prompt and the spawn, so it is the session's HeadBefore, and the
	// runner need not read it again.
	Head string
}

// work is what the current session is about, for the Run goroutine: why
// it runs, its prompt until the backend has it, and the mail and task the
// prompt claimed (outcome.go settles or returns them).
type work struct {
	why       Why
	text      string // the stored prompt, until spawn hands it to the backend
	claimed   bool   // the prompt claimed mail or a task, and no session has started with it
	carried   int    // messages the current session's prompt carried
	task      int64  // the task the current session's prompt carried
	review    int64  // the task the current session reviews
	reviewed  string // the commit that review shows (Prompt.ReviewHead)
	newTask   bool   // task was claimed for the current prompt
	started   int64  // task, which the current session's begin was to start
	signalled bool   // the last session completed with a signal (the prompt may find it idle)
	unstored  bool   // a full disk refused the prompt's file: spawn writes it again first
	// unstarted is the end of a session that never started after its
	// begin was tried, for its row, closed with its claims' return.
	unstarted *SessionRecord
}

// took keeps what a built prompt carries.
func (w *work) took(p Prompt) {
	w.claimed, w.carried = p.Mail > 0 || p.Task != 0, p.Mail
	w.task, w.newTask, w.review, w.reviewed = p.Task, p.NewTask, p.Review, p.ReviewHead
	w.started = 0
}

// unclaim forgets the claims of a prompt whose session never started,
// reporting whether there were any to return, and started, the task the
// session's begin started (0: none; a task only continued is not).
func (w *work) unclaim() (started int64, ok bool) {
	if !w.claimed {
		return 0, false
	}
	started = w.started
	w.claimed, w.carried, w.task, w.newTask, w.started = false, 0, 0, false, 0
	return started, true
}

// startTask is the task the prompt newly claimed, which the session's
// begin starts (0: none); begun forgets it once that is recorded. The task
// is kept as started: a begin that failed may have committed unseen, and
// only this session's begin moves the task it claimed to IN_PROGRESS.
func (w *work) startTask() int64 {
	if !w.newTask {
		return 0
	}
	w.started = w.task
	return w.task
}

// begun notes that the session's row is recorded, its new task started
// with it.
func (w *work) begun() { w.newTask = false }

// settlement is the ended session's settlement without its verdict: the
// mail, task and review it carried. The mail is settled once.
func (w *work) settlement(rec SessionRecord, result string) Settlement {
	st := Settlement{Session: rec, Mail: w.carried, Task: w.task, Review: w.review, ReviewHead: w.reviewed, Result: result}
	w.carried = 0
	return st
}

// buildPrompt builds the next session's prompt and feeds PromptReady; an
// agent with nothing to do idles instead, and a store that refused the
// build's reads and claims is waited for.
func (r *Runner) buildPrompt() {
	r.applyPending()
	if r.limits.reached(r.cfg.MaxSessions) {
		r.apply(agent.EvOperatorStop(), "runner", "max_sessions: "+strconv.Itoa(r.limits.started)+" sessions run")
		return
	}
	p, err := r.prompt()
	stopping := r.external()
	if stopping || err != nil || p.Idle {
		r.limits.giveBack(backend.Result{}, false) // no session: the next waiter may go
	}
	switch {
	case stopping:
	case err != nil:
		if r.storeRefused(err) || r.diskRefused(err) {
			return // step builds it again
		}
		r.storeAnswered()
		r.apply(agent.EvFatalError(fmt.Sprintf("build prompt: %v", err)), "runner", "")
	case p.Idle:
		r.storeAnswered()
		r.setDiskFull("")
		r.waitIdle()
	default:
		r.storeAnswered()
		r.inbox.waiting.Store(false)
		r.apply(agent.EvPromptReady(p.Text), "runner", strconv.Itoa(len(p.Text))+" bytes")
	}
}

// prompt names the next session and has the Prompter build its prompt,
// keeping what the prompt claimed and holds.
func (r *Runner) prompt() (Prompt, error) {
	r.seq.next()
	r.seq.newID(r.cfg.Name)
	// Urgent mail the runner heard of before consuming was committed before
	// it, so the prompt holds it (or it was no longer pending).
	known := r.inbox.known()
	if r.work.signalled {
		r.inbox.waiting.Store(true)
	}
	p, err := r.cfg.Prompter.Build(r.stop.ctx, PromptRequest{
		Agent:     r.cfg.Name,
		Role:      r.cfg.Role,
		SessionID: r.seq.id,
		Seq:       r.seq.n,
		Worktree:  r.tree.wt,
		Why:       r.work.why,
		MayIdle:   r.work.signalled,
	})
	if err == nil {
		r.work.took(p)
		r.inbox.held(p.Watermark, known)
		r.tree.promptHead = p.Head
	}
	return p, err
}

// waitIdle waits in BuildingPrompt, starting no session, until a wake-up
// (mail or a task may be there), urgent mail or a stop; step then builds the
// prompt again.
func (r *Runner) waitIdle() {
	r.setIdle(true)
	defer r.setIdle(false)
	select {
	case <-r.inbox.wake:
	case <-r.inbox.urgent:
	case <-r.stop.ctx.Done():
	}
	r.inbox.waiting.Store(false)
}

func (r *Runner) setIdle(idle bool) {
	now := time.Now()
	changed := r.snaps.update(func(s *Snapshot) bool {
		if s.Idle == idle {
			return false
		}
		s.Idle = idle
		return true
	})
	if changed && r.cfg.Observer != nil {
		r.cfg.Observer.OnIdle(r.cfg.Name, idle, now)
	}
}

// storePrompt keeps the prompt for the session about to spawn and writes
// it where the log store says; package logs owns the file itself.
func (r *Runner) storePrompt(p string) error {
	r.work.text = p
	return logs.WritePrompt(r.cfg.Logs.PromptPath(r.cfg.Name, r.seq.n), p)
}
