# moat — see README.md. Every target installs what it needs on a fresh
# Debian machine (run as root).

GO      ?= go
BIN     := bin/moat
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all build demo test test-deps test-race fuzz bench vet fmt clean

all: build

# The lean init (cmd/moat-init) is built first and embedded in moat
# (package runtime/linux/leaninit, build tag moatinit) through a build
# overlay, so the source tree gets no generated file: moat then starts
# each sandbox's pid 1 from that small executable instead of itself.
INIT := bin/moat-init
build:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(INIT) ./cmd/moat-init
	sha256sum $(INIT) > $(INIT).sha256
	printf '{"Replace":{"runtime/linux/leaninit/moat-init":"%s","runtime/linux/leaninit/moat-init.sha256":"%s"}}' \
		"$(CURDIR)/$(INIT)" "$(CURDIR)/$(INIT).sha256" > bin/leaninit-overlay.json
	CGO_ENABLED=0 $(GO) build -overlay bin/leaninit-overlay.json -tags moatinit -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/moat

# The quick-start demo: build, check the host, run commands in sandboxes.
demo: build
	sh scripts/demo.sh $(BIN)

# Debian packages the tests use as ordinary programs inside and outside
# the sandbox: python3 and util-linux, the network clients of
# tests/network (curl, wget, git, pip, npm), busybox-static, the one
# static binary the template and OCI-import tests build roots from, and
# the compilers of tests/build: gcc, and pip with setuptools and wheel
# (python3-pip depends on both) for an offline wheel; its Go build uses
# the Go toolchain the tests run with.
test-deps:
	@need=""; for p in python3:python3 script:util-linux curl:curl wget:wget git:git pip3:python3-pip npm:npm busybox:busybox-static gcc:gcc; do \
		command -v $${p%%:*} >/dev/null || need="$$need $${p#*:}"; done; \
	test -z "$$need" || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need; }

# The whole test suite. Tests that need root or kernel features skip with a
# message elsewhere, and fail under CI=true. bench/ is a Go module of its
# own (the root's ./... does not reach it): its tests run here too.
test: test-deps vet
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 15m ./...
	cd bench && CGO_ENABLED=0 $(GO) test -count=1 -timeout 15m ./...
	$(MAKE) test-race

# The concurrent packages again under the race detector (cgo: gcc).
# The moat binary the tests run stays static; only the test binaries are
# built with -race.
RACE_PKGS := ./server/... ./store/... ./audit/... ./netproxy/... ./client/... ./runtime/... ./guest/...
test-race: test-deps
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 15m $(RACE_PKGS)

# Every fuzz target for FUZZTIME each (their seed corpora already run in
# make test). go test takes one -fuzz target per package and run.
FUZZTIME ?= 30s
fuzz:
	@grep -rE --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' . | sed -E 's|^\./(.*)/[^/]*_test\.go:func (Fuzz.*)|\1 \2|; s|^\./[^/]*_test\.go:func (Fuzz.*)|. \1|' | sort -u | \
	while read -r pkg name; do echo "fuzz ./$$pkg $$name ($(FUZZTIME))"; \
		CGO_ENABLED=0 $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) "./$$pkg" || exit 1; done

# gofmt, go vet, and go vet for macOS: the tree builds off Linux too,
# where the linux runtime's stubs say it needs Linux. The same for the
# bench module (bench/, its own go.mod).
vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	@test -z "$$(cd bench && gofmt -l .)" || { cd bench && gofmt -l .; echo "gofmt needed in bench/"; exit 1; }
	cd bench && $(GO) vet ./...
	cd bench && GOOS=darwin $(GO) vet ./...

bench:
	bash bench/run.sh

clean:
	rm -rf bin bench/results
