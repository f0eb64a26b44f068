# kovs: an Open vSwitch-based network plugin for Kubernetes.
#
#   make demo    3-node sandbox, pods, connectivity matrix, a trace (needs root, Linux)
#   make test    unit tests, then end-to-end tests in real sandboxes, then every benchmark
#                once (needs root, Linux)
#   make scale   the scale benchmark: kovs-controller against 5,000 simulated nodes and
#                agents, written to docs/scale.md (needs root; not part of make test)
#
# Both install what they need (Debian packages; kube-apiserver, kube-controller-manager,
# kube-scheduler and kubectl v$(K8S_VERSION), built once and cached in $(KOVS_CACHE)).

GO          ?= go
BIN         := $(CURDIR)/_output/bin
K8S_VERSION := 1.37.2
export KOVS_CACHE ?= $(HOME)/.cache/kovs
K8S_BIN     := $(KOVS_CACHE)/k8s-v$(K8S_VERSION)/bin
SANDBOX     ?= kovs
NODES       ?= 3
IP_FAMILY   ?= ipv4
E2E_TIMEOUT ?= 40m

export GOFLAGS ?= -buildvcs=false
# The ovs-vswitchd kovs ships (in the kovs/ovs image) and tests with: Debian's, with the
# patches in hack/ovs (hack/build-ovs.sh, `make ovs`). First in PATH, so that the
# sandbox's nodes and the tests that start an ovs-vswitchd run it.
OVS_DIR     := $(KOVS_CACHE)/ovs
export PATH := $(OVS_DIR)/bin:$(PATH)
# The reference CNI plugin kovs chains for hostPort (a go.mod tool); the sandbox installs
# it next to kovs-cni, as the agent image does.
PORTMAP     := github.com/containernetworking/plugins/plugins/meta/portmap

.PHONY: all build tools deps k8s ovs test unit e2e conformance scale upgrade-test truth-tables old-release demo sandbox-up sandbox-down bench bench-once fuzz lint clean images

all: build

## build: every binary into _output/bin
build:
	$(GO) build -o $(BIN)/ ./go-controller/cmd/... $(PORTMAP)

## tools: Debian packages, the cached Kubernetes binaries and the cached ovs-vswitchd
tools: deps k8s ovs

deps:
	bash hack/install-deps.sh

k8s:
	K8S_VERSION=$(K8S_VERSION) bash hack/build-k8s.sh

## ovs: ovs-vswitchd from Debian's source with hack/ovs's patches, cached in $(OVS_DIR)
ovs: deps
	bash hack/build-ovs.sh

# TESTRUN runs go test -json, prints the -v output and fails on a failure or on a skip
# that hack/allowed-skips.txt does not list with its reason (hack/testrun).
TESTRUN     := $(GO) run ./hack/testrun -go $(GO) --

## test: lint, unit tests, end-to-end tests against real sandboxes, every benchmark once
test: tools build images lint unit e2e bench-once

## unit: the tests that need no sandbox (as root, the OVS and namespace ones run too), and
## the NetworkPolicy truth-table cases and 400 generated ones checked offline against the
## independent model and kube-network-policies' evaluator (TestCases*), and the tier truth
## table's against the tier model (TestTierCases*)
unit:
	$(TESTRUN) -count=1 ./go-controller/... ./hack/... ./test/e2e/netpol/policymodel/... ./test/e2e/netpol/refmodel/... ./test/e2e/scale/harness/...
	$(GO) -C test/e2e/conformance/netpolapi test -count=1 ./strip/
	$(TESTRUN) -count=1 -run '^TestCases' ./test/e2e/netpol/
	$(TESTRUN) -count=1 -run '^TestTierCases' ./test/e2e/clusterpolicy/

