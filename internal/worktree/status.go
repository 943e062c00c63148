package worktree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"go.uber.org/zap"
)

// Status describes an agent's worktree and branch.
type Status struct {
	Agent      string
	Branch     string
	Head       string // the worktree's HEAD, or the branch tip when the worktree is missing
	Ahead      int    // commits on Head not in the base commit
	Behind     int    // commits in the base commit not on Head
	Dirty      bool
	DirtyFiles []string // paths relative to the worktree, as git status prints them
	Exists     bool     // the worktree directory exists and is this agent's, on its branch
	Problem    string   // why a directory at the worktree path is not usable, if one is there
}

// Commit is a commit summary for prompts.
type Commit struct {
	Hash    string
	Subject string
}

// Status reports the agent's worktree: HEAD, ahead/behind the base commit and
// uncommitted changes. ErrNoWorktree when the agent has neither a worktree
// nor a branch.
func (m *Manager) Status(ctx context.Context, agent string) (Status, error) {
	return m.status(ctx, agent, true)
}

// Look is Status without Ahead and Behind: what a prompt needs (the HEAD,
// the uncommitted files). Counting against the base commit, fixed at the
// daemon's start, walked every commit merged since then (git rev-list,
// no commit-graph): each prompt cost more as the swarm's history grew,
// 3.7 to 25 ms of CPU within a 20-minute soak run and about 0.9 s at a
// month's 250,000 commits.
func (m *Manager) Look(ctx context.Context, agent string) (Status, error) {
	return m.status(ctx, agent, false)
}

func (m *Manager) status(ctx context.Context, agent string, counts bool) (Status, error) {
	if err := checkName(agent); err != nil {
		return Status{}, err
	}
	st := Status{Agent: agent, Branch: m.Branch(agent)}
	in, err := m.inspect(agent)
	if err != nil {
		return Status{}, err
	}
	var head plumbing.Hash
	hasBranch := true
	switch in.state {
	case wtOK:
		// On its branch: the inspection read the tip, no second read.
		st.Exists = true
		head = in.head
	case wtForeign, wtOffBranch:
		st.Problem = in.reason
	}
	if !st.Exists {
		if head, hasBranch, err = m.branchTip(agent); err != nil {
			return Status{}, err
		}
	}
	if !st.Exists && !hasBranch {
		if st.Problem != "" {
			return st, nil
		}
		return Status{}, fmt.Errorf("status of agent %s: %w or branch", agent, ErrNoWorktree)
	}
	st.Head = head.String()
	if counts {
		if st.Behind, st.Ahead, err = m.leftRight(ctx, m.base, head); err != nil {
			if m.notYet(ctx, &st) {
				return st, nil
			}
			return Status{}, fmt.Errorf("status of agent %s: %w", agent, err)
		}
	}
	if st.Exists {
		if st.DirtyFiles, err = m.cachedDirtyFiles(ctx, m.Path(agent), in.adminDir, head); err != nil {
			if !counts && m.notYet(ctx, &st) {
				return st, nil
			}
			return Status{}, fmt.Errorf("status of agent %s: %w", agent, err)
		}
		st.Dirty = len(st.DirtyFiles) > 0
	}
	return st, nil
}

// notYet reports, after a git that read st's HEAD failed, whether the
// repository lacks that commit, and says so in st.Problem: a running
// sandboxed session's commits wait in its agent's quarantine until it
// ends, so the branch names a commit the repository does not have yet.
// Not an error of the listing.
func (m *Manager) notYet(ctx context.Context, st *Status) bool {
	if _, err := m.git.run(ctx, m.repo, "cat-file", "-e", st.Head); err == nil {
		return false
	}
	st.Problem = "its HEAD " + st.Head[:12] + " is not in the repository yet (a sandboxed session's commits are moved there when it ends)"
	return true
}

