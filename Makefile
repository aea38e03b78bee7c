# statusvault: `make demo` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# Tests side by side (pytest-xdist): the suite mostly waits on its servers, so more workers than cores pay
# (docs/development/testing.md has the measurements behind the number).
TEST_WORKERS ?= 4
XDIST := -n $(TEST_WORKERS) --dist loadgroup
# pytest rewrites every test module's asserts at import and caches the result as bytecode; with
# PYTHONDONTWRITEBYTECODE set (as on these machines) each worker, each run, rewrites them all again (about 4 s).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest

.PHONY: install dist cluster-bin kube136-bin apiext-bin s3-bin operators-bin operators-report kubectl-bin helm-bin test test-all unit lint demo bench cluster-up cluster-down clean docs

install: $(STAMP)

# Try uv's cache first (seconds), then the registry (minutes); pip if uv cannot be had.
$(STAMP): pyproject.toml
	@python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install -q uv >/dev/null 2>&1 || true
	@if python3 -m uv --version >/dev/null 2>&1; then \
	  [ -x $(PY) ] || python3 -m uv venv -q -p python3 $(VENV); \
	  python3 -m uv pip install -q -p $(PY) --offline -e '.[dev]' 2>/dev/null \
	    || python3 -m uv pip install -q -p $(PY) -e '.[dev]'; \
	else \
	  [ -x $(PY) ] || python3 -m venv $(VENV); \
	  $(PY) -m pip install -q -e '.[dev]'; \
	fi
	@touch $@

# kube-apiserver + kube-controller-manager v1.20.2, built once per machine into ~/.cache/statusvault.
cluster-bin: $(STAMP)
	@$(PY) -m statusvault.testing.cluster build >/dev/null

# kube-apiserver + kube-controller-manager v1.36 and etcd 3.6, built from the Go module proxy with the machine's Go
# (statusvault/testing/kube136/) once per machine (about 7 minutes on 2 cores) into the same cache: every
# integration test runs on both control planes.
kube136-bin: $(STAMP)
	@$(PY) -m statusvault.testing.cluster build --kube-version 1.36 >/dev/null

# The Kubernetes 1.36 CRD server (apiextensions-apiserver) + etcd 3.5, built from Debian unstable's Go sources
# once per machine (5-15 minutes on 2 cores) into the same cache; tests/integration/crs/ runs on both servers.
apiext-bin: $(STAMP)
	@$(PY) -m statusvault.testing.apiext build >/dev/null

# versitygw, a real S3-compatible server (Object Lock included), built from the Go module proxy once per machine
# (a minute or two) into the same cache; the S3 Object Lock tests run on it as well as on moto.
s3-bin: $(STAMP)
	@$(PY) -m statusvault.testing.s3server build >/dev/null

# kubectl 1.36 (statusvault/testing/kubectl136/), built from the Go module proxy once per machine (a minute or two)
# into the same cache: tests/integration/test_tutorial.py types docs/tutorial.md's commands with it.
kubectl-bin: $(STAMP)
	@$(PY) -m statusvault.testing.kubectl build >/dev/null

# helm v3.22.0, built from the Go module proxy once per machine (about 2-3 minutes on 2 cores) into the same cache:
# tests/integration/test_helm_chart.py lints, renders and installs charts/statusvault/ with it.
helm-bin: $(STAMP)
	@$(PY) -m statusvault.testing.helm build >/dev/null

# Flux's source-controller and kustomize-controller (v1.9.6) and Cluster API's managers (v1.13.6, with the in-memory
# infrastructure provider), built from the Go module proxy once per machine into the same cache:
# tests/integration/test_operator_*.py run the real operators.
operators-bin: $(STAMP)
	@$(PY) -m statusvault.testing.operators build >/dev/null
	@$(PY) -m statusvault.testing.capi build >/dev/null

# The real operators' scenarios alone, with the comparison runs `make test` leaves out (a restore without status,
# clusterctl move), printing what each operator redid after each kind of restore or move (docs/operators.md).
operators-report: cluster-bin kube136-bin operators-bin
	STATUSVAULT_COMPARISONS=1 $(PYTEST) -s -q -p no:cacheprovider tests/integration/test_operator_flux.py tests/integration/test_operator_capi.py

# Every behaviour on Kubernetes 1.36, and on 1.20 (and the CRD-only server) what differs by version (docs/development/testing.md).
test: cluster-bin kube136-bin apiext-bin s3-bin operators-bin kubectl-bin helm-bin
	$(PYTEST) $(XDIST) $(PYTEST_ARGS)

# The full matrix: every integration test on both control planes.
test-all: cluster-bin kube136-bin apiext-bin s3-bin operators-bin kubectl-bin helm-bin
	STATUSVAULT_TEST_ALL=1 $(PYTEST) $(XDIST) $(PYTEST_ARGS)

# The tests that need no cluster (everything not marked `integration`), on both cores.
unit: $(STAMP)
	$(PYTEST) -m "not integration" -q -n 2 $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check statusvault tests
	$(VENV)/bin/ruff format --check statusvault tests
	$(VENV)/bin/mypy

# The demo runs the wheel's statusvault, installed into a virtual environment of its own (as pip gives it to a user).
demo: cluster-bin
	@$(PY) -m statusvault.testing.release venv $(VENV)-demo >/dev/null
	$(PY) -m statusvault.testing.demo --cli $(VENV)-demo/bin/statusvault

# What a release ships, into dist/: the wheel and sdist (from the tracked files), the Helm chart packaged, and
# SHA256SUMS; the wheel is installed into a fresh virtual environment and run (its version, its kubectl plugin).
dist: $(STAMP) helm-bin
	$(PY) -m statusvault.testing.release dist dist

bench: cluster-bin kube136-bin
	$(PY) -m statusvault.testing.bench

cluster-up: cluster-bin
	@$(PY) -m statusvault.testing.cluster up
	@echo "use it with: export KUBECONFIG=$$($(PY) -c 'from statusvault.testing.cluster import cache_dir; print(cache_dir() / "cluster" / "kubeconfig")')"

cluster-down: $(STAMP)
	@$(PY) -m statusvault.testing.cluster down

# docs/cli.md regenerated from --help, then the docs site built in strict mode (mkdocs.yml): a broken link or
# anchor, or a page outside the navigation, fails it (and CI).
docs: $(STAMP)
	$(PY) -m statusvault.testing.clidoc > docs/cli.md
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -q -d site

clean:
	rm -rf $(VENV) $(VENV)-demo dist .pytest_cache .mypy_cache .ruff_cache *.egg-info
