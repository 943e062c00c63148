// Command worktree compares creating N agent worktrees through
// worktree.Manager.Ensure with a plain loop of "git worktree add -b" on the
// same repository, interleaving the two worktree by worktree so that load
// from other processes affects both alike. Requirement: Ensure ≤ 1.1× the
// plain loop. Manager.Open (once per daemon start) is not timed.
//
//	go run ./bench/worktree -files 5000 -n 50 -rounds 3
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/internal/worktree"
)

type config struct {
	files  int
	n      int
	rounds int
	dir    string
}

func main() {
	var cfg config
	flag.IntVar(&cfg.files, "files", 5000, "files in the repository's commit")
	flag.IntVar(&cfg.n, "n", 50, "worktrees created per run")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds (each from a repository without worktrees)")
	flag.StringVar(&cfg.dir, "dir", "", "parent directory for the repository (default: the temp dir)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench worktree:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	root, err := os.MkdirTemp(cfg.dir, "swarmd-bench-worktree-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	repo := filepath.Join(root, "repo")
	if err := buildRepo(ctx, repo, cfg.files); err != nil {
		return fmt.Errorf("build repository: %w", err)
	}
	base, err := git(ctx, repo, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "repository: %d files; %d worktrees per method per round, %d rounds\n", cfg.files, cfg.n, cfg.rounds)

	// Interleave the two methods worktree by worktree (alternating which
	// goes first), so that load from other processes falls on both alike.
	plain := func(ctx context.Context, stateDir string, i int) error {
		agent := fmt.Sprintf("p%02d", i)
		path := filepath.Join(stateDir, "plain", agent)
		_, err := git(ctx, repo, "worktree", "add", "-b", "swarm/"+agent, path, base)
		return err
	}
	var plainTotal, ensureTotal time.Duration
	var ratios []float64
	for r := range cfg.rounds {
		stateDir := filepath.Join(root, fmt.Sprintf("state%d", r))
		m, err := worktree.Open(ctx, worktree.Options{Repo: repo, StateDir: stateDir})
		if err != nil {
			return err
		}
		ensure := func(ctx context.Context, stateDir string, i int) error {
			_, err := m.Ensure(ctx, fmt.Sprintf("a%02d", i))
			return err
		}
		var p, e time.Duration
		for i := range cfg.n {
			first, second := plain, ensure
			firstSum, secondSum := &p, &e
			if (i+r)%2 == 1 {
				first, second = ensure, plain
				firstSum, secondSum = &e, &p
			}
			d, err := timeOp(ctx, stateDir, i, first)
			if err != nil {
				return err
			}
			*firstSum += d
			if d, err = timeOp(ctx, stateDir, i, second); err != nil {
				return err
			}
			*secondSum += d
		}
		plainTotal += p
		ensureTotal += e
		ratios = append(ratios, e.Seconds()/p.Seconds())
		fmt.Fprintf(out, "round %d  git worktree add %6.2fs  Manager.Ensure %6.2fs  ratio %.3f\n", r+1, p.Seconds(), e.Seconds(), ratios[r])
		if err := reset(ctx, repo, stateDir); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	}
	slices.Sort(ratios)
	fmt.Fprintf(out, "total    git worktree add %6.2fs  Manager.Ensure %6.2fs  (%d worktrees each)\n",
		plainTotal.Seconds(), ensureTotal.Seconds(), cfg.n*cfg.rounds)
	fmt.Fprintf(out, "ratio Ensure/plain: %.3f (total), %.3f (median of rounds)\n",
		ensureTotal.Seconds()/plainTotal.Seconds(), ratios[len(ratios)/2])
	return nil
}

func timeOp(ctx context.Context, stateDir string, i int, f func(context.Context, string, int) error) (time.Duration, error) {
	start := time.Now()
	err := f(ctx, stateDir, i)
	return time.Since(start), err
}

// reset removes every linked worktree and swarm/* branch, so each run starts
// from the same repository.
func reset(ctx context.Context, repo, stateDir string) error {
	if err := os.RemoveAll(stateDir); err != nil {
		return err
	}
	if _, err := git(ctx, repo, "worktree", "prune"); err != nil {
		return err
	}
	refs, err := git(ctx, repo, "for-each-ref", "--format=delete %(refname)", "refs/heads/swarm/")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "git", "-C", repo, "update-ref", "--stdin")
	cmd.Stdin = strings.NewReader(refs + "\n")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("delete branches: %w: %s", err, b)
	}
	// Flush the deletions now, so the next run does not pay for them.
	syscall.Sync()
	return nil
}

// buildRepo writes one commit of n files with git fast-import.
func buildRepo(ctx context.Context, dir string, n int) error {
	if _, err := git(ctx, "", "init", "-q", "-b", "main", dir); err != nil {
		return err
	}
	var stream bytes.Buffer
	stream.WriteString("commit refs/heads/main\ncommitter Bench <bench@example.com> 1700000000 +0000\ndata 6\nfiles\n")
	for i := range n {
		content := fmt.Sprintf("package pkg\n\n// file %d\nvar V%d = %d\n", i, i, i)
		fmt.Fprintf(&stream, "M 100644 inline pkg%03d/f%04d.go\ndata %d\n%s\n", i/100, i, len(content), content)
	}
	cmd := exec.CommandContext(ctx, "git", "-C", dir, "fast-import", "--quiet")
	cmd.Stdin = &stream
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fast-import: %w: %s", err, b)
	}
	return nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(b)), nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}
