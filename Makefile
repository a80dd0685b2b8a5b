# nodeexec. The two commands that do everything on a fresh machine (as root):
#   make demo   brings up the local test cluster when KUBECONFIG is unset (else uses
#               that cluster), builds the CLI and runs it on every node
#   make test   lint, unit tests, and end-to-end tests on the real local cluster
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go

.PHONY: all build demo docs test lint test-unit test-e2e fuzz bench bench-backends bench-resident bench-fanout bench-rss-floor bench-watcher bench-watcher-safety bench-watcher-jobs bench-agent-scale bench-kwok bench-stream generate clean dist krew-manifest
all: build

build: ## the CLI, also as a kubectl plugin (bin/kubectl-nodeexec), and bin/nodeexec-spool; static, so `nodeexec image push` can push both as the agent image
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/nodeexec ./cmd/nodeexec
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/nodeexec-spool ./cmd/nodeexec-spool
	ln -sf nodeexec bin/kubectl-nodeexec

demo: build ## run `nodeexec run --all` on KUBECONFIG's cluster, or on the local test cluster
	@set -e; if [ -z "$$KUBECONFIG" ]; then eval "$$($(TESTCLUSTER) up --nodes $(NODES))"; $(GO) run ./internal/agentimage/cmd/agentimage; fi; \
	echo "+ nodeexec run --all --profile sysadmin -- sh -c 'hostname; uname -r; head -2 /host/etc/os-release'" >&2; \
	./bin/nodeexec run --all --profile sysadmin -- sh -c 'hostname; uname -r; head -2 /host/etc/os-release'

test: lint test-unit fuzz test-e2e ## everything CI runs

# TEST_VET: go test's own vet pass (a subset of go vet's analyzers). make
# test runs lint first, which vets every package with all of go vet's
# analyzers, with and without the e2e tag; so its go test runs skip their vet
# pass (-vet=off) instead of repeating it on every package a change reaches.
# Alone, make test-unit and make test-e2e keep it.
TEST_VET ?=
test: TEST_VET = -vet=off

docs: ## the generated docs: CLI reference and man page (from the CLI), NodeScript/MaintenanceBudget/MaintenanceCalendar references (from deploy/crd), docs/layout.md (package docs), docs/library.md's code (examples/library); `go test ./internal/docgen` fails when they are stale
	$(GO) run ./cmd/docgen

lint: ## gofmt and go vet, with and without the e2e tag; the exported API matches api/nodeexec.txt
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./...
	$(GO) run ./internal/apicheck

.PHONY: api
api: ## write api/nodeexec.txt, the record of the exported API that make lint checks (internal/apicheck)
	$(GO) run ./internal/apicheck -w

test-unit: ## fast, hermetic
	$(GO) test -race -count=1 $(TEST_VET) ./...

# Every parser's fuzz test (testing.F), one at a time, $(FUZZTIME) each; their
# seed corpora also run in test-unit. A failure leaves the input in
# <pkg>/testdata/fuzz/<Fuzz>/; commit it as a regression case.
# -fuzz compiles the package and every dependency (client-go included) with
# coverage instrumentation: minutes on 2 cores with a cold build cache, cached
# afterwards. So each package's instrumented test binary is built once (go
# test -c, no vet: lint does that) and runs each of its targets itself, in the
# package directory and with go test's fuzz cache, instead of one go test
# -fuzz (a link and a vet) per target; FUZZMINIMIZETIME bounds the shrinking
# of a failing input (go test's default is 60s).
# FUZZTIME is a count of executions, not a duration: Go 1.26's fuzz
# coordinator can fail a duration-bounded run with a spurious "context
# deadline exceeded" at its end on a loaded machine (go.dev/issue/75804,
# fixed in Go 1.27); a count has no deadline to race.
FUZZTIME ?= 10000x
FUZZMINIMIZETIME ?= 10s
FUZZ_TARGETS = \
	./nodeexec:FuzzParseCountOrPercent ./nodeexec:FuzzTargetsValidate \
	./internal/cli:FuzzParseEnv ./internal/cli:FuzzParseNamespaces ./internal/cli:FuzzParseQuantity ./internal/cli:FuzzCheckImage \
	./nodeexec/watcher:FuzzValidate ./nodeexec/watcher:FuzzParseNodeScripts ./nodeexec/watcher:FuzzCRDImageRule ./nodeexec/watcher:FuzzKuredHolders ./nodeexec/watcher:FuzzSilenceMatchers ./nodeexec/watcher:FuzzGateCondition ./nodeexec/watcher:FuzzParseAnalysis ./nodeexec/watcher:FuzzUnprivilegedCheck ./nodeexec/watcher:FuzzWebhookURL ./nodeexec/watcher:FuzzReapplySchedule \
	./nodeexec/watcher/internal/nodescript:FuzzRedact ./nodeexec/watcher/internal/nodescript:FuzzCalendarWindow \
	./nodeexec/agent:FuzzDecodeRequest ./internal/agentcmd:FuzzAgentArgv
