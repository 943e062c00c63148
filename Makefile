GO      ?= go
BIN     ?= bin/swarmd
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# Keep the race-enabled suite inside CI's budget on 2 cores.
TESTFLAGS ?= -race -count=1 -timeout 12m

.PHONY: build test bench lint demo fuzz clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/swarmd

test:
	$(GO) test $(TESTFLAGS) ./...

BENCHPKGS ?= ./internal/agent ./internal/task ./internal/review ./internal/backend ./internal/runner ./internal/mailbox ./internal/metrics ./cmd/swarmd

bench: build
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $(BENCHPKGS)
	bash bench/run.sh $(BIN)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

FUZZTIME ?= 20s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzMachine -fuzztime $(FUZZTIME) ./internal/agent
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

demo: build
	bash scripts/demo.sh $(BIN)

clean:
	rm -rf bin
