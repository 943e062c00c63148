#!/usr/bin/env bash
# install-clis.sh installs the pinned coding-agent CLIs that the claude, codex
# and gemini backends are tested against (internal/backend), from npm, into one
# directory, and prints that directory's bin dir.
#
#   scripts/install-clis.sh [DIR]      DIR defaults to $SWARMD_CLI_DIR, else <repo>/.cache/clis
#
# Idempotent: a package already installed at its pinned version is not
# fetched again. Tests find the CLIs through SWARMD_CLI_DIR (the same DIR).
set -euo pipefail

CLAUDE_VERSION=2.1.328
CODEX_VERSION=0.169.0
GEMINI_VERSION=0.61.0

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-${SWARMD_CLI_DIR:-$repo/.cache/clis}}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

command -v npm >/dev/null || { echo "install-clis: npm not found in PATH" >&2; exit 1; }

# installed prints the version of package $1 under $dir, or nothing.
installed() {
	local pj="$dir/node_modules/$1/package.json"
	[ -f "$pj" ] && node -p "require(process.argv[1]).version" "$pj" 2>/dev/null || true
}

want=()
for spec in "@anthropic-ai/claude-code@$CLAUDE_VERSION" "@openai/codex@$CODEX_VERSION" "@google/gemini-cli@$GEMINI_VERSION"; do
	pkg=${spec%@*}
	ver=${spec##*@}
	if [ "$(installed "$pkg")" != "$ver" ]; then
		want+=("$spec")
	fi
done

if [ ${#want[@]} -gt 0 ]; then
	[ -f "$dir/package.json" ] || echo '{"name":"swarmd-clis","private":true}' >"$dir/package.json"
	echo "install-clis: installing ${want[*]} into $dir" >&2
	# --prefix keeps it out of the global tree; no audit/fund noise in CI logs.
	npm install --prefix "$dir" --no-audit --no-fund --loglevel=error --save-exact "${want[@]}" >&2
fi

for b in claude codex gemini; do
	[ -x "$dir/node_modules/.bin/$b" ] || { echo "install-clis: $b missing after install in $dir" >&2; exit 1; }
done
echo "$dir/node_modules/.bin"
