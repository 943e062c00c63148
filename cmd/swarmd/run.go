package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/config"
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
(sessions are cancelled and get their grace period, logs are archived), the second force-stops them
at once. SIGHUP reloads the config: new agents start, removed agents stop, and changed roles,
backends, env and timeouts apply from each agent's next session; an invalid config is refused and
the running one kept.

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

func (m *runMain) Run(ctx context.Context) error {
	cfg, err := loadConfig(m.configPath)
	if err != nil {
		return usage(err)
	}
	log, err := newLogger(m.s.err, m.logFormat, m.logLevel)
	if err != nil {
		return usage(err)
	}
	defer func() { _ = log.Sync() }()
	logConfigWarnings(log, cfg)

	sigs, stopSignals := notifySignals()
	defer stopSignals()
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)

	d, err := openDaemon(ctx, cfg, log)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			return err
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
			if err := d.reload(m.configPath); err != nil {
				fields := []zap.Field{zap.Error(err)}
				if problems, ok := configProblems(err); ok {
					fields = append(fields, zap.Strings("problems", problems.Lines()))
				}
				log.Error("config reload refused; the running config stays", fields...)
			}
		case sig := <-sigs:
			log.Info("signal received, stopping every agent (a second signal force-stops)", zap.Stringer("signal", sig))
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

// shutdownTimeout bounds how long a stop may take before sessions are killed
// regardless: the longest grace period plus a margin for archiving.
func shutdownTimeout(cfg *config.Config) time.Duration {
	g := cfg.Defaults.GracePeriod
	for _, a := range cfg.Agents {
		g = max(g, a.GracePeriod)
	}
	return g + 30*time.Second
}

// logConfigWarnings logs what `swarmd config validate` prints as warnings.
func logConfigWarnings(log *zap.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings {
		log.Warn("config: "+w.Msg, zap.String("file", w.File), zap.Int("line", w.Line), zap.String("key", w.Key))
	}
}