// List reports every agent that has a branch (swarm/*/work) or a worktree
// registered under StateDir/worktrees, sorted by name.
func (m *Manager) List(ctx context.Context) ([]Status, error) {
	agents := map[string]bool{}
	r, err := m.openRepo()
	if err != nil {
		return nil, err
	}
	branches, err := r.Branches()
	if err != nil {
		return nil, fmt.Errorf("list branches: %w", err)
	}
	err = branches.ForEach(func(ref *plumbing.Reference) error {
		if agent, ok := agentOfBranch(ref.Name().Short()); ok {
			agents[agent] = true
		}
		return nil
	})
	branches.Close()
	if err != nil {
		return nil, fmt.Errorf("list branches: %w", err)
	}
	regs, err := m.registrations()
	if err != nil {
		return nil, err
	}
	for _, reg := range regs {
		if agent, ours := m.ownRegistration(reg.path); ours {
			agents[agent] = true
		}
	}
	names := make([]string, 0, len(agents))
	for a := range agents {
		names = append(names, a)
	}
	sort.Strings(names)
	out := make([]Status, 0, len(names))
	for _, a := range names {
		st, err := m.Status(ctx, a)
		if errors.Is(err, ErrNoWorktree) {
			continue // a registration whose directory and branch are both gone
		}
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// RecentCommits returns up to n commits from the agent's HEAD, newest first.
func (m *Manager) RecentCommits(ctx context.Context, agent string, n int) ([]Commit, error) {
	if err := checkName(agent); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	in, err := m.inspect(agent)
	if err != nil {
		return nil, err
	}
	head := in.head
	if in.state != wtOK {
		tip, ok, err := m.branchTip(agent)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("recent commits of agent %s: %w or branch", agent, ErrNoWorktree)
		}
		head = tip
	}
	r, err := m.openRepo()
	if err != nil {
		return nil, err
	}
	iter, err := r.Log(&git.LogOptions{From: head, Order: git.LogOrderCommitterTime})
	if err != nil {
		return nil, fmt.Errorf("recent commits of agent %s: %w", agent, err)
	}
	defer iter.Close()
	commits := make([]Commit, 0, n)
	for len(commits) < n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c, err := iter.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("recent commits of agent %s: %w", agent, err)
		}
		subject, _, _ := strings.Cut(strings.TrimSpace(c.Message), "\n")
		commits = append(commits, Commit{Hash: c.Hash.String(), Subject: strings.TrimSpace(subject)})
	}
	return commits, nil
}

// Prune removes the agent's worktree and branch, but only when nothing would
// be lost: no uncommitted changes, and every commit of the branch reachable
// from the current tip of BaseRef (re-resolved now, so work merged since Open
// counts as merged, and work whose base was rewound does not). Otherwise it
// returns a *HasWorkError saying why. Ignored files (build output) go with
// the worktree, as with "git worktree remove". The caller makes sure the
// agent is stopped.
func (m *Manager) Prune(ctx context.Context, agent string) error {
	if err := checkName(agent); err != nil {
		return err
	}
	unlockAgent, err := m.agents.lock(ctx, agent)
	if err != nil {
		return fmt.Errorf("prune agent %s: %w", agent, err)
	}
	defer unlockAgent()
	unlock, err := m.lock(ctx)
	if err != nil {
		return fmt.Errorf("prune agent %s: %w", agent, err)
	}
	defer unlock()

	path := m.Path(agent)
	in, err := m.inspect(agent)
	if err != nil {
		return err
	}
	if in.state == wtForeign || in.state == wtOffBranch {
		return &ForeignDirError{Agent: agent, Path: path, Reason: in.reason, Fix: in.fix}
	}
	tip, hasBranch, err := m.branchTip(agent)
	if err != nil {
		return err
	}
	if in.state != wtOK && !hasBranch {
		return fmt.Errorf("prune agent %s: %w or branch", agent, ErrNoWorktree)
	}

	work := &HasWorkError{Agent: agent, Base: m.baseRef}
	head := tip
	if in.state == wtOK {
		head = in.head
		if in.rebasing {
			work.Reason = "a rebase is in progress"
		}
		dirty, err := m.dirtyFiles(ctx, path, in.adminDir)
		if err != nil {
			return fmt.Errorf("prune agent %s: %w", agent, err)
		}
		work.DirtyFiles = len(dirty)
	}
	r, err := m.openRepo()
	if err != nil {
		return err
	}
	base, err := resolveBase(r, m.repo, m.baseRef)
	if err != nil {
		return fmt.Errorf("prune agent %s: %w", agent, err)
	}
	if _, work.Unmerged, err = m.leftRight(ctx, base, head); err != nil {
		return fmt.Errorf("prune agent %s: %w", agent, err)
	}
	if hasBranch && tip != head {
		// Only during a rebase; count the branch's own commits too.
		_, n, err := m.leftRight(ctx, base, tip)
		if err != nil {
			return fmt.Errorf("prune agent %s: %w", agent, err)
		}
		work.Unmerged = max(work.Unmerged, n)
	}
	if work.DirtyFiles > 0 || work.Unmerged > 0 || work.Reason != "" {
		return work
	}

	switch in.state {
	case wtOK:
		// Without --force: git checks again that the tree is clean.
		if _, err := m.git.run(ctx, m.repo, "worktree", "remove", path); err != nil {
			return fmt.Errorf("prune agent %s: %w", agent, err)
		}
	case wtEmpty:
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("prune agent %s: %w", agent, err)
		}
		fallthrough
	case wtIncomplete:
		if in.state == wtIncomplete {
			if err := m.removeIncomplete(agent, in); err != nil {
				return err
			}
		}
		fallthrough
	default:
		if err := m.pruneStale(ctx); err != nil {
			return fmt.Errorf("prune agent %s: %w", agent, err)
		}
	}
	if hasBranch {
		// "git branch -D" rather than a ref deletion: it refuses a branch
		// checked out in another worktree. Merged-ness was checked above.
		if _, err := m.git.run(ctx, m.repo, "branch", "-D", m.Branch(agent)); err != nil {
			return fmt.Errorf("prune agent %s: %w", agent, err)
		}
	}
	m.log.Info("worktree pruned", zap.String("agent", agent), zap.String("path", path),
		zap.String("branch", m.Branch(agent)), zap.String("head", head.String()))
	return nil
}

