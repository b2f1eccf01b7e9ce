# Two commands do all setup on a fresh machine:
#   make run    -> installs into .venv (first time) and serves the bundled demo config on 127.0.0.1:8765
#   make test   -> installs into .venv (first time) and the system packages some tests drive
#                  (redis-server, chromium, kubectl; .ci/system-deps), lints, type-checks and runs the tests
# and one is the edit loop:
#   make check  -> lint, types, unit and property tests (under a minute; CI runs `make test`)
# CI also runs `make conformance`: the MCP conformance suite directly and through the gateway
# (needs npm; .ci/conformance/README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: run test system-deps check lint typecheck pytest config-reference bench bench-dataplane bench-plane-goals conformance image image-base image-test clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

# The demo operator token is for this local demo only; set MCP_RECONCILER_OPERATOR_TOKENS to your own.
run: $(VENV)/.installed
	MCP_RECONCILER_OPERATOR_TOKENS="$${MCP_RECONCILER_OPERATOR_TOKENS:-demo-operator-token}" \
		$(VENV)/bin/mcp-reconciler serve

test: system-deps lint typecheck pytest

system-deps:
	@bash .ci/system-deps

check: lint typecheck
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow" tests/unit tests/property

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

# mypy does not run the editable install's import hook: give it a link tree with installed names.
typecheck: $(VENV)/.installed
	@mkdir -p build/typecheck/mcp_reconciler
	@for d in reconciler api sdk; do ln -sfn ../../../$$d build/typecheck/mcp_reconciler/$$d; done
	$(VENV)/bin/mypy

# Two workers (pytest-xdist): alone, the suite keeps about one of CI's two cores busy (it mostly
# waits on the servers and interpreters it starts). --dist loadfile keeps each test file on one
# worker, so a module's fixtures (the bench smoke runs) are made once and its tests keep their
# order. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
pytest: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 -n $(PYTEST_WORKERS) --dist loadfile

# docs/config.schema.json and docs/config.md from the config models (tests/docs/test_config_reference.py
# fails until they are regenerated after a config model changes).
config-reference: $(VENV)/.installed
	$(PY) -m mcp_reconciler.reconciler.config_reference

# Gateway CPU per forwarded call against a byte relay on the same stack and the SDK upstream (issue 26).
bench-dataplane: $(VENV)/.installed
	$(PY) bench/bench_dataplane.py

# Issue 26's scale goals: tools/list at 1,000 sessions, list_changed fan-out, 10,000 idle sessions.
bench-plane-goals: $(VENV)/.installed
	$(PY) bench/bench_plane_goals.py

bench: $(VENV)/.installed
	$(PY) bench/run_all.py

# The suite's client sends no credentials, so /mcp is opened on purpose to anonymous sessions that
# follow the catalog (gateway.anonymous; serve warns about it). Fails when the gateway passes fewer
# checks than the direct run.
CONF_SETTINGS ?= anonymous: {grant_policy: follow}
conformance: $(VENV)/.installed
	@rm -rf build/conformance/run && mkdir -p build/conformance
	@port=$${CONF_PORT_BASE:-$$($(PY) -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}; \
	CONF_PORT_BASE=$$port CONF_GATEWAY_SETTINGS='$(CONF_SETTINGS)' bash .ci/conformance/run.sh $(VENV)/bin/mcp-reconciler build/conformance/run

# The container image (deploy/Containerfile, README "Deploy", ADR 0028), built with podman on a
# base made here from Debian's packages (deploy/make-base.sh: mmdebstrap -> podman import; made
# once, `make image-base` remakes it) because this machine cannot pull from registries; the
# wheel's dependencies come from PyPI during the build. PODMAN_FLAGS is what Debian's podman 4.3
# needs on this machine: runc (crun refuses its hybrid cgroup layout), ulimits within the hard
# limits (the defaults exceed them) and the host's network. `make image-test` then runs the image
# (tests/deploy/test_image.py: /healthz, the demo's tools over MCP, SIGTERM -> exit 0); slow, and
# not part of `make test`.
IMAGE ?= localhost/mcp-reconciler:dev
IMAGE_BASE ?= localhost/mcp-reconciler-base:bookworm
PODMAN_FLAGS ?= --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --network host
# The host's CA bundle for pip in the build (PIP_CERT, when set: here egress re-signs TLS).
IMAGE_BUILD_CA ?= $(PIP_CERT)
image:
	@podman image exists $(IMAGE_BASE) || bash deploy/make-base.sh $(IMAGE_BASE)
	podman build --format docker $(PODMAN_FLAGS) --build-arg BASE=$(IMAGE_BASE) \
		$(if $(IMAGE_BUILD_CA),--volume $(IMAGE_BUILD_CA):/run/build-ca.crt:ro --build-arg PIP_CERT=/run/build-ca.crt) \
		-f deploy/Containerfile -t $(IMAGE) .

image-base:
	bash deploy/make-base.sh $(IMAGE_BASE)

image-test: image $(VENV)/.installed
	MCP_RECONCILER_TEST_IMAGE=$(IMAGE) MCP_RECONCILER_TEST_PODMAN_FLAGS="$(PODMAN_FLAGS)" \
		$(PY) -m pytest -q -p no:cacheprovider tests/deploy/test_image.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
