package main

import (
	"fmt"
	"io"
	"os"

	"github.com/swarmd/swarmd/internal/cli"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger builds the daemon logger: JSON for journald and files, a console
// encoder on a terminal (docs/operations.md).
func newLogger(w io.Writer, format, level string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok && cli.IsTerminal(f) {
			format = "console"
		}
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("--log-format %q: want json, console or auto", format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}
