package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/backup"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/worktree"
)

// backupOptions are `swarmd backup`'s and `swarmd restore`'s.
type backupOptions struct {
	IO         Streams
	ConfigPath string
	File       string
	Now        func() time.Time
}

// NewBackupCommands are `swarmd backup` and `swarmd restore`.
func NewBackupCommands(s Streams) []*cobra.Command {
	return []*cobra.Command{newBackupCmd(s, nil), newRestoreCmd(s, nil)}
}

// newBackupCmd is `swarmd backup`; runF (nil: backupRun) runs it.
func newBackupCmd(s Streams, runF func(context.Context, *backupOptions) error) *cobra.Command {
	opts := &backupOptions{IO: s, Now: time.Now}
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Copy the swarm's store to FILE while the daemon runs: consistent, checked, never over a file",
		Long: `Copy swarm.db to FILE, a new file: the store as one transaction saw it, while the daemon goes
on writing, compacted, checked whole by SQLite's integrity check, and marked with the time it was
taken. FILE appears only once the copy is complete and synced to disk; a copy cut short leaves
nothing there. An existing FILE is refused, never replaced.

Put a copy back with 'swarmd restore FILE'. A PostgreSQL store is copied with PostgreSQL's own
tools (pg_dump); see docs/operations.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			return orRun(runF, backupRun)(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVarP(&opts.ConfigPath, "config", "c", configName, "config file (names the store)")
	return cmd
}

// newRestoreCmd is `swarmd restore`; runF (nil: restoreRun) runs it.
func newRestoreCmd(s Streams, runF func(context.Context, *backupOptions) error) *cobra.Command {
	opts := &backupOptions{IO: s, Now: time.Now}
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Put a backup in place of the swarm's store, the daemon stopped; nothing since is overwritten",
		Long: `Put FILE, a copy 'swarmd backup' made, in place of swarm.db. The daemon must be stopped: the
state dir's lock is held for the whole restore, so none starts meanwhile.

The copy is checked whole, and brought to this swarmd's schema if older. The store it replaces,
with its WAL, is moved (not deleted) into before-restore-TIME/ in the state dir.

What the swarm did after the backup is not in the copy, but its traces are kept apart from what
comes next:
  - sessions go on after the highest seq each agent's logs hold, live or archived, and the merge
    gate's runs after the highest of logs/merge/: no log is written to twice;
  - a task id the repository names (a line swarm/task/N, a merge commit's Swarmd-Task trailer on
    the merge target) that the copy has not is kept by a CANCELLED task of that id, which says
    where its work is: no new task takes over its line;
  - a task line that moved after the backup has its head kept under refs/swarmd/restored/;
  - a task merged on the target that the copy has not closed is listed.

Tasks added, mail sent, and reports made after the backup are not restored.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			return orRun(runF, restoreRun)(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVarP(&opts.ConfigPath, "config", "c", configName, "config file (names the store, the state dir and the repository)")
	return cmd
}

func backupRun(ctx context.Context, opts *backupOptions) error {
	who, err := whoCalls(opts.IO.Getenv, "backup")
	if err != nil {
		return err
	}
	if !who.isOperator() {
		return usagef("backup: an operator command; agent %s's session may not run it", who.name)
	}
	cfg, err := (&operateOptions{ConfigPath: opts.ConfigPath}).config()
	if err != nil {
		return err
	}
	if cfg.SharedStore() {
		return usagef("backup: the store is PostgreSQL (%s): copy it with pg_dump", store.Redact(cfg.StoreTarget()))
	}
	db, err := store.Open(ctx, cfg.StoreTarget(), store.Options{NoCreate: true})
	if err != nil {
		if errors.Is(err, store.ErrNoDatabase) {
			return usagef("backup: %v (no daemon has run with %s yet)", err, opts.ConfigPath)
		}
		return fmt.Errorf("backup: %w", err)
	}
	defer db.Close()
	c, err := backup.Copy(ctx, db, opts.File, opts.Now())
	if err != nil {
		if errors.Is(err, backup.ErrExists) {
			return usage(err)
		}
		return err
	}
	fmt.Fprintf(opts.IO.Out, "backed up %s to %s (%s, taken at %s)\n", db.Path(), c.Path, sizeOf(c.Bytes), c.TakenAt.UTC().Format(time.RFC3339))
	return nil
}

func restoreRun(ctx context.Context, opts *backupOptions) error {
	who, err := whoCalls(opts.IO.Getenv, "restore")
	if err != nil {
		return err
	}
	if !who.isOperator() {
		return usagef("restore: an operator command; agent %s's session may not run it", who.name)
	}
	cfg, err := (&operateOptions{ConfigPath: opts.ConfigPath}).config()
	if err != nil {
		return err
	}
	if cfg.SharedStore() {
		return usagef("restore: the store is PostgreSQL (%s): restore it with pg_restore", store.Redact(cfg.StoreTarget()))
	}
	// A new machine's state dir may not exist yet: the restore makes it,
	// as a daemon would (the operator's alone).
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("restore: create the state dir: %w", err)
	}
	release, err := daemon.HoldStateDir(cfg.StateDir)
	if err != nil {
		return usagef("restore: %v", err)
	}
	defer release()
	r := &backup.Restore{From: opts.File, StateDir: cfg.StateDir, Now: opts.Now,
		Logs: logs.New(cfg.StateDir, cfg.Logs.KeepArchives, cfg.Logs.MaxAge, nil)}
	if cfg.Merge != nil {
		r.Into = cfg.Merge.Into
	}
	if m, err := worktree.Open(ctx, worktree.Options{Repo: cfg.Repo, StateDir: cfg.StateDir, BaseRef: cfg.BaseRef, Log: zap.NewNop()}); err != nil {
		fmt.Fprintf(opts.IO.Err, "warning: restore: the repository was not read (%v): task ids it names are not kept from new tasks\n", oneLine(err.Error()))
	} else {
		r.Repo = m
	}
	rep, err := r.Run(ctx)
	if errors.Is(err, backup.ErrNotBackup) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, store.ErrSchemaTooNew) {
		return usage(err)
	}
	if err != nil {
		return err
	}
	printRestore(opts, rep)
	return nil
}

