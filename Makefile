# roundtable-sandbox: every target an operator or CI runs. Each delegates to a
# script owned by its area so the Makefile stays a table of contents.
SHELL := /bin/bash
VERSION ?= $(shell cat VERSION 2>/dev/null || echo 0.1.0)
GO ?= go
GOFLAGS_STATIC := -trimpath -ldflags '-s -w -X github.com/roundtable-sandbox/sandbox/pkg/version.Version=$(VERSION)'
BINARIES := sandbox-host sandbox-broker sandbox-reaper sandbox-worker sandbox-nats
export VERSION
# make test and make demo install what they need first (Debian packages of
# packaging/prerequisites.txt, Go modules, the npm test peers), each only when
# missing and named before it is installed; PREREQUISITES=no skips that.
PREREQ = $(if $(filter no,$(PREREQUISITES)),,./packaging/prerequisites.sh ensure &&)

.PHONY: clients clients-test fleet-test fleet-bench fleet-demo e2e-fleet all build test unit stress integration packaging-check e2e image image-archive deb units-check demo bench clean fmt vet prerequisites install-prerequisites toolbox

all: build

build: $(addprefix bin/,$(BINARIES))

bin/%: FORCE
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_STATIC) -o $@ ./cmd/$*

FORCE:

# The one command that runs the tests: unit tests everywhere; integration and
# end-to-end tests where the machine allows them (each says when it skips),
# then each stage's counts (test/all.sh).
test:
	@$(PREREQ) ./test/all.sh

# The race detector on every package: a data race is a failed test here.
# Then the tests that only move tens of MiB, which skip under -race (their
# packages' raceEnabled): without it they take seconds, not minutes.
HEAVY_TESTS := TestEightConcurrentRunsKeepTheirResults|TestRunsRefusedWhileResultsHeld|TestDecodeResultFileBounds|TestDecodeResultMemory|TestReplyFileToolBounds|TestRunTurnReadsReplyFiles|TestRichReplyFilesOnTheWire|TestReplyPacketHostMemory|TestRebuildRefusesOversizedBody|TestMCPFunctionNameClashFound|TestMCPFunctionNameProperties|TestMCPFunctionNameClashRefused
HEAVY_PKGS := ./pkg/coderun/ ./pkg/richproto/ ./pkg/rich/ ./pkg/client/ ./pkg/broker/ ./pkg/richsession/ ./pkg/anthropic/ ./pkg/protocol/ ./pkg/config/
unit:
	$(GO) vet ./...
	./test/gotest.sh unit -race ./...
	./test/gotest.sh unit-heavy -count=1 -run '^($(HEAVY_TESTS))$$' $(HEAVY_PKGS)

# The TypeScript client and the Pi extension (clients/; Node 18+ and npm):
# pinned dev dependencies, the generated types checked against
# pkg/api/openapi.json, unit tests against fake hosts under Node and the
# client's under Bun (test/clients.sh, ~25 s). make test runs it before e2e,
# whose TestTypeScriptClientOnTheHost and TestRunFromPi drive the built
# packages against the installed host.
clients:
	./test/clients.sh

# clients, then both against the real router (fake Docker) and the real Pi
# agent from test/peers in print mode (pkg/host TestTypeScriptClient,
# TestPiAgentScenarios). About 2.5 min here, most of it Pi start-ups.
clients-test: clients
	npm ci --prefix test/peers --no-audit --no-fund --loglevel=error
	SANDBOX_PI=1 $(GO) test -count=1 -run 'TestTypeScriptClient|TestPiAgentScenarios' ./pkg/host/

# Flaky-test hunt: unit (-race) and integration tests repeated while CPU hogs
# keep the machine busy; per test, how often it failed (test/stress.sh).
stress:
	./test/stress.sh

integration:
	./test/integration.sh

# The fleet's short fault test (root, network namespaces; test/fleet.sh).
fleet-test:
	./test/fleet.sh

image:
	./image/build.sh

image-archive:
	./image/archive.sh

deb:
	./packaging/deb/build.sh

# The code-execution image from this machine's Debian packages, with this
# tree's worker (root; docs/code-runs.md, Toolbox). TOOLBOX_FLAGS=--small: the test one.
toolbox: bin/sandbox-host bin/sandbox-worker
	bin/sandbox-host toolbox build --worker bin/sandbox-worker $(TOOLBOX_FLAGS)

units-check:
	./packaging/units-check.sh

packaging-check:
	./packaging/check.sh

e2e:
	./test/e2e/run.sh

# The fleet's end-to-end scenario: two namespaced systemd boxes with the
# installed .deb, real turns, box 2's host killed (test/e2e/fleet/run.sh).
e2e-fleet:
	./test/e2e/fleet/run.sh

demo:
	@$(PREREQ) ./test/e2e/demo.sh

bench:
	./bench/run.sh

# The Debian packages every target needs (packaging/prerequisites.txt, the
# list README's Quick start shows): print the apt-get line, or install what
# is missing (root).
prerequisites:
	@./packaging/prerequisites.sh line

install-prerequisites:
	./packaging/prerequisites.sh ensure

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin dist

# The fleet on one machine (test/fleet; root, network namespaces): faults
# and measurements over stub turns, written into docs/BENCHMARKS.md; the
# demo kills the busiest of three boxes and shows its channels answering
# from the others. FLEET_BENCH_FLAGS: e.g. -turns 3000 for a shorter run.
fleet-bench:
	$(GO) run ./test/fleet/fleetbench -report docs/BENCHMARKS.md $(FLEET_BENCH_FLAGS)

fleet-demo:
	$(GO) run ./test/fleet/fleetbench -demo
