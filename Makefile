# polsched: the two commands a newcomer runs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# The local control plane's directory (kubeconfig, logs, pids); `make demo DEV_DIR=/tmp/x`
# runs a second, separate demo.
DEV_DIR ?= .dev
# `make cluster REAL_NODE=1`: one real node (kubelet, containerd, runc; root only) too.
REAL_NODE ?=
# `make cluster METRICS=1`: the Metrics API too (metrics-server, kwok's usage emulation),
# for the load-aware scorers; `make demo` turns it on.
METRICS ?=
# `make cluster FEATURE_GATES=GenericWorkload=true`: Kubernetes feature gates (Name=true|false,
# comma-separated) for kube-apiserver, kube-controller-manager and kube-scheduler (the
# conformance oracle and the bench's too); GenericWorkload=true also serves
# scheduling.k8s.io/v1beta1 (Workload, PodGroup). Unset: upstream's defaults.
FEATURE_GATES ?=
ifneq ($(strip $(FEATURE_GATES)),)
export POLSCHED_FEATURE_GATES := $(FEATURE_GATES)
endif
# `make image`: the OCI archive written (and loaded into DEV_DIR's real node, if one runs).
IMAGE_ARCHIVE ?= .build/polsched-image.tar

.PHONY: all venv build build-metrics helm release release-tools cluster cluster-down test test-unit test-e2e test-install image lint demo demo-down bench conformance chaos clean e2e-upstream fuzz

all: test

# The venv is rebuilt when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	@echo "[make] creating $(VENV) and installing polsched (editable) with its test deps"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

venv: $(VENV)/.installed

# Build (or reuse the cached) kube-apiserver, kube-scheduler, etcd and kwok (and
# metrics-server with METRICS=1: hack/metrics.sh, a cache of its own).
build:
	@hack/build.sh >/dev/null
	@[[ -z "$(METRICS)" ]] || hack/metrics.sh build >/dev/null

build-metrics:
	@hack/metrics.sh build >/dev/null

# helm (hack/helm.sh: from Go modules at hack/helm.env's HELM_VERSION, cached), for the
# chart's tests (tests/unit/test_chart.py) and `make release`: built here, progress shown,
# never inside a test's timeout.
helm:
	@hack/helm.sh >/dev/null

# The SBOM generator of `make release` (hack/release.sh tools: a pinned cyclonedx-bom in a
# virtualenv of its own under .build/); tests/unit/test_release.py runs a release too.
release-tools:
	@hack/release.sh tools >/dev/null

cluster: build
	@POLSCHED_REAL_NODE=$(REAL_NODE) POLSCHED_METRICS=$(METRICS) hack/cluster.sh up $(DEV_DIR)

# polsched's image without Docker (hack/image.sh: mmdebstrap + buildah), as an OCI archive;
# loaded into the real node's containerd as docker.io/local/polsched:VERSION when one runs.
image:
	@archive=$$(hack/image.sh build $(IMAGE_ARCHIVE)) && \
	if [[ -f $(DEV_DIR)/node/containerd.pid ]] && kill -0 $$(cat $(DEV_DIR)/node/containerd.pid) 2>/dev/null; then \
	  hack/node.sh load $(DEV_DIR) "$$archive" local/polsched:$$($(PYTHON) -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])'); \
	fi

cluster-down:
	@hack/cluster.sh down $(DEV_DIR)

# A release's artefacts in dist/VERSION/ (hack/release.sh): the image archive, polsched.yaml,
# the packaged chart, a CycloneDX SBOM, CHANGELOG.md. `make release VERSION=1.2.3`;
# IMAGE_REPO=registry.example.com/polsched names the image (default: the placeholder
# ghcr.io/polsched/polsched).
release: venv helm release-tools
	@[[ -n "$(VERSION)" ]] || { echo "make release: VERSION=x.y.z is required" >&2; exit 2; }
	@$(if $(IMAGE_REPO),IMAGE_REPO=$(IMAGE_REPO)) hack/release.sh $(VERSION) >/dev/null

# Every test: unit, then e2e against a real kube-apiserver the test session starts
# (or the one from `make cluster` when POLSCHED_KUBECONFIG is set).
# make test also needs metrics-server (tests/e2e/test_load_aware.py): built here, with its
# progress shown, so a cold machine does not compile it inside a test fixture's timeout.
test: venv build build-metrics helm release-tools
	-@hack/install-deps.sh lua
	$(PY) -m pytest tests -m 'not install' $(PYTEST_ARGS)

test-unit: venv helm release-tools
	$(PY) -m pytest tests -m unit $(PYTEST_ARGS)

test-e2e: venv build build-metrics
	$(PY) -m pytest tests -m e2e $(PYTEST_ARGS)

# The install as a user meets it (tests/install): make image, a control plane with a real
# node, kubectl apply -k with the image, the operator in-cluster scheduling real pods; then
# the Helm chart on a second one: helm install, upgrade (the CRD gains a field), uninstall.
# Root only; installs its Debian packages (hack/install-deps.sh). ~10 min warm.
test-install: venv build helm
	@hack/install-deps.sh all
	$(PY) -m pytest tests/install -m install $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check operator tests bench conformance
	$(VENV)/bin/mypy

# issue 11's chaos suite: faults (SIGKILL, API server restarts, failover, a hanging
# renew, extenders misbehaving, node churn, malformed policies, a Dedicated rollout)
# against a private control plane, with invariants read back from the API server.
# CHAOS_ARGS=--short is the version .ci/run runs.
chaos: venv build
	$(PY) -m tests.chaos.run $(CHAOS_ARGS)

# The demo runs the load-aware example too, so its control plane serves the Metrics API.
demo: METRICS = 1
demo: venv cluster
	@POLSCHED_DEV_DIR=$(DEV_DIR) hack/demo.sh up

demo-down:
	@POLSCHED_DEV_DIR=$(DEV_DIR) hack/demo.sh down || true
	@hack/cluster.sh down $(DEV_DIR)

bench: venv build
	$(PY) bench/run.py $(BENCH_ARGS)

# The differential suite: kube-scheduler (hack/) and polsched's default policy on the same
# generated scenarios, pod by pod (conformance/). Table on stdout, every difference in
# conformance-results/differences.json; exit 1 when a pod differs. `make test` runs a
# subset (tests/e2e/test_conformance.py). CONFORMANCE_ARGS="--count 36 --families gates"
# Kubernetes' own [sig-scheduling] e2e tests (e2e.test built from the pinned module, cached)
# on local kwok clusters: polsched as the only scheduler, then kube-scheduler on an identical
# cluster, side by side; fails when polsched fails a spec kube-scheduler passes
# (hack/e2e-upstream.sh; docs/e2e-upstream.md). E2E_SHORT=1: the short version.
E2E_UPSTREAM_DIR ?= /tmp/polsched-e2e-upstream
e2e-upstream: venv build
	@hack/e2e-upstream.sh run $(E2E_UPSTREAM_DIR)

conformance: venv build
	$(PY) -m conformance $(CONFORMANCE_ARGS)

# The long fuzz campaign (issue 36): 10,000 cases by default; e.g. FUZZ_ARGS="--cases 500
# --seed 7 --timeout 5", or "--minimise FILE" for a saved case. The short run is
# tests/unit/test_fuzz.py, in `make test`.
fuzz: venv
	$(PY) -m tests.fuzz $(FUZZ_ARGS)

clean: cluster-down
	rm -rf $(VENV) $(DEV_DIR)