// leftRight counts the commits reachable only from left and only from right.
// git's rev-list walks with the commit-graph; go-git would walk the whole
// history of an unmerged branch's base. Counts are remembered (countMemo):
// a session that made no commit asks the same question as the last one.
func (m *Manager) leftRight(ctx context.Context, left, right plumbing.Hash) (onlyLeft, onlyRight int, err error) {
	if left == right {
		return 0, 0, nil
	}
	if l, r, ok := m.counts.get(m.commonDir, left, right); ok {
		return l, r, nil
	}
	out, err := m.git.run(ctx, m.repo, "rev-list", "--left-right", "--count", left.String()+"..."+right.String())
	if err != nil {
		return 0, 0, err
	}
	l, r, ok := strings.Cut(strings.TrimSpace(out), "\t")
	if !ok {
		return 0, 0, fmt.Errorf("rev-list: unexpected output %q", out)
	}
	if onlyLeft, err = strconv.Atoi(l); err != nil {
		return 0, 0, fmt.Errorf("rev-list: unexpected output %q", out)
	}
	if onlyRight, err = strconv.Atoi(r); err != nil {
		return 0, 0, fmt.Errorf("rev-list: unexpected output %q", out)
	}
	m.counts.put(m.commonDir, left, right, onlyLeft, onlyRight)
	return onlyLeft, onlyRight, nil
}

// statusArgs are the daemon's git status in an agent's worktree. The
// flags pin what repository config could otherwise hide
// (status.showUntrackedFiles=no would make Prune lose files), and what
// the worktree could make git do: a repository nested in it that its
// index records as a gitlink (as "git add" of one does) is a submodule
// to git, which ran a git status in it, by that repository's config,
// which the sandbox writes: its filter ran as the daemon, outside the
// sandbox. So no submodule is looked into (all, not the default, which
// the worktree's .gitmodules overrides). A gitlink's own change is not
// listed then; Prune loses nothing by it ("git worktree remove" refuses
// a worktree with submodules), nor does a task line's reset (it leaves
// submodules alone).
var statusArgs = []string{"status", "--porcelain=v2", "-z", "--untracked-files=normal", "--ignore-submodules=all", "--no-renames"}

// dirtyFiles lists uncommitted changes in a worktree: modified, staged,
// conflicted and untracked files (statusArgs).
func (m *Manager) dirtyFiles(ctx context.Context, path, adminDir string) ([]string, error) {
	out, err := m.gitIn(ctx, path, adminDir, statusArgs...)
	if err != nil {
		return nil, err
	}
	return parsePorcelainV2(out), nil
}

// parsePorcelainV2 extracts the paths from "git status --porcelain=v2 -z".
func parsePorcelainV2(out string) []string {
	var files []string
	tokens := strings.Split(out, "\x00")
	for i := 0; i < len(tokens); i++ {
		t := tokens[i]
		if len(t) < 2 {
			continue
		}
		var fields []string
		switch t[0] {
		case '1': // 1 XY sub mH mI mW hH hI path
			fields = strings.SplitN(t, " ", 9)
		case '2': // 2 XY sub mH mI mW hH hI Xscore path, then origPath
			fields = strings.SplitN(t, " ", 10)
			i++
		case 'u': // u XY sub m1 m2 m3 mW h1 h2 h3 path
			fields = strings.SplitN(t, " ", 11)
		case '?', '!':
			fields = []string{t[2:]}
		default: // '#' headers
			continue
		}
		files = append(files, fields[len(fields)-1])
	}
	return files
}

// CommitsBetween counts the commits reachable from to but not from from:
// how many commits a session made, from its HEAD before and after. Equal
// hashes are 0 without running git.
func (m *Manager) CommitsBetween(ctx context.Context, from, to string) (int, error) {
	if from == to {
		return 0, nil
	}
	_, n, err := m.leftRight(ctx, plumbing.NewHash(from), plumbing.NewHash(to))
	if err != nil {
		return 0, fmt.Errorf("count commits %.12s..%.12s: %w", from, to, err)
	}
	return n, nil
}
