#!/usr/bin/env bash
# Regenerate the README's screenshots of the dashboards (docs/dashboard-web.png,
# docs/dashboard-top.png) from a real swarm: needs chromium and tmux
# (apt-get install chromium tmux fonts-dejavu-core).
set -euo pipefail
cd "$(dirname "$0")/.."
SWARMD_SCREENSHOT_DIR="$PWD/docs" SWARMD_REQUIRE_CHROMIUM=1 SWARMD_REQUIRE_TMUX=1 \
  go test -count=1 -run '^TestDashboardScreenshots$' -v ./cmd/swarmd | grep -E 'wrote|FAIL|ok|^---'
