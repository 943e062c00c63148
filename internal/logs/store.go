// Package logs is the one place that knows swarmd's on-disk session-log
// layout (docs/operations.md):
//
//	<state_dir>/logs/<agent>/<seq>.log         live session logs (one file may hold several attempts)
//	<state_dir>/logs/<agent>/<seq>.prompt.md   the prompt each session was given
//	<state_dir>/archive/<agent>/<agent>-<YYYYmmddTHHMMSS.000Z>.tar.gz
//
// It writes the prompts, archives an agent's logs, prunes old archives, and
// reads sessions back, live or archived. Archiving never loses data: the
// originals are removed only once a complete archive is durably in place.
package logs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"time"

	"go.uber.org/zap"

	agentpkg "github.com/swarmd/swarmd/internal/agent"
)

// Defaults for New's zero arguments; the same values as the config's logs keys.
const (
	DefaultKeepArchives   = 10
	DefaultMaxAge         = 720 * time.Hour
	DefaultRotateSessions = 100 // a running agent's sessions per archive (Rotation)
)

const (
	logExt      = ".log"
	promptExt   = ".prompt.md"
	archiveExt  = ".tar.gz"
	tmpPrefix   = ".tmp-"
	stampLayout = "20060102T150405.000Z" // UTC; sorts as text in time order
	pollEvery   = 150 * time.Millisecond
)

// Store reads and writes the logs and archives under one state_dir. It is
// safe for concurrent use; operations on one agent's archives are serialized.
type Store struct {
	logsRoot    string
	archiveRoot string
	keep        int
	maxAge      time.Duration
	log         *zap.Logger
	poll        time.Duration

	mu     sync.Mutex
	agents map[string]*sync.Mutex

	// gzips are gzip writers to Reset and reuse: a new one allocates the
	// compressor's ~1 MB of tables, and a daemon's stop archives every
	// agent at once (half of that stop's CPU went to allocating and
	// collecting them).
	gzips     sync.Pool
	fastGzips sync.Pool // BestSpeed, for small archives (smallArchive)
	// compressing bounds the archives being compressed at once: gzip is
	// CPU bound, so more than the cores gain nothing, and each needs a
	// writer of its own, so a stop's 200 archives at once allocated 200
	// writers (~1 MB each) where a few, reused, do.
	compressing chan struct{}

	rootSync, parentSync syncGroup   // fsyncs of the archive root and the state dir
	rootDurable          atomic.Bool // the archive root's entry in the state dir is synced

	// wrapTemp, when set, wraps the writer of a temporary archive. Tests use
	// it to inject write failures (a full disk), which root ignores on
	// read-only directories.
	wrapTemp func(io.Writer) io.Writer
}

// New returns a Store for stateDir. keep is how many archives to keep per
// agent and maxAge how old they may get; zero or negative means the default.
// A nil logger discards.
func New(stateDir string, keep int, maxAge time.Duration, log *zap.Logger) *Store {
	if keep <= 0 {
		keep = DefaultKeepArchives
	}
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Store{
		logsRoot:    filepath.Join(stateDir, "logs"),
		archiveRoot: filepath.Join(stateDir, "archive"),
		keep:        keep,
		maxAge:      maxAge,
		log:         log,
		poll:        pollEvery,
		agents:      make(map[string]*sync.Mutex),
		compressing: make(chan struct{}, 2*runtime.GOMAXPROCS(0)),
	}
}

// LogDir is where an agent's live session logs and prompts are written.
func (s *Store) LogDir(agent string) string { return filepath.Join(s.logsRoot, agent) }

// LogPath is the log of session seq; the backend appends each attempt to it.
func (s *Store) LogPath(agent string, seq uint32) string {
	return filepath.Join(s.LogDir(agent), strconv.FormatUint(uint64(seq), 10)+logExt)
}

// PromptPath is the prompt session seq was given.
func (s *Store) PromptPath(agent string, seq uint32) string {
	return filepath.Join(s.LogDir(agent), strconv.FormatUint(uint64(seq), 10)+promptExt)
}

// ArchiveDir is where an agent's archives live.
func (s *Store) ArchiveDir(agent string) string { return filepath.Join(s.archiveRoot, agent) }

// lock serializes archive, prune and cleanup for one agent, so that two
// archives never pick the same name and prune never races a rename.
func (s *Store) lock(agent string) func() {
	s.mu.Lock()
	m, ok := s.agents[agent]
	if !ok {
		m = new(sync.Mutex)
		s.agents[agent] = m
	}
	s.mu.Unlock()
	m.Lock()
	return m.Unlock
}

func checkAgent(agent string) error {
	if !agentpkg.ValidName(agent) {
		return fmt.Errorf("%w %q (want %s)", ErrBadName, agent, agentpkg.NamePattern)
	}
	return nil
}

// parseSeq reads the seq of a "<seq>.log" name. Only the canonical spelling
// counts, so that a seq always maps back to the file LogPath names.
func parseSeq(name string) (uint32, bool) {
	digits, ok := strings.CutSuffix(name, logExt)
	if !ok || digits == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 32)
	if err != nil || strconv.FormatUint(n, 10) != digits {
		return 0, false
	}
	return uint32(n), true
}

// fileSeq reads the seq of a session's log or prompt ("<seq>.log",
// "<seq>.prompt.md").
func fileSeq(name string) (uint32, bool) {
	if digits, ok := strings.CutSuffix(name, promptExt); ok {
		return parseSeq(digits + logExt)
	}
	return parseSeq(name)
}

// syncDir makes a rename or create in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