fuzz: ## run each fuzz test for $(FUZZTIME) executions
	@set -eo pipefail; bin=$$(mktemp -d); trap 'rm -rf "$$bin"' EXIT; cache=$$($(GO) env GOCACHE)/fuzz; \
	for pkg in $$(for t in $(FUZZ_TARGETS); do echo "$${t%%:*}"; done | uniq); do \
	  echo "fuzz: building $$pkg"; $(GO) test -c -vet=off -fuzz . -o "$$bin/fuzz.test" "$$pkg"; \
	  path=$$($(GO) list "$$pkg"); \
	  for t in $(FUZZ_TARGETS); do [ "$${t%%:*}" = "$$pkg" ] || continue; fn=$${t##*:}; \
	    echo "fuzz $$pkg $$fn"; start=$$SECONDS; \
	    out=$$(cd "$$pkg" && "$$bin/fuzz.test" -test.run '^$$' -test.fuzz "^$$fn\$$" -test.fuzztime $(FUZZTIME) \
	      -test.fuzzminimizetime $(FUZZMINIMIZETIME) -test.fuzzcachedir "$$cache/$$path" 2>&1) || { echo "$$out"; exit 1; }; \
	    { echo "$$out" | grep -v '^fuzz: elapsed' || true; }; \
	    if echo "$$out" | grep -q 'no fuzz tests to fuzz'; then echo "fuzz: $$pkg has no $$fn (moved? fix FUZZ_TARGETS)"; exit 1; fi; \
	    echo "ok  $$path $$fn $$((SECONDS - start))s"; \
	  done; \
	done

test-e2e: ## on the real local cluster (started, or reused when running)
	@$(TESTCLUSTER) up --nodes $(NODES) >/dev/null
	$(GO) test -tags e2e -count=1 -p 1 -timeout 80m $(TEST_VET) -v ./internal/testcluster/ ./e2e/ 2>&1 | tee /tmp/nodeexec-e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go' ; exit $${PIPESTATUS[0]}

BENCHTIME ?= 10x
BENCHTIME_BACKENDS ?= 5x
bench: build ## nodeexec run vs kubectl debug node/X, same cluster, same run; JSON in bench/latest.json
	@$(TESTCLUSTER) up --nodes $(NODES) >/dev/null
	@mkdir -p bench
	NODEEXEC_BENCH_OUT=$(CURDIR)/bench/latest.json $(GO) test -tags e2e -count=1 -run '^$$' -bench RunVsKubectlDebug -benchtime $(BENCHTIME) -timeout 30m ./e2e/
	@cat bench/latest.json

bench-backends: build ## every backend and the shell vs kubectl debug, same run; JSON in bench/backends.json
	@$(TESTCLUSTER) up --nodes $(NODES) >/dev/null
	@mkdir -p bench
	NODEEXEC_BENCH_BACKENDS_OUT=$(CURDIR)/bench/backends.json $(GO) test -tags e2e -count=1 -run '^$$' -bench 'Backends' -benchtime $(BENCHTIME_BACKENDS) -timeout 40m ./e2e/
	@cat bench/backends.json

BENCHTIME_STREAM ?= 10x
bench-resident: build ## the warm path (a resident agent through pods/portforward) vs a bare kubectl exec into the agent pod and kubectl debug, same run; JSON in bench/resident.json
	@$(TESTCLUSTER) up --nodes $(NODES) >/dev/null
	@mkdir -p bench
	NODEEXEC_BENCH_RESIDENT_OUT=$(CURDIR)/bench/resident.json $(GO) test -tags e2e -count=1 -run '^$$' -bench 'BenchmarkResident' -benchtime $(BENCHTIME) -timeout 30m ./e2e/
	@cat bench/resident.json

bench-fanout: build ## run --all on every real node vs run on one (the default path), same run; JSON in bench/fanout.json
	@$(TESTCLUSTER) up --nodes $(NODES) >/dev/null
	@mkdir -p bench
	NODEEXEC_BENCH_FANOUT_OUT=$(CURDIR)/bench/fanout.json $(GO) test -tags e2e -count=1 -run '^$$' -bench 'BenchmarkFanout' -benchtime $(BENCHTIME) -timeout 30m ./e2e/
	@cat bench/fanout.json

# BENCH_SCALE_NODES: the fleet sizes of bench-fanout-scale (SIMULATED nodes);
# BENCH_SCALE_PEER_NODES: the largest the kubectl peers run on (one kubectl per node).
# BENCH_SCALE_PATHS: pods, resident, both, or none (only the extras); BENCH_SCALE_OUT: the JSON file.
# BENCH_SCALE_LARGE_CONCURRENCY: beyond the peers' sizes, default, raised or default,raised
# (NODEEXEC_BENCH_SCALE_PEER_CONCURRENCY, default,raised by default, up to them;
# NODEEXEC_BENCH_SCALE_EXTRAS: ndjson,interrupt by default, or none).
BENCH_SCALE_NODES ?= 100,1000,5000
BENCH_SCALE_LARGE_CONCURRENCY ?= default
BENCH_SCALE_PEER_NODES ?= 1000
BENCH_SCALE_PATHS ?= pods,resident
BENCH_SCALE_OUT ?= bench/fanout-scale.json
.PHONY: bench-fanout-scale
bench-fanout-scale: build ## run -l type=kwok at $(BENCH_SCALE_NODES) SIMULATED nodes (pods and resident path, default and raised --max-concurrency) vs xargs kubectl debug/exec, same run; JSON in bench/fanout-scale.json
	@mkdir -p bench
	NODEEXEC_BENCH_SCALE_NODES=$(BENCH_SCALE_NODES) NODEEXEC_BENCH_SCALE_PEER_NODES=$(BENCH_SCALE_PEER_NODES) NODEEXEC_BENCH_SCALE_PATHS=$(BENCH_SCALE_PATHS) NODEEXEC_BENCH_SCALE_LARGE_CONCURRENCY=$(BENCH_SCALE_LARGE_CONCURRENCY) NODEEXEC_BENCH_SCALE_OUT=$(abspath $(BENCH_SCALE_OUT)) $(GO) test -tags e2e -count=1 -run '^$$' -bench '^BenchmarkFanoutScale$$' -benchtime 1x -timeout 120m -v ./e2e/
	@cat $(BENCH_SCALE_OUT)

bench-stream: build ## 300 MB of long-line and short-line output: nodeexec run (prefixed, --no-prefix) vs kubectl exec, same run; JSON in bench/stream.json
	@$(TESTCLUSTER) up --nodes $(NODES) >/dev/null
	@mkdir -p bench
	NODEEXEC_BENCH_STREAM_OUT=$(CURDIR)/bench/stream.json $(GO) test -tags e2e -count=1 -run '^$$' -bench 'BenchmarkStream' -benchtime $(BENCHTIME_STREAM) -timeout 40m ./e2e/
	@cat bench/stream.json

RSSFLOOR := clientgo drain watcher
bench-rss-floor: ## RSS of programs that only link client-go, + kubectl's drain helper, + the watcher library, run from disk and from tmpfs (no cluster); JSON lines in bench/rssfloor.jsonl
	@mkdir -p bin/rssfloor bench
	@for p in $(RSSFLOOR); do $(GO) build -o bin/rssfloor/$$p ./bench/rssfloor/$$p || exit 1; done
	@rm -f bench/rssfloor.jsonl
	@for p in $(RSSFLOOR); do \
	  for i in 1 2 3; do bin/rssfloor/$$p | sed 's/^{/{"from":"disk",/' >> bench/rssfloor.jsonl || exit 1; done; \
	  if [ -d /dev/shm ]; then cp bin/rssfloor/$$p /dev/shm/nodeexec-rssfloor-$$p && \
	    /dev/shm/nodeexec-rssfloor-$$p | sed 's/^{/{"from":"tmpfs",/' >> bench/rssfloor.jsonl; rm -f /dev/shm/nodeexec-rssfloor-$$p; fi; \
	done
	@cat bench/rssfloor.jsonl

BENCH_NODES ?= 5000
bench-watcher: build ## the watcher at $(BENCH_NODES) SIMULATED (kwok) nodes vs kwok's raw pod rate, a plain Node informer and a DaemonSet; JSON in bench/watcher.json
	@$(TESTCLUSTER) up --nodes $(NODES) >/dev/null
	@mkdir -p bench
	NODEEXEC_BENCH_NODES=$(BENCH_NODES) NODEEXEC_BENCH_WATCHER_OUT=$(CURDIR)/bench/watcher.json $(GO) test -tags e2e -count=1 -run '^$$' -bench '^BenchmarkWatcher(Scale5000)?$$' -benchtime 1x -timeout 90m -v ./e2e/ 2>&1 | grep -v 'watcher: '
	@cat bench/watcher.json

# BENCH_NODES defaults to 1,000 here (5,000 for bench-watcher).
SAFETY_NODES = $(if $(filter file,$(origin BENCH_NODES)),1000,$(BENCH_NODES))
BENCH_SAFETY_ROUNDS ?= 2
bench-watcher-safety: build ## one always-open Prometheus gate and a shared MaintenanceBudget vs the same rollout without, alternately, at $(SAFETY_NODES) SIMULATED (kwok) nodes; gate queries counted at Prometheus; JSON in bench/watcher-safety.json
	@$(TESTCLUSTER) up --nodes $(NODES) >/dev/null
	@mkdir -p bench
	NODEEXEC_BENCH_NODES=$(SAFETY_NODES) NODEEXEC_BENCH_SAFETY_ROUNDS=$(BENCH_SAFETY_ROUNDS) NODEEXEC_BENCH_WATCHER_SAFETY_OUT=$(CURDIR)/bench/watcher-safety.json $(GO) test -tags e2e -count=1 -run '^$$' -bench '^BenchmarkWatcherSafety$$' -benchtime 1x -timeout 60m -v ./e2e/ 2>&1 | grep -v 'watcher: '
	@cat bench/watcher-safety.json

# BENCH_NODES defaults to 1,000 here too; BENCH_JOBS_CONCURRENCY is C on both sides.
JOBS_NODES = $(if $(filter file,$(origin BENCH_NODES)),1000,$(BENCH_NODES))
BENCH_JOBS_CONCURRENCY ?= 50
bench-watcher-jobs: build ## a NodeScript rollout vs system-upgrade-controller's model (one Job per node, at most $(BENCH_JOBS_CONCURRENCY) at once) at $(JOBS_NODES) SIMULATED (kwok) nodes, in one run: throughput and API writes per node of every writer; JSON in bench/watcher-jobs.json
	@$(TESTCLUSTER) up --nodes $(NODES) >/dev/null
	@mkdir -p bench
	NODEEXEC_BENCH_NODES=$(JOBS_NODES) NODEEXEC_BENCH_JOBS_CONCURRENCY=$(BENCH_JOBS_CONCURRENCY) NODEEXEC_BENCH_WATCHER_JOBS_OUT=$(CURDIR)/bench/watcher-jobs.json $(GO) test -tags e2e -count=1 -run '^$$' -bench '^BenchmarkWatcherJobs$$' -benchtime 1x -timeout 60m -v ./e2e/ 2>&1 | grep -v 'watcher: '
	@cat bench/watcher-jobs.json

# BENCH_NODES defaults to 1,000 here; a list (BENCH_NODES=1000,5000) runs each size in turn.
AGENT_SCALE_NODES = $(if $(filter file,$(origin BENCH_NODES)),1000,$(BENCH_NODES))
bench-agent-scale: build ## agent install (the resident DaemonSet's rollout) at $(AGENT_SCALE_NODES) SIMULATED (kwok) nodes vs kwok's raw pod rate, same run; JSON in bench/agent-scale.json (merged by size)
	@$(TESTCLUSTER) up --nodes $(NODES) >/dev/null
	@mkdir -p bench
	NODEEXEC_BENCH_NODES=$(AGENT_SCALE_NODES) NODEEXEC_BENCH_AGENT_SCALE_OUT=$(CURDIR)/bench/agent-scale.json $(GO) test -tags e2e -count=1 -run '^$$' -bench '^BenchmarkAgentScale$$' -benchtime 1x -timeout 90m -v ./e2e/
	@cat bench/agent-scale.json

bench-kwok: ## kwok itself at 1,000 and 5,000 SIMULATED nodes: time to Ready, control-plane RSS/CPU, raw pod rate
	@$(TESTCLUSTER) up --nodes $(NODES) >/dev/null
	$(GO) test -tags e2e -count=1 -run '^$$' -bench 'BenchmarkKwokScale' -benchtime 1x -timeout 60m -v ./internal/testcluster/ | grep -E 'MEASURE|^(ok|FAIL|PASS)'

CONTROLLER_GEN ?= $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
generate: ## deepcopy and the NodeScript CRD (deploy/crd) from nodeexec/watcher/api, spec.backend.name's enum from nodeexec/backends; the Helm chart's copy of the CRDs
	$(CONTROLLER_GEN) object paths=./nodeexec/watcher/api/...
	$(CONTROLLER_GEN) crd paths=./nodeexec/watcher/api/... output:crd:dir=deploy/crd
	$(GO) run ./internal/crdenum/cmd/crdenum deploy/crd/nodeexec.io_nodescripts.yaml
	rm -f charts/nodeexec/crds/*.yaml && cp deploy/crd/*.yaml charts/nodeexec/crds/

# Release archives and the krew manifest (internal/release). Reproducible: the
# same source, Go toolchain and VERSION give the same archives byte for byte
# (CGO_ENABLED=0, -trimpath, no build ID or VCS stamp, fixed tar/gzip metadata),
# so the manifest's sha256s can be checked by rebuilding.
VERSION ?= v0.1.0
dist: ## release archives dist/kubectl-nodeexec_<os>_<arch>.tar.gz (linux, darwin; amd64, arm64) for $(VERSION)
	$(GO) run ./internal/release/cmd/dist -version $(VERSION) -out dist

krew-manifest: ## make dist, then write plugins/nodeexec.yaml (krew) with $(VERSION) and the archives' sha256s
	$(GO) run ./internal/release/cmd/dist -version $(VERSION) -out dist -manifest plugins/nodeexec.yaml

clean:
	rm -rf bin dist

# ---------------------------------------------------------------------------
# Test cluster (internal/testcluster): a real local Kubernetes cluster (etcd,
# control plane, NODES real kubelet+containerd nodes) for end-to-end tests.
# Needs root. Progress goes to stderr; cluster-up ends with one stdout line
#   export KUBECONFIG=<admin kubeconfig>
# so `eval "$(make -s cluster-up)"` sets KUBECONFIG in the calling shell.
# Build cache: $NODEEXEC_TC_CACHE or /var/cache/nodeexec-testcluster.
# ---------------------------------------------------------------------------
NODES ?= 2
TESTCLUSTER ?= go run ./internal/testcluster/cmd/testcluster

.PHONY: test-matrix cluster-up cluster-down cluster-add-node cluster-registry cluster-test agent-image controller-image kwok-up kwok-down

# The compatibility matrix (internal/matrix, docs/compatibility.md): for each
# KUBERNETES/CONTAINERD column (containerd "debian": the distribution's, else a
# version built by the test cluster) the test cluster is brought down and up
# with those versions and the e2e tests MATRIX_TESTS run; per-test results in
# bench/matrix.json and the table in docs/compatibility.md; the default
# cluster is brought back at the end (also on a failure or Ctrl-C). Replaces
# the running cluster: not part of `make test`. MATRIX_TESTS: the backend
# conformance table, the shell, the resident agents, the default backend's
# (debugpod) fault cases and the watcher's basic rollout.
MATRIX_CONTAINERD ?= 2.3.7
MATRIX_OLD_KUBERNETES ?= 1.34.4
MATRIX_COLUMNS ?= 1.37.1/debian,1.37.1/$(MATRIX_CONTAINERD),$(MATRIX_OLD_KUBERNETES)/$(MATRIX_CONTAINERD)
# MATRIX_LOCK: a file flock(2)ed from after the build until the default cluster is back.
MATRIX_LOCK ?=
MATRIX_TESTS ?= ^(TestBackendConformance|TestDebugpodAgentImageVolume|TestDebugpodSpoolProgram|TestAPIServerRestartResumes|TestShellBackends|TestShellInteractive|TestResidentAgents|TestAPIServerRestartPodDeleted|TestKilledClientCollectedByNextRun|TestTimeout|TestCLIInterrupt|TestWatcherAppliesToJoiningNode)$$
test-matrix: ## the compatibility matrix: each of $(MATRIX_COLUMNS) (Kubernetes/containerd) runs MATRIX_TESTS; bench/matrix.json, docs/compatibility.md
	$(GO) run ./internal/matrix/cmd/matrix -columns '$(MATRIX_COLUMNS)' -run '$(MATRIX_TESTS)' -nodes $(NODES) \
	  -out bench/matrix.json -doc docs/compatibility.md $(if $(MATRIX_LOCK),-lock $(MATRIX_LOCK)) -command "make test-matrix MATRIX_COLUMNS=$(MATRIX_COLUMNS)"

cluster-up: ## start (or reuse) the test cluster with $(NODES) nodes, and push nodeexec's image (agent, watcher) to its registry
	@$(TESTCLUSTER) up --nodes $(NODES)
	@$(GO) run ./internal/agentimage/cmd/agentimage

cluster-down: ## stop it and remove everything but the build cache
	@$(TESTCLUSTER) down

cluster-add-node: ## start one more node; prints its name
	@$(TESTCLUSTER) add-node

cluster-registry: ## print the test registry's addresses, CA and credentials (eval-able; sets DOCKER_CONFIG)
	@$(TESTCLUSTER) registry

# Simulated nodes (kwok) on the running test cluster: kwok-node-1..$(KWOK_NODES),
# label type=kwok, NoSchedule taint kwok.x-k8s.io/node=fake. KWOK_FLAGS e.g.
# "--heartbeat --fail-nodes kwok-node-1,kwok-node-2 --pod-complete-after 2s".
# KWOK_EXEC=1: the nodes answer exec, attach, logs and port-forward (`nodeexec run`
# reaches them; commands run in kwok's sandbox with bin/nodeexec, built first).
KWOK_NODES ?= 1000
KWOK_FLAGS ?=
KWOK_EXEC ?=
kwok-up: $(if $(KWOK_EXEC),build) ## start kwok and $(KWOK_NODES) simulated nodes, wait until all are Ready (KWOK_EXEC=1: exec-capable)
	@$(TESTCLUSTER) kwok up $(KWOK_NODES) $(if $(KWOK_EXEC),--exec --agent-binary $(CURDIR)/bin/nodeexec) $(KWOK_FLAGS)

kwok-down: ## delete the simulated nodes and stop kwok
	@$(TESTCLUSTER) kwok down

controller-image: agent-image ## the NodeScript watcher (deploy/) runs the agent image: one image, the static nodeexec binary

agent-image: ## build nodeexec's image (FROM scratch + the static binary; agent and watcher) and push it to the running test cluster's registry
	go run ./internal/agentimage/cmd/agentimage

cluster-test: ## end-to-end test of the test cluster itself (starts or reuses it)
	go test -tags e2e -count=1 -timeout 30m -v ./internal/testcluster/