// printRestore says what a restore did, a line each.
func printRestore(opts *backupOptions, rep backup.Report) {
	w := opts.IO.Out
	taken := "at a time it does not record (it was not made by swarmd backup)"
	if !rep.TakenAt.IsZero() {
		taken = "taken at " + rep.TakenAt.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "restored %s from %s, %s\n", rep.Store, opts.File, taken)
	if rep.Aside != "" {
		fmt.Fprintf(w, "the store it replaced is in %s\n", rep.Aside)
	}
	for _, f := range rep.Floors {
		fmt.Fprintf(w, "%s: numbered after %d, its logs' highest (the backup had %d)\n", f.Agent, f.Logs, f.Backup)
	}
	for _, id := range rep.Reserved {
		fmt.Fprintf(w, "task %d: made after the backup; kept as a CANCELLED task that says where its work is (swarmd task show %d)\n", id, id)
	}
	for _, m := range rep.Merged {
		fmt.Fprintf(w, "task %d: merged as %.12s, but %s in the backup: check it (swarmd task show %d)\n", m.Task, m.Commit, m.State, m.Task)
	}
	for _, k := range rep.Kept {
		fmt.Fprintf(w, "task %d: its line moved after the backup; its head %.12s is kept as %s\n", k.Task, k.Head, k.Ref)
	}
	if rep.Target != "" {
		fmt.Fprintf(w, "the merge target moved from %.12s to %.12s after the backup, by the merge queue's merges alone: known there now\n", rep.TargetWas, rep.Target)
	}
	if rep.NoRepo {
		fmt.Fprintln(w, "the repository was not read: task ids it names were not kept from new tasks")
	}
}

// sizeOf is n bytes for a person.
func sizeOf(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
