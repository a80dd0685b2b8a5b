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

.PHONY: cluster-up cluster-down cluster-add-node cluster-test

cluster-up: ## start (or reuse) the test cluster with $(NODES) nodes
	@$(TESTCLUSTER) up --nodes $(NODES)

cluster-down: ## stop it and remove everything but the build cache
	@$(TESTCLUSTER) down

cluster-add-node: ## start one more node; prints its name
	@$(TESTCLUSTER) add-node

cluster-test: ## end-to-end test of the test cluster itself (starts or reuses it)
	go test -tags e2e -count=1 -timeout 30m -v ./internal/testcluster/
