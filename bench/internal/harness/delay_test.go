package harness

import (
	"bytes"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"
)

// TestDelayProxy: what goes through the proxy arrives whole and in order,
// each way delay later, so a round trip takes at least twice the delay.
func TestDelayProxy(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, ".s.PGSQL.5432"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo server in the place of PostgreSQL
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	const delay = 20 * time.Millisecond
	p, err := StartDelayProxy("postgres://u@/db?host="+url.QueryEscape(dir), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	target, err := p.Via("postgres://u@/db?host=" + url.QueryEscape(dir) + "&sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := u.Host, p.ln.Addr().String(); got != want || u.Query().Has("host") || u.Query().Get("sslmode") != "disable" {
		t.Fatalf("via = %s, want the proxy's address %s, no socket directory, the other parameters kept", target, want)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		msg := bytes.Repeat([]byte{byte('a' + i)}, 100_000) // more than one read's worth
		start := time.Now()
		go func() { _, _ = c.Write(msg) }()
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if rt := time.Since(start); rt < 2*delay {
			t.Errorf("round trip %d took %v, want at least %v", i, rt, 2*delay)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("round trip %d: the echo differs from what was sent", i)
		}
	}
}
