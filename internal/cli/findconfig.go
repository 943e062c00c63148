package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// configName is the config file every command looks for.
const configName = "swarmd.yaml"

// configEnv names a config file for every command that takes --config.
const configEnv = "SWARMD_CONFIG"

// FindConfig fills in a command's --config when it was not given, the way
// git finds .git: $SWARMD_CONFIG, else swarmd.yaml in the working directory
// or the nearest parent that has one. Found nowhere, it says where it
// looked; a command run where the store is given another way
// (SWARM_DB_PATH) goes on without it.
func FindConfig(cmd *cobra.Command, getenv func(string) string) error {
	f := cmd.Flags().Lookup("config")
	if f == nil || f.Changed {
		return nil
	}
	if p := getenv(configEnv); p != "" {
		return f.Value.Set(p)
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil // the default, relative, and its own error
	}
	found, err := searchUp(wd, configName)
	if err == nil {
		return f.Value.Set(found)
	}
	if getenv("SWARM_DB_PATH") != "" {
		return nil
	}
	return usagef("no %s in %s or any directory above it, and %s is not set: run `swarmd init` in your repository, or pass --config FILE",
		configName, wd, configEnv)
}

// searchUp returns dir/name or the same in the nearest parent of dir.
func searchUp(dir, name string) (string, error) {
	for {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("look for %s: %w", p, err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fs.ErrNotExist
		}
		dir = parent
	}
}
