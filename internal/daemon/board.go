package daemon

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// settingMergeInto records the daemon's merge.into in swarm.db ("" : no
// merge queue), so that every process's board agrees on who closes a DONE
// task: the merge queue, once the work is merged, or the board at once.
const settingMergeInto = "merge.into"

// settingReviewers records every configured agent's reviewer and
// max_iterations in swarm.db, so that a claim made by `swarmd task claim`
// inside a session (which reads no config) gets the review its agent is
// configured for. The daemon writes it at start and on every reload; the
// session's environment is not asked, since an agent could change it to
// skip its review.
const settingReviewers = "review.agents"

// reviewSetting is one agent's entry of settingReviewers.
type reviewSetting struct {
	Reviewer      string `json:"reviewer,omitempty"`
	MaxIterations int    `json:"max_iterations,omitempty"`
	ReviewOnly    bool   `json:"review_only,omitempty"` // claims no unassigned task (config.Config.ReviewOnly)
}

// ReviewPolicy is what the config says about reviews: who reviews an
// agent's tasks and in how many rounds, and which agents only review
// (claim no unassigned task). Either func may be nil.
type ReviewPolicy struct {
	ReviewerOf func(agent string) (reviewer string, maxIterations int)
	ReviewOnly func(agent string) bool
}

// RecordReviewers writes cfg's reviewers as settingReviewers.
func RecordReviewers(ctx context.Context, db *store.DB, cfg *config.Config) error {
	m := make(map[string]reviewSetting, len(cfg.Agents))
	for _, a := range cfg.Agents {
		m[a.Name] = reviewSetting{Reviewer: a.Reviewer, MaxIterations: a.MaxIterations, ReviewOnly: cfg.ReviewOnly(a.Name)}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("record reviewers: %w", err)
	}
	if err := db.SetSetting(ctx, settingReviewers, string(b)); err != nil {
		return fmt.Errorf("record reviewers: %w", err)
	}
	return nil
}

// RecordedReviewPolicy is what the daemon recorded about reviewing each
// agent's tasks; an agent it recorded nothing for has no reviewer and
// claims.
func RecordedReviewPolicy(ctx context.Context, db *store.DB) (*ReviewPolicy, error) {
	v, ok, err := db.Setting(ctx, settingReviewers)
	if err != nil {
		return nil, fmt.Errorf("read the recorded reviewers: %w", err)
	}
	m := map[string]reviewSetting{}
	if ok && v != "" {
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return nil, fmt.Errorf("read the recorded reviewers: setting %s: %w", settingReviewers, err)
		}
	}
	return &ReviewPolicy{
		ReviewerOf: func(agent string) (string, int) { r := m[agent]; return r.Reviewer, r.MaxIterations },
		ReviewOnly: func(agent string) bool { return m[agent].ReviewOnly },
	}, nil
}

// OpenTaskBoard is the task board in db, as the daemon and every `swarmd
// task` process use it. Without a merge queue a DONE task that no reviewer
// holds is CLOSED at once; with one, the queue closes it once merged.
// p may be nil (a process that claims for no configured agent). Which of
// the two it is, the setting the daemon recorded says: a read of it the
// store cut short is an error, never taken for no merge queue, which
// would close a DONE task unmerged.
func OpenTaskBoard(ctx context.Context, db *store.DB, p *ReviewPolicy) (*taskboard.Board, error) {
	into, _, err := db.Setting(ctx, settingMergeInto)
	if err != nil {
		return nil, fmt.Errorf("read whether a merge queue closes the tasks (setting %s): %w", settingMergeInto, err)
	}
	return newTaskBoard(db, into, p), nil
}

// newTaskBoard is the task board in db under merge target into ("": no
// merge queue).
func newTaskBoard(db *store.DB, into string, p *ReviewPolicy) *taskboard.Board {
	opts := taskboard.Options{AutoClose: into == "", FrozenHead: into != ""}
	if p != nil {
		opts.ReviewerOf, opts.ReviewOnly = p.ReviewerOf, p.ReviewOnly
	}
	return taskboard.New(db, opts)
}

// ConfigReviewPolicy is what cfg's agents say about reviews (cfg is read
// at each use: a reload applies at once).
func ConfigReviewPolicy(cfg func() *config.Config) *ReviewPolicy {
	return &ReviewPolicy{
		ReviewerOf: func(agent string) (string, int) {
			a, ok := cfg().Agent(agent)
			if !ok {
				return "", 0
			}
			return a.Reviewer, a.MaxIterations
		},
		ReviewOnly: func(agent string) bool { return cfg().ReviewOnly(agent) },
	}
}
