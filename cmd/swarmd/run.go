package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/cli"
	"github.com/swarmd/swarmd/internal/daemon"
)

// runMain is `swarmd run`: the daemon in the foreground.
type runMain struct {
	s          streams
	configPath string
	logFormat  string
	logLevel   string
}

func newRunCommand(s streams) *cobra.Command {
	m := &runMain{s: s}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the swarm in the foreground until SIGTERM or SIGINT",
		Long: `Run every agent of the config until SIGTERM or SIGINT. The first signal stops every agent
(sessions are cancelled and get their grace period; their logs stay in place until the next start
archives them), the second force-stops them at once. SIGHUP reloads the config: new agents start, removed agents stop, and changed roles,
backends, env and timeouts apply from each agent's next session; an invalid config is refused and
the running one kept.

A store that is unreachable or busy at start (a PostgreSQL server down or restarting, a SQLite file
another process keeps locked) is waited for: one log line says so, and the start goes on by itself
when the store answers; a stop signal ends the wait. A store that refuses (a wrong database name or
password, a schema of a newer swarmd) ends the start at once.

Exit status: 0 after a clean stop, 1 on a runtime failure, 2 for a bad config, a repository that is
not usable, or a state dir already in use by another swarmd (the error names its pid).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return m.Run(cmd.Context()) },
	}
	cmd.Flags().StringVarP(&m.configPath, "config", "c", "swarmd.yaml", "config file")
	cmd.Flags().StringVar(&m.logFormat, "log-format", "auto", "daemon log format: json, console, or auto (console on a terminal, else JSON for journald)")
	cmd.Flags().StringVar(&m.logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// setDaemonCPUs applies limits.daemon_cpus: how many threads run the
// daemon's Go code at once. Set through the runtime, not the environment,
// so that sessions keep theirs. A GOMAXPROCS in the environment is the
// operator's own choice, already applied by the runtime, and wins.
func setDaemonCPUs(n int) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	if n == 0 {
		runtime.SetDefaultGOMAXPROCS()
		return
	}
	runtime.GOMAXPROCS(n)
}

func (m *runMain) Run(ctx context.Context) error {
	cfg, err := cli.LoadConfig(m.configPath)
	if err != nil {
		return cli.Usage(err)
	}
	// First, before anything has side effects: it may execute the binary
	// again.
	treeSlack, slackErr := raiseTimerSlack(cfg.Limits.DaemonTimerSlack)
	// The signals next, before the first log line: a stop signal from
	// then on is the daemon's to handle (kept until the start can act on
	// it), not the kernel's default end; one before it finds nothing
	// started.
	sigs, stopSignals := notifySignals()
	defer stopSignals()
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)
	// A log pipe that closes (a terminal's tee, a log collector going
	// away) must not end the daemon with its sessions running: SIGPIPE
	// caught, a write to it fails with EPIPE instead. Caught, not ignored:
	// the sessions' programs get SIGPIPE's default back at exec, where an
	// ignored signal would stay ignored.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	log, err := newLogger(m.s.err, m.logFormat, m.logLevel)
	if err != nil {
		return cli.Usage(err)
	}
	defer func() { _ = log.Sync() }()
	if slackErr != nil {
		log.Warn("limits.daemon_timer_slack not applied; the daemon keeps the timer slack it was started with", zap.Error(slackErr))
	}
	daemon.LogConfigWarnings(log, cfg)
	stopPprof, err := servePprof(log)
	if err != nil {
		return cli.Usagef("run: %v", err)
	}
	defer stopPprof()

	// A start can wait (for leases a namesake may hold): a stop signal
	// meanwhile ends it, and the daemon then stops before running anything.
	openCtx, cancelOpen := context.WithCancel(ctx)
	defer cancelOpen() // not before: what Open started may keep its context
	early := make(chan os.Signal, 1)
	opened, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig := <-sigs:
			early <- sig
			cancelOpen()
		case <-opened:
		}
	}()
	d, err := daemon.Open(openCtx, cfg, daemon.Options{Log: log, Version: version, Commit: commit, LoadConfig: cli.LoadConfig,
		SessionCLI: runSessionCLI, SetCPUs: setDaemonCPUs, TreeTimerSlack: treeSlack})
	close(opened)
	<-watched // a signal it took is in early
	select {
	case sig := <-early:
		log.Info("signal received while starting: stopping before any agent runs", zap.Stringer("signal", sig))
		if err == nil {
			return d.Close()
		}
		if errors.Is(err, context.Canceled) {
			return nil
		}
	default:
	}
	if err != nil {
		var se *daemon.SetupError
		if errors.As(err, &se) {
			return cli.Usage(err)
		}
		return fmt.Errorf("start: %w", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- d.Run(runCtx) }()

wait:
	for {
		select {
		case <-hups:
			if err := d.Reload(m.configPath); err != nil {
				fields := []zap.Field{zap.Error(err)}
				if problems, ok := configProblems(err); ok {
					fields = append(fields, zap.Strings("problems", problems.Lines()))
				}
				log.Error("config reload refused; the running config stays", fields...)
			}
		case sig := <-sigs:
			log.Info("signal received, stopping every agent (a second signal force-stops)", zap.Stringer("signal", sig))
			collectLessWhileStopping()
			break wait
		case err := <-errc:
			d.Close()
			return err
		}
	}
	cancel()
	drained := make(chan error, 1)
	go func() { drained <- <-errc }()
	for {
		select {
		case sig := <-sigs:
			log.Warn("second signal: force-stopping every session", zap.Stringer("signal", sig))
			d.ForceStop()
		case err := <-drained:
			if cerr := d.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				log.Info("swarmd stopped cleanly")
			}
			return err
		}
	}
}