# netpol comes first: go test starts packages in the order named, two at a time, and
# netpol's truth tables (about 22 minutes) are the longest; in alphabetical order they
# started after five other packages and were the last to finish.
e2e: build images old-release
	KOVS_E2E=1 KOVS_BIN_DIR=$(BIN) KOVS_K8S_BIN_DIR=$(K8S_BIN) KOVS_OLD_RELEASE_DIR=$(OLD_RELEASE) \
		$(TESTRUN) -count=1 -timeout $(E2E_TIMEOUT) ./test/e2e/netpol ./test/e2e/...

## old-release: the release at UPGRADE_FROM (before pod addresses moved to the nodes and OVS
## into its own DaemonSet), built once into $(KOVS_CACHE)/kovs-<commit> (its binaries,
## images and dist/): TestRealNodes comes up with it and upgrades to this tree's
## (docs/upgrades.md; a few minutes the first time on a machine, nothing after)
UPGRADE_FROM ?= e57e8fbd5ededab49d5e3d57a23fff2a02c4dd96
OLD_RELEASE  := $(KOVS_CACHE)/kovs-$(UPGRADE_FROM)
old-release:
	@if [ ! -f $(OLD_RELEASE)/_output/images/agent.tar ]; then \
		echo "building the release at $(UPGRADE_FROM) into $(OLD_RELEASE)"; \
		rm -rf $(OLD_RELEASE) && mkdir -p $(OLD_RELEASE) && \
		git archive $(UPGRADE_FROM) | tar -x -C $(OLD_RELEASE) && \
		$(MAKE) -C $(OLD_RELEASE) build images; \
	fi

## upgrade-test: TestRealNodes's upgrade alone (its first subtest, about 4 minutes): three
## real nodes come up with the release at UPGRADE_FROM and are upgraded to this tree's
upgrade-test: tools build images old-release
	KOVS_E2E=1 KOVS_BIN_DIR=$(BIN) KOVS_K8S_BIN_DIR=$(K8S_BIN) KOVS_OLD_RELEASE_DIR=$(OLD_RELEASE) \
		$(TESTRUN) -count=1 -timeout 30m -run '^TestRealNodes$$/^upgrade_from_the_previous_release$$' ./test/e2e/realnode/

## truth-tables: every NetworkPolicy truth-table case probed through Services too (make
## test's TestTruthTableViaService runs the cases where translation meets policy:
## serviceCases in test/e2e/netpol/service_mode_test.go), and the direct-mode tables as in
## make test (about 30 minutes)
truth-tables: tools build
	KOVS_E2E=1 KOVS_TRUTH_TABLES=all KOVS_BIN_DIR=$(BIN) KOVS_K8S_BIN_DIR=$(K8S_BIN) \
		$(TESTRUN) -count=1 -timeout 90m -run '^Test(NetworkPolicyTruthTable|TruthTableViaService)$$' ./test/e2e/netpol/

## conformance: the upstream NetworkPolicy suite, the sig-network [Conformance] tests, the rest of sig-network (Services, Networking)
## and the network-policy-api ClusterNetworkPolicy suite (its own Go module, test/e2e/conformance/netpolapi)
## on three real nodes, written to docs/conformance.md (about 70 minutes, the last about 20; make test runs subsets of the first and third;
## KOVS_CONFORMANCE_ONLY=<part of a suite name> runs one suite alone; KOVS_CONFORMANCE_NODES=6 gives every zone two nodes,
## which three Traffic Distribution tests want, not runnable on three)
conformance: tools build images
	KOVS_E2E=1 KOVS_CONFORMANCE=1 KOVS_CONFORMANCE_REPORT=$(CURDIR)/docs/conformance.md \
		KOVS_BIN_DIR=$(BIN) KOVS_K8S_BIN_DIR=$(K8S_BIN) \
		$(TESTRUN) -count=1 -timeout 6h -run '^TestConformance$$' ./test/e2e/conformance/

