package proc

import "testing"

// TestCallerStringRoundTrips: a Caller formatted back into a marker value is
// read as the same Caller, as a command given that value in its
// environment reads it.
func TestCallerStringRoundTrips(t *testing.T) {
	c := Caller{Owner: "/repo/.swarm", Instance: "4242.77.ab", TreeID: "alice-3-0123456789ab"}
	env := map[string]string{MarkerEnv: c.String()}
	got, ok := CallerFromEnv(func(k string) string { return env[k] })
	if !ok || got != c {
		t.Fatalf("CallerFromEnv(%q) = %+v, %v; want %+v", c.String(), got, ok, c)
	}
}
