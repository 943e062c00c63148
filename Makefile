GO      ?= go
BIN     ?= bin/swarmd
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# Keep the race-enabled suite inside CI's budget on 2 cores: three test
# binaries at a time, since many tests wait on real processes (git, daemons,
# the agent CLIs, PostgreSQL) and a third keeps both cores busy through
# those waits (801 s against 879 s for the whole run on a 2-core machine).
# cmd/swarmd, the longest package, runs 650-700 s that way: -timeout leaves
# it room for a slow run, where 12m cut off one whose chaos test failed.
TESTFLAGS ?= -race -count=1 -timeout 14m -p 3

# The real agent CLIs the backend tests drive, installed by
# scripts/install-clis.sh at their pinned versions (once: it skips what is
# installed already).
CLI_DIR ?= $(or $(SWARMD_CLI_DIR),$(CURDIR)/.cache/clis)

.PHONY: build test clis bench lint demo fuzz clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/swarmd

test: clis
	SWARMD_CLI_DIR="$(CLI_DIR)" $(GO) test $(TESTFLAGS) ./...

# clis installs the agent CLIs when npm is there; without npm, or when the
# install fails, the real-CLI tests skip, and this says so loudly first.
clis:
	@if ! command -v npm >/dev/null 2>&1; then \
		echo "******************************************************************************" >&2; \
		echo "*** make test: npm NOT FOUND: the real-CLI tests (claude, codex, gemini" >&2; \
		echo "*** backends) will SKIP. Install Node.js and npm to run the whole suite." >&2; \
		echo "******************************************************************************" >&2; \
	elif ! bash scripts/install-clis.sh "$(CLI_DIR)" >/dev/null; then \
		echo "******************************************************************************" >&2; \
		echo "*** make test: installing the agent CLIs into $(CLI_DIR) FAILED: the" >&2; \
		echo "*** real-CLI tests will SKIP (or fail, with SWARMD_REQUIRE_CLIS=1)." >&2; \
		echo "******************************************************************************" >&2; \
	fi

BENCHPKGS ?= ./internal/agent ./internal/task ./internal/review ./internal/backend ./internal/runner ./internal/mailbox ./internal/taskboard ./internal/store ./internal/metrics ./internal/web ./internal/merge ./internal/daemon ./cmd/swarmd

bench: build
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $(BENCHPKGS)
	bash bench/run.sh $(BIN)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

FUZZTIME ?= 20s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzMachine -fuzztime $(FUZZTIME) ./internal/agent
	$(GO) test -run '^$$' -fuzz FuzzValidName -fuzztime $(FUZZTIME) ./internal/agent
	$(GO) test -run '^$$' -fuzz FuzzTaskMachine -fuzztime $(FUZZTIME) ./internal/task
	$(GO) test -run '^$$' -fuzz FuzzLoop -fuzztime $(FUZZTIME) ./internal/review
	$(GO) test -run '^$$' -fuzz FuzzScan -fuzztime $(FUZZTIME) ./internal/review
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./internal/config
	$(GO) test -run '^$$' -fuzz FuzzMailArgs -fuzztime $(FUZZTIME) ./cmd/swarmd
	$(GO) test -run '^$$' -fuzz FuzzTaskArgs -fuzztime $(FUZZTIME) ./cmd/swarmd
	$(GO) test -run '^$$' -fuzz FuzzLineSplitter -fuzztime $(FUZZTIME) ./internal/backend
	$(GO) test -run '^$$' -fuzz FuzzClaudeParser -fuzztime $(FUZZTIME) ./internal/backend
	$(GO) test -run '^$$' -fuzz FuzzCodexParser -fuzztime $(FUZZTIME) ./internal/backend
	$(GO) test -run '^$$' -fuzz FuzzGeminiParser -fuzztime $(FUZZTIME) ./internal/backend
	$(GO) test -run '^$$' -fuzz FuzzRenderer -fuzztime $(FUZZTIME) ./internal/backend
	$(GO) test -run '^$$' -fuzz FuzzNotification -fuzztime $(FUZZTIME) ./internal/store
	$(GO) test -run '^$$' -fuzz FuzzCheckLoose -fuzztime $(FUZZTIME) ./internal/quarantine
	$(GO) test -run '^$$' -fuzz FuzzRoutes -fuzztime $(FUZZTIME) ./internal/control
	$(GO) test -run '^$$' -fuzz FuzzRequest -fuzztime $(FUZZTIME) ./internal/web

demo: build
	bash scripts/demo.sh $(BIN)

clean:
	rm -rf bin
