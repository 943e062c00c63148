package prompt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
	"github.com/swarmd/swarmd/internal/worktree"
)

// Mail is what the builder needs of the mailbox. *mailbox.DB satisfies it.
type Mail interface {
	ConsumeForPrompt(ctx context.Context, agent, sessionID string) ([]mailbox.Message, error)
	Unconsume(ctx context.Context, sessionID string) (int, error)
}

// Git is what the builder needs of the agent's worktree. *worktree.Manager
// satisfies it.
type Git interface {
	RecentCommits(ctx context.Context, agent string, n int) ([]worktree.Commit, error)
	// Look is the worktree's HEAD and uncommitted files (worktree.Status
	// without the counts against the base commit).
	Look(ctx context.Context, agent string) (worktree.Status, error)
}

// Tasks is what the builder needs of the task board. *taskboard.Board
// satisfies it.
type Tasks interface {
	Work(ctx context.Context, agent string) (taskboard.Work, error)
	Held(ctx context.Context, agent string) (taskboard.Task, bool, error)
	ClaimSeen(ctx context.Context, agent, session string) (taskboard.Task, bool, error)
	Continue(ctx context.Context, id int64, agent, session string) error
	Unclaim(ctx context.Context, session string, started int64) error
	ReviewFor(ctx context.Context, reviewer string) (taskboard.Task, bool, error)
	Rounds(ctx context.Context, id int64) ([]review.Round, error)
	Subtasks(ctx context.Context, id int64) ([]taskboard.Task, error)
}

// Compare shows a worker's branch against the merge target, for a review.
// *worktree.Manager satisfies it.
type Compare interface {
	Compare(ctx context.Context, base, branch string) (worktree.Comparison, error)
	Branch(agent string) string
}

// Lines moves an agent's branch to a task's line. *worktree.Manager
// satisfies it.
type Lines interface {
	StartLine(ctx context.Context, agent string, task int64, head, from string) (string, error)
}

// recentCommits is how much history a prompt shows.
const recentCommits = 5

// Builder implements runner.Prompter: it reads the agent's work (claiming
// the mail and task the prompt carries) and renders the prompt. What
// becomes of them once the session ends is package settle's. Mail and Git may be nil (no mailbox,
// no git information).
type Builder struct {
	Mail   Mail
	Git    Git
	Tasks  Tasks    // nil: no task board
	Agents []string // every agent's name
	Swarmd string   // the swarmd binary sessions should run ("" : swarmd on PATH)
	// Compare and ReviewBase show a reviewer the work: the worker's branch
	// against ReviewBase (the merge target, or the base commit).
	Compare    Compare
	ReviewBase string
	// Lines, if set (a merge queue merges tasks one by one), puts the
	// agent's branch on the line of the task its next session works on,
	// a new line starting where LineFrom says (the merge target, or the
	// newest commit of it that the swarm counts).
	Lines    Lines
	LineFrom func(ctx context.Context) (string, error)
	// Budget, if set, says what is left of the agent's budget once little
	// is ("" otherwise): the prompt carries it.
	Budget func(agent string) string

	recent recentMemo
}

// recentMemo keeps the last recent commits an agent's prompt showed, by
// the commit they start from: the history below a commit never changes, so
// a session that made no commit needs no second walk of it.
type recentMemo struct {
	mu      sync.Mutex
	agent   string
	commits []worktree.Commit // newest first; commits[0] is the HEAD they were read from
}

func (m *recentMemo) get(agent, head string) ([]worktree.Commit, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if head == "" || m.agent != agent || len(m.commits) == 0 || m.commits[0].Hash != head {
		return nil, false
	}
	return m.commits, true
}

func (m *recentMemo) put(agent string, cs []worktree.Commit) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.agent, m.commits = agent, slices.Clone(cs)
}

// Build gathers the prompt's inputs and renders it: the task (held,
// reviewed or claimed) and the mail first, so that an agent with nothing to
// do learns it from a few reads, before any git work; then the worktree's
// state. If that fails, what was claimed for the prompt is released.
func (b *Builder) Build(ctx context.Context, req runner.PromptRequest) (runner.Prompt, error) {
	d := Data{
		Agent: req.Agent, Worktree: req.Worktree.Path, Branch: req.Worktree.Branch,
		SessionID: req.SessionID, Seq: req.Seq, Role: req.Role, Why: req.Why, Swarmd: b.Swarmd,
	}
	for _, a := range b.Agents {
		if a != req.Agent {
			d.Others = append(d.Others, a)
		}
	}
	sort.Strings(d.Others)
	p, err := b.work(ctx, req, &d)
	if err != nil || p.Idle {
		return p, err
	}
	if d.Task != nil && b.Lines != nil {
		err = b.startLine(ctx, req.Agent, d.Task)
	}
	if err == nil {
		p.Head, err = b.gitState(ctx, req.Agent, &d)
	}
	if err != nil {
		if rerr := b.Release(context.WithoutCancel(ctx), req.SessionID); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return runner.Prompt{}, err
	}
	if b.Budget != nil {
		d.Budget = b.Budget(req.Agent)
	}
	p.Text = Render(d)
	return p, nil
}

