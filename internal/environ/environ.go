// Package environ builds the environment of every process swarmd starts for
// an agent (backend sessions and hooks), so that both see the same variables
// with the same precedence.
package environ

import (
	"os"
	"strings"
)

// Build merges layers of KEY=VALUE in order: a later value of a key replaces
// an earlier one in place, so the result has each key once (a child that
// got both would see the first: getenv(3) returns it). Entries without "="
// are dropped.
//
// prependDir, if not empty, goes first in the PATH of the result: the
// effective PATH, whichever layer set it, so that a PATH configured for an
// agent or a backend is kept and the agent still finds swarmd. Without any
// PATH the result's PATH is prependDir alone.
func Build(prependDir string, layers ...[]string) []string {
	n := 1
	for _, l := range layers {
		n += len(l)
	}
	out := make([]string, 0, n)
	pos := make(map[string]int, n)
	for _, l := range layers {
		for _, kv := range l {
			k, _, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				continue // not an environment entry
			}
			if i, seen := pos[k]; seen {
				out[i] = kv
				continue
			}
			pos[k] = len(out)
			out = append(out, kv)
		}
	}
	if prependDir == "" {
		return out
	}
	i, ok := pos["PATH"]
	if !ok {
		return append(out, "PATH="+prependDir)
	}
	out[i] = "PATH=" + PrependPath(prependDir, strings.TrimPrefix(out[i], "PATH="))
	return out
}

// GitIdentity is the git author and committer of an agent's commits, for the
// lowest layer of its environment above the daemon's: "AGENT (swarmd)"
// <AGENT@domain>. In the environment it holds whatever git config the
// agent's CLI lets git see (Gemini CLI runs shell commands with
// GIT_CONFIG_GLOBAL=/dev/null, hiding ~/.gitconfig), and it tells the
// agents' commits apart; a GIT_* variable a later layer sets wins.
func GitIdentity(agent, domain string) []string {
	name, email := agent+" (swarmd)", agent+"@"+domain
	return []string{
		"GIT_AUTHOR_NAME=" + name, "GIT_AUTHOR_EMAIL=" + email,
		"GIT_COMMITTER_NAME=" + name, "GIT_COMMITTER_EMAIL=" + email,
	}
}

// PrependPath puts dir first in the PATH list path, unless it is first
// already. An empty path becomes dir.
func PrependPath(dir, path string) string {
	sep := string(os.PathListSeparator)
	switch {
	case path == "":
		return dir
	case path == dir || strings.HasPrefix(path, dir+sep):
		return path
	}
	return dir + sep + path
}
