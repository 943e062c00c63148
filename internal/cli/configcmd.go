package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/proc"
)

// NewConfigCommand is `swarmd config validate|schema`.
func NewConfigCommand(s Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Work with swarmd.yaml",
	}
	cmd.AddCommand(newConfigValidateCmd(s, nil), newConfigSchemaCmd(s))
	return cmd
}

// configValidateOptions are `swarmd config validate`'s.
type configValidateOptions struct {
	IO         Streams
	ConfigPath string
}

// newConfigValidateCmd is `swarmd config validate`; runF (nil:
// configValidateRun) runs it.
func newConfigValidateCmd(s Streams, runF func(context.Context, *configValidateOptions) error) *cobra.Command {
	opts := &configValidateOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Load and validate a config; every problem is printed as FILE:LINE: KEY: what is wrong (what to do)",
		Long: `Load and validate a config as 'swarmd run' would: every key and value, role files, that the
program of every backend an agent uses can be found (in PATH, or at its path), that the repository
is a git work tree whose base_ref is a commit, that merge.into is a branch, and that the listen
address is free. Every problem is printed,
one line each as FILE:LINE: KEY: what is wrong (what to do), and the exit status is 2. Warnings (such as
a listen address open to other machines) are printed the same way but do not fail validation.

Every key, its default and its rule: docs/configuration.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return orRun(runF, configValidateRun)(cmd.Context(), opts) },
	}
	cmd.Flags().StringVarP(&opts.ConfigPath, "config", "c", "swarmd.yaml", "config file")
	return cmd
}

func configValidateRun(ctx context.Context, opts *configValidateOptions) error {
	cfg, err := LoadConfig(opts.ConfigPath)
	if err != nil {
		return usage(err)
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintln(opts.IO.Err, w.Error())
	}
	if problems := runnable(ctx, cfg); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(opts.IO.Err, p)
		}
		return usagef("%s: %d problem(s) that stop swarmd run", cfg.Path, len(problems))
	}
	_, err = fmt.Fprintf(opts.IO.Out, "%s: ok (%d agents, state dir %s)\n", cfg.Path, len(cfg.Agents), cfg.StateDir)
	return err
}

// newConfigSchemaCmd is `swarmd config schema`: it takes no options.
func newConfigSchemaCmd(s Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of swarmd.yaml, for editors",
		Long: `Print the JSON Schema (draft 2020-12) of swarmd.yaml. Editors with a YAML language server complete and
check the config with it: 'swarmd init' writes it next to the config as .swarmd.schema.json and points the
config's first line at it. After upgrading swarmd, refresh it with

  swarmd config schema > .swarmd.schema.json

The schema checks keys, types and patterns; 'swarmd config validate' checks the rest.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			data, err := config.JSONSchema()
			if err != nil {
				return err
			}
			_, err = s.Out.Write(data)
			return err
		},
	}
}

// LoadConfig loads the config for validate, run and reload: the file, and
// that every backend's program can be started.
func LoadConfig(path string) (*config.Config, error) {
	return config.LoadWith(path, config.Options{LookPath: lookPathAsSessions})
}

// lookPathAsSessions finds a program in the PATH a session gets: this
// binary's directory first (so that sessions can run swarmd mail), then the
// PATH that env sets, else the daemon's own.
func lookPathAsSessions(file string, env []string) (string, error) {
	path := os.Getenv("PATH")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	if p := daemon.SelfFirst(path); p != "" {
		path = p
	}
	return proc.LookPath(file, []string{"PATH=" + path})
}
