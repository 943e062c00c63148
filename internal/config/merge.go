package config

import (
	"slices"
	"strings"
	"time"
	"unicode"

	mergequeue "github.com/swarmd/swarmd/internal/merge"
)

// Merge strategies: how the merge queue turns a worker's branch into one
// candidate commit on the target (docs/configuration.md, merge).
const (
	StrategyMerge  = "merge"  // a merge commit: parents the target and the worker's commit
	StrategySquash = "squash" // one commit on the target with the branch's whole change
	StrategyRebase = "rebase" // the branch's commits replayed on the target, one by one
)

var mergeStrategies = []string{StrategyMerge, StrategySquash, StrategyRebase}

// Defaults of the merge section.
const (
	DefaultMergeTimeout       = mergequeue.DefaultTimeout // 30m, the queue's
	DefaultMergeStrategy      = StrategyMerge
	DefaultMaxMergeRejections = 5
	// DefaultMergeBatch: up to 8 tasks gated together, the size adapting
	// to the gate's results (docs/merge-queue.md, Batches).
	DefaultMergeBatch = mergequeue.DefaultBatch
	MaxMergeBatch     = mergequeue.MaxBatch
	// MaxMergeParallel: the front batch's gate run and one ahead of it
	// (docs/merge-queue.md, Runs ahead).
	MaxMergeParallel = mergequeue.MaxParallel
)

// Merge configures the merge queue. Config.Merge is nil when swarmd.yaml has
// no merge section: then there is no queue, and DONE tasks close at once.
type Merge struct {
	Into     string        // the branch the queue advances, as a short name ("main")
	Gate     []string      // shell commands run in order on each candidate; none: clean merges go in untested
	Timeout  time.Duration // for the whole gate
	Strategy string        // StrategyMerge, StrategySquash or StrategyRebase
	// MaxRejections bounds the rework of one task the queue keeps sending
	// back: its MaxRejections-th rejection fails the task instead.
	MaxRejections int
	// Batch is the most tasks one gate run tests together; 1 is one at a
	// time.
	Batch int
	// Parallel is how many gate runs go at once: 2 runs the next batch's
	// gate on the front batch's candidate meanwhile; 1, one at a time.
	Parallel int
}

// mergeValues is the merge section as walked, finished by finishMerge.
type mergeValues struct {
	m   Merge
	set keySet
}

func (d *decoder) mergeFields(m *Merge) []field {
	m.Timeout, m.Strategy, m.MaxRejections, m.Batch, m.Parallel = DefaultMergeTimeout, DefaultMergeStrategy, DefaultMaxMergeRejections, DefaultMergeBatch, 1
	return []field{
		{"into", "The branch the merge queue advances (such as main); required.", d.strTo(&m.Into, true)},
		{"gate", "Shell commands run in order on each candidate in the integration worktree; all must exit 0.", d.strListTo(&m.Gate, true)},
		{"timeout", "The whole gate is killed after this long, and the candidate rejected.", d.durTo(&m.Timeout, false)},
		{"strategy", "How a branch becomes a candidate: merge (a merge commit), squash (one commit) or rebase (its commits replayed).",
			d.enumTo(&m.Strategy, mergeStrategies)},
		{"max_rejections", "Rejections (conflict, gate, timeout) that fail one task: each one before the last sends it back to its worker; the last fails it (merge_rejected) and tells the operator.",
			d.intTo(&m.MaxRejections, 1, maxInt)},
		{"batch", "The most tasks one gate run tests together (each still its own merge commit), the size adapting to red and green gates; a red batch is bisected to the task that fails it. 1: one at a time.",
			d.intTo(&m.Batch, 1, MaxMergeBatch)},
		{"parallel", "Gate runs at once. 2: while the gate tests a batch, the next batch, built on that batch's candidate, is tested beside it in a second worktree; its result counts if the first batch goes in. 1: one at a time.",
			d.intTo(&m.Parallel, 1, MaxMergeParallel)},
	}
}

// finishMerge checks the merge section, if there is one, and sets cfg.Merge.
func (d *decoder) finishMerge(cfg *Config, mv *mergeValues, line int) {
	if mv.set == nil {
		return // no merge section: no queue
	}
	ok := true
	if l, set := mv.set.line("into"); set {
		if problem := branchNameProblem(mv.m.Into); problem != "" {
			d.errorf(l, "merge.into", "%q %s", mv.m.Into, problem)
			ok = false
		}
	} else if !mv.set.present("into") {
		d.errorf(line, "merge.into", "is required: the branch the queue advances (add into: main)")
		ok = false
	} else {
		ok = false
	}
	if l, set := mv.set.line("strategy"); set && !slices.Contains(mergeStrategies, mv.m.Strategy) {
		d.errorf(l, "merge.strategy", "%q is not a merge strategy (want one of %s)", mv.m.Strategy, strings.Join(mergeStrategies, ", "))
		ok = false
	}
	if ok {
		m := mv.m
		cfg.Merge = &m
	}
}

// branchNameProblem says why name is not a branch the queue can advance,
// or "" when it is: git's check-ref-format rules for a short branch name,
// and none of swarmd's own agent branches.
func branchNameProblem(name string) string {
	switch {
	case strings.HasPrefix(name, "-"):
		return "must not start with \"-\" (name a branch such as main)"
	case strings.HasPrefix(name, "refs/"):
		return "is a full ref: give the branch's short name (main, not refs/heads/main)"
	case name == "HEAD" || name == "@":
		return "is not a branch: name the branch itself (such as main)"
	case strings.HasPrefix(name, "swarm/"):
		return "is an agent's branch: the queue merges agents' branches into another one"
	case strings.IndexFunc(name, badRefRune) >= 0:
		return "is not a branch name (it contains a space, a control character or one of ~^:?*[\\)"
	case strings.Contains(name, "..") || strings.Contains(name, "@{") || strings.Contains(name, "//"):
		return "is not a branch name (it contains \"..\", \"@{\" or \"//\")"
	case strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") || strings.HasSuffix(name, ".lock"):
		return "is not a branch name (it ends with \"/\", \".\" or \".lock\")"
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") {
			return "is not a branch name (a component starts with \".\")"
		}
	}
	return ""
}

func badRefRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("~^:?*[\\", r)
}
