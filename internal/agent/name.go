package agent

// NamePattern is the agent name rule, the one definition of it: a name
// becomes a directory, a branch (swarm/NAME/work), a ref and a mail address, so
// it is kept to characters that are safe in all of them.
const NamePattern = `^[a-z][a-z0-9-]{0,31}$`

// ValidName reports whether s matches NamePattern. It is written out rather
// than compiled from the pattern because mail and log paths check every name
// they touch; TestValidNameMatchesPattern keeps the two in step.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 32 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}
