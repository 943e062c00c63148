package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A systemd credential named pgpass becomes the store's passfile (never an
// environment variable); a URL or PGPASSFILE that names one wins.
func TestCredentialPassfile(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"CREDENTIALS_DIRECTORY": dir}
	getenv := func(k string) string { return env[k] }
	if got := credentialPassfile(getenv); got != "" {
		t.Fatalf("no pgpass credential: got %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "pgpass"), []byte("*:*:*:*:secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pass := credentialPassfile(getenv)
	if pass != filepath.Join(dir, "pgpass") {
		t.Fatalf("credential passfile = %q", pass)
	}
	if got := withPassfile("postgres://swarm@db/swarm?sslmode=disable", pass); !strings.Contains(got, "passfile="+strings.ReplaceAll(pass, "/", "%2F")) {
		t.Fatalf("URL with the credential: %q", got)
	}
	if got := withPassfile("postgres://swarm@db/swarm?passfile=/etc/other", pass); got != "postgres://swarm@db/swarm?passfile=/etc/other" {
		t.Fatalf("a URL that names its passfile keeps it: %q", got)
	}
}

// A key=value connection string is never echoed with its password.
func TestRedactKeyValue(t *testing.T) {
	got := Redact("host=db user=swarm password=hunter2 dbname=swarm")
	if strings.Contains(got, "hunter2") || !strings.HasPrefix(got, "host=db user=swarm password=xxxxx") {
		t.Fatalf("Redact = %q", got)
	}
}
