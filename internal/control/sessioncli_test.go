package control

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// cliAPI is a fakeAPI that runs session commands: it echoes them.
type cliAPI struct {
	*fakeAPI
	mu   sync.Mutex
	got  []SessionCLIRequest
	peer int
}

func (c *cliAPI) SessionCLI(ctx context.Context, req SessionCLIRequest) (SessionCLIResult, error) {
	pid, _ := PeerPID(ctx)
	c.mu.Lock()
	c.got = append(c.got, req)
	c.peer = pid
	c.mu.Unlock()
	if req.Args[0] != "mail" {
		return SessionCLIResult{}, fmt.Errorf("%w: session-cli: runs mail and task only, not %q", ErrForbidden, req.Args[0])
	}
	return SessionCLIResult{Stdout: strings.Join(req.Args, " ") + "\n", Stderr: "read " + req.Stdin, Code: 2}, nil
}

func serveAPI(t *testing.T, api API) (*Client, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "swarmd.sock")
	s, err := Listen(path, api, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return NewClient(path), path
}

// post sends body to the session-cli route as is, for what the client
// never sends.
func post(t *testing.T, path string, body io.Reader) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post("http://swarmd/v1/session-cli", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSessionCLIRoute: the request reaches the API with the caller's pid and
// the result comes back whole; a refusal keeps its kind; bad and oversize
// bodies are refused before the API sees them.
func TestSessionCLIRoute(t *testing.T) {
	api := &cliAPI{fakeAPI: &fakeAPI{paused: map[string]PauseRequest{}}}
	c, path := serveAPI(t, api)
	ctx := context.Background()

	res, err := c.SessionCLI(ctx, SessionCLIRequest{Args: []string{"mail", "send", "--to", "bob"}, Stdin: "hello\x00\xff"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "mail send --to bob\n" || res.Code != 2 || !strings.HasPrefix(res.Stderr, "read hello\x00") {
		t.Errorf("result %+v", res)
	}
	if api.peer != os.Getpid() {
		t.Errorf("the API saw peer pid %d, want %d", api.peer, os.Getpid())
	}
	if _, err := c.SessionCLI(ctx, SessionCLIRequest{Args: []string{"stop", "bob"}}); !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "mail and task only") {
		t.Errorf("a refused command: %v, want forbidden", err)
	}
	if _, err := c.SessionCLI(ctx, SessionCLIRequest{Args: []string{"mail"}, Stdin: strings.Repeat("x", MaxSessionCLIStdin+1)}); err == nil || !strings.Contains(err.Error(), "over the 8 MiB") {
		t.Errorf("oversize stdin at the client: %v", err)
	}
	n := len(api.got)

	for name, tc := range map[string]struct {
		body       io.Reader
		code       int
		wantInBody string
	}{
		"not JSON":      {strings.NewReader("mail send"), http.StatusBadRequest, "bad request body"},
		"no command":    {strings.NewReader(`{"args":[]}`), http.StatusBadRequest, "no command"},
		"stdin too big": {bytes.NewReader(fmt.Appendf(nil, `{"args":["mail"],"stdin":%q}`, strings.Repeat("x", MaxSessionCLIStdin+1))), http.StatusRequestEntityTooLarge, "over the 8 MiB"},
		"body too big":  {io.MultiReader(strings.NewReader(`{"args":["mail"],"stdin":"`), io.LimitReader(zeros{}, maxSessionCLIBody)), http.StatusRequestEntityTooLarge, "request body over"},
	} {
		code, body := post(t, path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.wantInBody) {
			t.Errorf("%s: %d %s, want %d and %q", name, code, body, tc.code, tc.wantInBody)
		}
	}
	if len(api.got) != n {
		t.Errorf("the API ran %d refused requests", len(api.got)-n)
	}
}

// zeros reads as endless '0's.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// TestSessionCLINotServed: a daemon whose API runs no session commands has
// no such route, and the client says so in one line.
func TestSessionCLINotServed(t *testing.T) {
	_, c, _ := serve(t)
	_, err := c.SessionCLI(context.Background(), SessionCLIRequest{Args: []string{"mail", "inbox"}})
	if err == nil || !strings.Contains(err.Error(), "does not run session commands") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v", err)
	}
}
