package proc

import (
	"bytes"
	"strings"
)

// MarkerEnv is the environment variable that tags every process of a tree.
// Descendants inherit it, including those that leave the tree's process group
// or session (the shell tools of coding-agent CLIs do both), so it is how a
// tree's processes are found. Its value is owner, supervisor instance and tree
// id separated by markerSep.
const MarkerEnv = "SWARMD_TREE"

// markerSep is ASCII unit separator: it cannot occur in a path or an id that
// validID accepts, so the encoding is unambiguous.
const markerSep = "\x1f"

type marker struct {
	owner, instance, id string
}

func (m marker) String() string {
	return m.owner + markerSep + m.instance + markerSep + m.id
}

// parseMarker splits a marker value; ok is false for anything that is not
// exactly three fields.
func parseMarker(v []byte) (owner, instance, id []byte, ok bool) {
	i := bytes.IndexByte(v, markerSep[0])
	if i < 0 {
		return nil, nil, nil, false
	}
	j := bytes.IndexByte(v[i+1:], markerSep[0])
	if j < 0 {
		return nil, nil, nil, false
	}
	j += i + 1
	if bytes.IndexByte(v[j+1:], markerSep[0]) >= 0 {
		return nil, nil, nil, false
	}
	return v[:i], v[i+1 : j], v[j+1:], true
}

// validTag reports whether s can be a marker field.
func validTag(s string) bool {
	return s != "" && !strings.ContainsAny(s, markerSep+"\x00")
}

// withMarker returns env without any inherited marker (a swarmd running under
// another swarmd must tag its own trees with its own marker only) plus ours.
func withMarker(env []string, m marker) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if strings.HasPrefix(kv, MarkerEnv+"=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, MarkerEnv+"="+m.String())
}

// Caller is the process tree a process belongs to, read from the marker in
// its environment.
type Caller struct {
	Owner, Instance, TreeID string
}

// String is the marker value of c's tree, as MarkerEnv carries it: what a
// command run on behalf of one of the tree's processes is given to be
// recognised as it.
func (c Caller) String() string {
	return marker{owner: c.Owner, instance: c.Instance, id: c.TreeID}.String()
}

// CallerOf reads pid's tree marker; ok is false for a process outside every
// tree (or one whose environment cannot be read).
func CallerOf(pid int) (c Caller, ok bool) {
	val, ok, _, _ := readEnvVar(pid, MarkerEnv, make([]byte, 0, 8192))
	if !ok {
		return Caller{}, false
	}
	return parseCaller(val)
}

// CallerFromEnv is CallerOf for the current process, from its own
// environment.
func CallerFromEnv(getenv func(string) string) (Caller, bool) {
	v := getenv(MarkerEnv)
	if v == "" {
		return Caller{}, false
	}
	return parseCaller([]byte(v))
}

func parseCaller(val []byte) (Caller, bool) {
	owner, inst, id, ok := parseMarker(val)
	if !ok {
		return Caller{}, false
	}
	return Caller{Owner: string(owner), Instance: string(inst), TreeID: string(id)}, true
}

// Instance is this Supervisor's instance, as its trees' markers carry it.
func (s *Supervisor) Instance() string { return s.instance }
