package prompt

import (
	"context"
	"fmt"
	"sort"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/worktree"
)

// Mail is what the builder needs of the mailbox. *mailbox.DB satisfies it.
type Mail interface {
	ConsumeForPrompt(ctx context.Context, agent, sessionID string) ([]mailbox.Message, error)
	Unconsume(ctx context.Context, sessionID string) (int, error)
	Ack(ctx context.Context, s mailbox.SessionRecord) (int, error)
	Unack(ctx context.Context, sessionID, note string) (int, error)
}

// Git is what the builder needs of the agent's worktree. *worktree.Manager
// satisfies it.
type Git interface {
	RecentCommits(ctx context.Context, agent string, n int) ([]worktree.Commit, error)
	Status(ctx context.Context, agent string) (worktree.Status, error)
}

// recentCommits is how much history a prompt shows.
const recentCommits = 5

// Builder implements runner.Prompter. Mail and Git may be nil (no mailbox,
// no git information).
type Builder struct {
	Mail   Mail
	Git    Git
	Agents []string // every agent's name
}

// Build gathers the prompt's inputs and renders it. Mail is consumed last,
// so that a git failure never leaves messages claimed.
func (b *Builder) Build(ctx context.Context, req runner.PromptRequest) (runner.Prompt, error) {
	d := Data{
		Agent: req.Agent, Worktree: req.Worktree.Path, Branch: req.Worktree.Branch,
		SessionID: req.SessionID, Seq: req.Seq, Role: req.Role, Why: req.Why,
	}
	for _, a := range b.Agents {
		if a != req.Agent {
			d.Others = append(d.Others, a)
		}
	}
	sort.Strings(d.Others)
	if b.Git != nil {
		cs, err := b.Git.RecentCommits(ctx, req.Agent, recentCommits)
		if err != nil {
			return runner.Prompt{}, fmt.Errorf("recent commits: %w", err)
		}
		for _, c := range cs {
			d.RecentCommits = append(d.RecentCommits, Commit{Hash: c.Hash, Subject: c.Subject})
		}
		st, err := b.Git.Status(ctx, req.Agent)
		if err != nil {
			return runner.Prompt{}, fmt.Errorf("worktree status: %w", err)
		}
		d.DirtyFiles = st.DirtyFiles
	}
	var watermark int64
	if b.Mail != nil {
		ms, err := b.Mail.ConsumeForPrompt(ctx, req.Agent, req.SessionID)
		if err != nil {
			return runner.Prompt{}, fmt.Errorf("consume mail: %w", err)
		}
		for _, m := range ms {
			d.Messages = append(d.Messages, Message{
				ID: m.ID, ThreadID: m.ThreadID, ReplyTo: m.ReplyTo, From: m.From,
				Subject: m.Subject, Body: m.Body, Urgent: m.Urgent, Sent: m.CreatedAt, ShownBefore: m.ShownNote,
			})
			watermark = max(watermark, m.ID)
		}
	}
	return runner.Prompt{Text: Render(d), Watermark: watermark, Mail: len(d.Messages)}, nil
}

// Release makes the mail claimed for a session that never started pending
// again.
func (b *Builder) Release(ctx context.Context, sessionID string) error {
	if b.Mail == nil {
		return nil
	}
	if _, err := b.Mail.Unconsume(ctx, sessionID); err != nil {
		return fmt.Errorf("return mail of session %s: %w", sessionID, err)
	}
	return nil
}

// Settle acknowledges the mail of a completed session, or records why the
// session did not complete so that the next prompt says so.
func (b *Builder) Settle(ctx context.Context, s runner.Settlement) error {
	if b.Mail == nil {
		return nil
	}
	var err error
	if s.Completed {
		ended := s.Ended
		_, err = b.Mail.Ack(ctx, mailbox.SessionRecord{
			SessionID: s.SessionID, Agent: s.Agent, Seq: s.Seq, Started: s.Started, Ended: &ended,
		})
	} else {
		_, err = b.Mail.Unack(ctx, s.SessionID, s.Note)
	}
	if err != nil {
		return fmt.Errorf("settle mail of session %s: %w", s.SessionID, err)
	}
	return nil
}
