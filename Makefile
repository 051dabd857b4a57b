# kpd developer commands. `make up` and `make test` work on a fresh clone (README: Quick start).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
KPD    := $(VENV)/bin/kpd
STAMP  := $(VENV)/.installed
HTTP_PORT ?= 8080
RUN_DIR := .kpd

.PHONY: install browser up down test lint bench compat clean

NATIVE := native/Cargo.toml native/Cargo.lock native/pyproject.toml native/kpd_core.pyi $(wildcard native/src/*.rs)

# (Re)install when pyproject.toml or the compiled core changes; the stamp keeps later runs
# instant. The core (native/, docs/native-core.md) is built with cargo from crates.io by maturin.
$(STAMP): pyproject.toml $(NATIVE)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "kpd needs Python 3.11+")'
	@command -v java >/dev/null || { echo "kpd: Java 17+ is required (apt-get install openjdk-17-jdk-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "kpd: Maven is required (apt-get install maven)"; exit 1; }
	@command -v cargo >/dev/null || { echo "kpd: Rust's cargo is required (https://rustup.rs)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet ./native
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

up: install
	$(KPD) kafka start
	@mkdir -p $(RUN_DIR)
	@if [ -f $(RUN_DIR)/sidecar.pid ] && kill -0 $$(cat $(RUN_DIR)/sidecar.pid) 2>/dev/null; then \
		echo "sidecar already running (pid $$(cat $(RUN_DIR)/sidecar.pid))"; \
	else \
		KPD_HTTP_PORT=$(HTTP_PORT) nohup $(KPD) run > $(RUN_DIR)/sidecar.log 2>&1 & echo $$! > $(RUN_DIR)/sidecar.pid; \
	fi
	@for i in $$(seq 1 300); do \
		curl -fsS http://127.0.0.1:$(HTTP_PORT)/readyz >/dev/null 2>&1 && break; \
		kill -0 $$(cat $(RUN_DIR)/sidecar.pid) 2>/dev/null || { cat $(RUN_DIR)/sidecar.log; exit 1; }; \
		sleep 0.2; \
	done
	@echo "kafka:    127.0.0.1:9092"
	@echo "sidecar:  http://127.0.0.1:$(HTTP_PORT)  (log: $(RUN_DIR)/sidecar.log)"
	@echo "health:   http://127.0.0.1:$(HTTP_PORT)/healthz  ready: /readyz  metrics: /metrics"
	@echo "API docs: http://127.0.0.1:$(HTTP_PORT)/docs"

down:
	@if [ -f $(RUN_DIR)/sidecar.pid ] && kill $$(cat $(RUN_DIR)/sidecar.pid) 2>/dev/null; then \
		while kill -0 $$(cat $(RUN_DIR)/sidecar.pid) 2>/dev/null; do sleep 0.1; done; \
		echo "sidecar stopped"; \
	else echo "sidecar is not running"; fi
	@rm -f $(RUN_DIR)/sidecar.pid
	@if [ -x $(KPD) ]; then $(KPD) kafka stop; fi

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	cargo fmt --manifest-path native/Cargo.toml --check
	cargo clippy --manifest-path native/Cargo.toml --release --all-targets --locked -- -D warnings

# The API docs test opens /docs in a real browser: Debian's chromium, headless.
browser:
	@command -v chromium >/dev/null || { \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends chromium >/dev/null \
		|| { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; } \
		|| { echo "kpd: the API docs test needs chromium (apt-get install chromium)"; exit 1; }; }

# The tests wait far more than they compute (sidecars start, leases end, failovers): several
# pytest-xdist workers share one broker (tests/conftest.py); 4 keep this 2-core machine busy.
# The 25 slowest tests are listed at the end: where the suite's time goes. The core's tests
# build unoptimised: that compiles in half the time of a release build; they run in 0.1 s.
TEST_WORKERS ?= 4
test: lint browser
	cargo test --manifest-path native/Cargo.toml --locked
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25

# Not part of `make test` (about 6 minutes per release): the integration suite and the client
# checks against each Kafka release, 3 partitions per topic by default (docs/compatibility.md).
KAFKA_VERSIONS ?= 3.6.2 3.9.1 4.2.1
compat: install
	$(PY) -m devtools.compat --versions $(KAFKA_VERSIONS)

bench: install
	$(PY) bench/delay.py
	$(PY) bench/pop.py
	$(PY) bench/revive.py
	$(PY) bench/audit.py

clean: down
	rm -rf $(RUN_DIR) $(VENV) native/target
