package deps

import (
	_ "github.com/coreos/go-systemd/v22/daemon"
	_ "github.com/go-git/go-git/v5"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/spf13/cobra"
	_ "go.uber.org/goleak"
	_ "go.uber.org/zap"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/sys/unix"
	_ "modernc.org/sqlite"
)
