package config

import (
	"reflect"
	"slices"
)

// restartKeys are the keys only a restart applies, each with where its
// value is in a Config, but merge (KeepRestartKeys): with it, the one list
// of them (docs/configuration.md marks each "restart", and a test there
// holds the two together).
var restartKeys = []struct {
	key string
	at  func(*Config) any // a pointer to the value
}{
	{"repo", func(c *Config) any { return &c.Repo }},
	{"state_dir", func(c *Config) any { return &c.StateDir }},
	{"base_ref", func(c *Config) any { return &c.BaseRef }},
	{"listen", func(c *Config) any { return &c.Listen }},
	{"store", func(c *Config) any { return &c.Store }},
	{"lease_timeout", func(c *Config) any { return &c.LeaseTimeout }},
	{"remote", func(c *Config) any { return &c.Remote }},
	{"logs", func(c *Config) any { return &c.Logs }},
	{"hooks", func(c *Config) any { return &c.Hooks }},
	{"mailbox", func(c *Config) any { return &c.Mailbox }},
	{"history", func(c *Config) any { return &c.History }},
	{"maintenance", func(c *Config) any { return &c.Maintenance }},
	{"limits.daemon_timer_slack", func(c *Config) any { return &c.Limits.DaemonTimerSlack }},
	{"isolation", func(c *Config) any { return &c.Isolation }},
	{"sandbox", func(c *Config) any { return &c.Sandbox }},
	{"notify", func(c *Config) any { return &c.Notify }},
}

// RestartKeys are the names of the keys only a restart applies, sorted.
func RestartKeys() []string {
	keys := []string{"merge"}
	for _, k := range restartKeys {
		keys = append(keys, k.key)
	}
	slices.Sort(keys)
	return keys
}

// KeepRestartKeys sets, in c (a config a reload loaded), every key that
// only a restart applies back to its value in running, the config in
// force, and returns the names of those whose value c had changed, sorted.
// Without it a reload applied some of them halfway: the pushes read the new
// remote while the merge queue kept the branch it was built with, the
// renewals read the new lease_timeout at the old pace.
func (c *Config) KeepRestartKeys(running *Config) []string {
	var changed []string
	for _, k := range restartKeys {
		dst, src := reflect.ValueOf(k.at(c)).Elem(), reflect.ValueOf(k.at(running)).Elem()
		if !reflect.DeepEqual(dst.Interface(), src.Interface()) {
			changed = append(changed, k.key)
			dst.Set(src)
		}
	}
	// The merge queue is built at start: all of it but max_rejections,
	// which each rejection reads.
	if !sameQueue(c.Merge, running.Merge) {
		changed = append(changed, "merge")
		m := running.Merge
		if m != nil && c.Merge != nil {
			kept := *m
			kept.MaxRejections = c.Merge.MaxRejections
			m = &kept
		}
		c.Merge = m
	}
	slices.Sort(changed)
	return changed
}

// sameQueue reports whether a and b make the same merge queue: equal but
// for max_rejections, or both none.
func sameQueue(a, b *Merge) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.MaxRejections = y.MaxRejections
	return reflect.DeepEqual(x, y)
}