// startLine puts agent's branch on t's line; a new line's start is only
// looked for when one is started.
func (b *Builder) startLine(ctx context.Context, agent string, t *Task) error {
	var from string
	if t.workHead == "" {
		var err error
		if from, err = b.LineFrom(ctx); err != nil {
			return fmt.Errorf("start the line of task %d for %s: %w", t.ID, agent, err)
		}
	}
	_, err := b.Lines.StartLine(ctx, agent, t.ID, t.workHead, from)
	return err
}

// work fills in the prompt's task, review request and mail, and says
// whether there is nothing to do (Idle, when the request allows it).
func (b *Builder) work(ctx context.Context, req runner.PromptRequest, d *Data) (runner.Prompt, error) {
	p := runner.Prompt{}
	var work taskboard.Work
	if b.Tasks != nil {
		// One read answers the usual "nothing for you", and says which of
		// the reads below have something (each still decides for itself).
		var err error
		if work, err = b.Tasks.Work(ctx, req.Agent); err != nil {
			return p, err
		}
	}
	if work.Any() {
		// A review waiting for this agent comes first: a worker is blocked
		// on it, while the agent's own task can continue in the next session.
		var err error
		if work.Review {
			if d.Review, err = b.review(ctx, req.Agent); err != nil {
				return p, err
			}
		}
		if d.Review != nil {
			p.Review, p.ReviewHead = d.Review.Task.ID, d.Review.frozen
		} else if t, isNew, err := b.task(ctx, req, work); err != nil {
			return p, err
		} else if t != nil {
			d.Task, p.Task, p.NewTask = t, t.ID, isNew
		}
	}
	if b.Mail != nil {
		ms, err := b.Mail.ConsumeForPrompt(ctx, req.Agent, req.SessionID)
		if err != nil {
			if rerr := b.Release(context.WithoutCancel(ctx), req.SessionID); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return p, fmt.Errorf("consume mail: %w", err)
		}
		for _, m := range ms {
			d.Messages = append(d.Messages, Message{
				ID: m.ID, ThreadID: m.ThreadID, ReplyTo: m.ReplyTo, From: m.From,
				Subject: m.Subject, Body: m.Body, Urgent: m.Urgent, Sent: m.CreatedAt, ShownBefore: m.ShownNote,
			})
			p.Watermark = max(p.Watermark, m.ID)
		}
	}
	p.Mail = len(d.Messages)
	p.Idle = req.MayIdle && p.Mail == 0 && p.Task == 0 && p.Review == 0
	return p, nil
}

// gitState adds the worktree's recent commits and uncommitted files, and
// returns the worktree's HEAD ("" when the worktree is not on its branch).
// Status and RecentCommits read the same HEAD (the worktree's, else the
// branch's tip), so commits memoized for Status's HEAD are what
// RecentCommits would read again.
func (b *Builder) gitState(ctx context.Context, agent string, d *Data) (string, error) {
	if b.Git == nil {
		return "", nil
	}
	st, err := b.Git.Look(ctx, agent)
	if err != nil {
		return "", fmt.Errorf("worktree status: %w", err)
	}
	d.DirtyFiles = st.DirtyFiles
	cs, ok := b.recent.get(agent, st.Head)
	if !ok {
		if cs, err = b.Git.RecentCommits(ctx, agent, recentCommits); err != nil {
			return "", fmt.Errorf("recent commits: %w", err)
		}
		b.recent.put(agent, cs)
	}
	for _, c := range cs {
		d.RecentCommits = append(d.RecentCommits, Commit{Hash: c.Hash, Subject: c.Subject})
	}
	if !st.Exists {
		return "", nil
	}
	return st.Head, nil
}

