package daemon

import (
	"fmt"
	"path/filepath"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/runner"
)

// buildBackends turns the config's named backends into runnable ones.
func buildBackends(cfg *config.Config, sup *proc.Supervisor) (map[string]runner.Backend, error) {
	out := make(map[string]runner.Backend, len(cfg.Backends))
	for name, b := range cfg.Backends {
		be, err := newBackend(b, sup, sessionFilesDir(cfg.StateDir))
		if err != nil {
			return nil, fmt.Errorf("backends.%s: %w", name, err)
		}
		out[name] = be
	}
	return out, nil
}

// sessionFilesDir is where backends write the files they give a session
// (Gemini CLI's tools policy): under the state directory, which no sandbox
// sees (each session's own are bound into its sandbox read-only), and
// emptied at each start of those a killed daemon left.
func sessionFilesDir(stateDir string) string { return filepath.Join(stateDir, "f") }

func newBackend(b config.Backend, sup *proc.Supervisor, filesDir string) (runner.Backend, error) {
	env := envList(b.Env)
	switch b.Type {
	case config.TypeScripted:
		return backend.NewScripted(sup, backend.ScriptedConfig{Name: b.Name, Steps: b.Steps, CancelSignal: b.Signal()})
	case config.TypeCommand:
		return backend.NewCommand(sup, backend.CommandConfig{Name: b.Name, Command: b.Command, Args: b.Args, CancelSignal: b.Signal(), Env: env})
	case config.TypeClaude, config.TypeCodex, config.TypeGemini:
		cli := backend.AgentCLIConfig{
			Name: b.Name, Command: b.Command, Args: b.Args, Model: b.Model, AllowedTools: b.AllowedTools,
			CancelSignal: b.Signal(), Env: env, FilesDir: filesDir,
		}
		switch b.Type {
		case config.TypeClaude:
			return backend.NewClaude(sup, cli)
		case config.TypeCodex:
			return backend.NewCodex(sup, cli)
		default:
			return backend.NewGemini(sup, cli)
		}
	default:
		return nil, fmt.Errorf("unknown backend type %q", b.Type)
	}
}
