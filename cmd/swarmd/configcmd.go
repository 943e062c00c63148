package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/config"
)

func newConfigCommand(s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Work with swarmd.yaml",
	}
	var path string
	validate := &cobra.Command{
		Use:   "validate",
		Short: "Load and validate a config; every error names the file, line and key",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cfg, err := config.Load(path)
			if err != nil {
				return usage(err)
			}
			_, err = fmt.Fprintf(s.out, "%s: ok (%d agents, state dir %s)\n", cfg.Path, len(cfg.Agents), cfg.StateDir)
			return err
		},
	}
	validate.Flags().StringVarP(&path, "config", "c", "swarmd.yaml", "config file")
	cmd.AddCommand(validate)
	return cmd
}