// task is the task the prompt carries: the one the agent holds (continued),
// or the best one it can claim now (isNew), where work, read just before,
// saw one.
func (b *Builder) task(ctx context.Context, req runner.PromptRequest, work taskboard.Work) (_ *Task, isNew bool, err error) {
	var held taskboard.Task
	ok := false
	if work.Held { // only the agent's own prompts and sessions claim for it
		if held, ok, err = b.Tasks.Held(ctx, req.Agent); err != nil {
			return nil, false, fmt.Errorf("held task: %w", err)
		}
	}
	if ok {
		if err := b.Tasks.Continue(ctx, held.ID, req.Agent, req.SessionID); err != nil {
			return nil, false, fmt.Errorf("continue task %d: %w", held.ID, err)
		}
		// A task still CLAIMED was never started: the session starts it.
		claimed := held.State == task.Claimed
		t := taskOf(held, !claimed)
		// Read before Continue cleared it: the hold over a restart.
		t.KeptOverRestart = t.Continue && held.HeldOver != ""
		return t, claimed, nil
	}
	if !work.Claimable {
		return nil, false, nil
	}
	t, ok, err := b.Tasks.ClaimSeen(ctx, req.Agent, req.SessionID)
	if err != nil || !ok {
		return nil, false, err
	}
	return taskOf(t, false), true, nil
}

func taskOf(t taskboard.Task, cont bool) *Task {
	out := &Task{ID: t.ID, Title: t.Title, Body: t.Body, Continue: cont, workHead: t.WorkHead}
	if by, ok := strings.CutPrefix(t.CreatedBy, "agent:"); ok {
		out.AddedBy = by
	}
	// A task being worked on has a result only when it came back: from its
	// reviewer, or from the merge queue (a retry clears it).
	if t.Result != "" {
		out.Feedback, out.From = t.Result, "the merge queue"
		if t.ReviewState == review.Working.String() && t.Iteration > 1 {
			out.From = fmt.Sprintf("review (round %d). The reviewer wrote", t.Iteration-1)
		}
	}
	return out
}

// review is the review request waiting for reviewer, if any.
func (b *Builder) review(ctx context.Context, reviewer string) (*Review, error) {
	t, ok, err := b.Tasks.ReviewFor(ctx, reviewer)
	if err != nil || !ok {
		return nil, err
	}
	r := &Review{Task: *taskOf(t, false), Worker: t.Worker, Summary: t.Result, Round: t.Iteration, MaxRounds: t.MaxIterations,
		frozen: t.Head}
	r.Task.Feedback, r.Task.From = "", ""
	rounds, err := b.Tasks.Rounds(ctx, t.ID)
	if err != nil {
		return nil, fmt.Errorf("review rounds of task %d: %w", t.ID, err)
	}
	for _, rd := range rounds {
		r.Earlier = append(r.Earlier, Round{N: int(rd.Iteration), Verdict: strings.ToUpper(rd.Verdict.String()), Feedback: rd.Feedback})
	}
	if t.Head == "" {
		// A split task has no change of its own: its worker's branch
		// carries that worker's next task by now, not this one's work.
		kids, err := b.Tasks.Subtasks(ctx, t.ID)
		if err != nil {
			return nil, fmt.Errorf("review of task %d: %w", t.ID, err)
		}
		for _, k := range kids {
			r.Subtasks = append(r.Subtasks, Subtask{ID: k.ID, Title: k.Title, State: k.StateName})
		}
		if len(kids) > 0 {
			return r, nil
		}
	}
	if b.Compare != nil {
		r.Branch, r.Base, r.Head = b.Compare.Branch(t.Worker), b.ReviewBase, t.Head
		c, err := b.Compare.Compare(ctx, b.ReviewBase, cmp.Or(r.Head, r.Branch))
		if err != nil {
			r.CompareError = err.Error()
		}
		for _, cm := range c.Commits {
			r.Commits = append(r.Commits, Commit{Hash: cm.Hash, Subject: cm.Subject})
		}
		r.MoreCommits, r.DiffStat, r.MergeBases = c.More, c.DiffStat, len(c.MergeBases)
	}
	return r, nil
}

// Release returns the mail and the task claimed for a prompt whose build
// failed (its session never starts).
func (b *Builder) Release(ctx context.Context, sessionID string) error {
	if b.Mail != nil {
		if _, err := b.Mail.Unconsume(ctx, sessionID); err != nil {
			return fmt.Errorf("return mail of session %s: %w", sessionID, err)
		}
	}
	if b.Tasks != nil {
		if err := b.Tasks.Unclaim(ctx, sessionID, 0); err != nil { // no session began: none started
			return fmt.Errorf("return the task of session %s: %w", sessionID, err)
		}
	}
	return nil
}
