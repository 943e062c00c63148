package daemon

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/config"
)

// SetupError is a failure the operator fixes before starting again: a bad
// config, a repository that is not usable, a state dir another swarmd
// holds. `swarmd run` exits 2 for it, 1 for anything else.
type SetupError struct{ Err error }

func (e *SetupError) Error() string { return e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

func setupError(err error) error {
	if err == nil {
		return nil
	}
	return &SetupError{err}
}

func setupErrorf(format string, args ...any) error { return &SetupError{fmt.Errorf(format, args...)} }

// LogConfigWarnings logs what `swarmd config validate` prints as warnings.
func LogConfigWarnings(log *zap.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings {
		log.Warn("config: "+w.Msg, zap.String("file", w.File), zap.Int("line", w.Line), zap.String("key", w.Key))
	}
}
