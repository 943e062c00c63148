package logs

import (
	"os"
	"path/filepath"
)

// Modes of what WritePrompt creates: the agent's log directory and the
// prompt, which may quote mail, readable by the daemon's group only.
const (
	promptDirMode  = 0o750
	promptFileMode = 0o640
)

// WritePrompt writes the prompt a session is given to path, creating its
// directory. path is PromptPath's; it is an argument, not agent and seq,
// because the runner asks its LogStore for the path, and a store that points
// prompts elsewhere (a test's full disk) must be obeyed. Its errors are
// *fs.PathError, which name the operation and the path already, so that a
// full disk stays recognisable (ENOSPC) through the caller's wrapping.
func WritePrompt(path, prompt string) error {
	if err := os.MkdirAll(filepath.Dir(path), promptDirMode); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(prompt), promptFileMode)
}