## scale: the real kube-apiserver, etcd and kovs-controller (kovs-sandbox up
## --control-plane-only) against SCALE_NODES simulated nodes (hollow kubelets) and agents
## (real policy-stream clients), the workload and churn of issue 17, written to
## docs/scale.md; a benchmark, never asserted. KOVS_SCALE_* variables resize it
## (test/e2e/scale/harness/config.go); make test runs the same harness at 200 nodes.
SCALE_NODES ?= 5000
scale: tools build
	KOVS_E2E=1 KOVS_SCALE=1 KOVS_SCALE_NODES=$(SCALE_NODES) KOVS_SCALE_NAMESPACES=$${KOVS_SCALE_NAMESPACES:-$(SCALE_NODES)} \
		KOVS_SCALE_REPORT=$(CURDIR)/docs/scale.md KOVS_BIN_DIR=$(BIN) KOVS_K8S_BIN_DIR=$(K8S_BIN) \
		$(GO) test -count=1 -v -timeout 3h -run '^TestScaleBenchmark$$' ./test/e2e/scale/

## demo: a 3-node sandbox, pods in two namespaces, the connectivity matrix and a trace
demo: tools build
	bash hack/demo.sh

sandbox-up: tools build
	KOVS_K8S_BIN_DIR=$(K8S_BIN) $(BIN)/kovs-sandbox --name $(SANDBOX) up --nodes $(NODES) --ip-family $(IP_FAMILY)

sandbox-down:
	$(BIN)/kovs-sandbox --name $(SANDBOX) down

## bench: benchmarks, reported as measured (ns/op and custom units), never asserted; then
## the policy compiler beside Antrea's own perf test (hack/bench-antrea.sh)
bench: tools build
	$(GO) test -run '^$$' -bench . -benchmem ./go-controller/...
	KOVS_E2E=1 KOVS_BIN_DIR=$(BIN) KOVS_K8S_BIN_DIR=$(K8S_BIN) \
		$(GO) test -p 1 -run '^$$' -bench . -benchtime 1x -timeout 30m ./test/e2e/...
	GO=$(GO) hack/bench-antrea.sh

## bench-once: every benchmark run once (-benchtime 1x) so none rots unnoticed; results
## printed, never asserted (make bench measures them properly, at full size: 100,000 SCTP
## associations, 100 policy samples per background size and 60 s of policy churn for each
## --datapath-invalidation mode, not 5,000, 20 and 10 s)
bench-once: build
	KOVS_BENCH_SCTP_ASSOCIATIONS=5000 $(TESTRUN) -count=1 -run '^$$' -bench . -benchtime 1x ./go-controller/...
	KOVS_E2E=1 KOVS_BIN_DIR=$(BIN) KOVS_K8S_BIN_DIR=$(K8S_BIN) KOVS_BENCH_POLICY_SAMPLES=20 KOVS_BENCH_CHURN_SECONDS=10 \
		$(TESTRUN) -count=1 -p 1 -run '^$$' -bench . -benchtime 1x -timeout 30m ./test/e2e/...

## fuzz: every Fuzz test of a parser of outside input, each for FUZZTIME (their seeds and
## testdata/fuzz corpora run as plain tests in make unit; this is the fuzzing itself,
## about 2 minutes, apart from make test's budget)
FUZZTIME ?= 10s
fuzz:
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' go-controller | xargs -n1 dirname | sort -u); do \
		for fz in $$(grep -h -o '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go | cut -c6-); do \
			echo "== $$dir $$fz"; $(GO) test -run '^$$' -fuzz "^$$fz\$$" -fuzztime $(FUZZTIME) -parallel 1 ./$$dir/; \
		done; \
	done

lint:
	@out=$$(gofmt -l go-controller test); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) -C test/e2e/conformance/netpolapi vet ./strip/ ./genbase/

clean:
	rm -rf _output

## images: every image (kovs/controller, kovs/agent, kovs/ovs, pause, agnhost) as an OCI
## image archive in _output/images, without a container engine (images/README.md)
images: deps k8s ovs build
	$(BIN)/kovs-images build --repo $(CURDIR) --out $(CURDIR)/_output/images \
		--cache $(KOVS_CACHE)/images --k8s-dir $(KOVS_CACHE)/k8s-v$(K8S_VERSION) --ovs-dir $(OVS_DIR)
