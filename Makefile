# Explicit-control dynamic batching for Triton. `make help` lists the targets.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp
HTTP_PORT ?= 8000
# Extra tritonserver flags (the launcher adds --model-control-mode=explicit --load-model=*
# unless one names a mode; --no-supervise turns off the stub supervisor)
SERVE_ARGS ?=

.PHONY: help setup serve test test-unit fuzz bench bench-smoke reliability simulate-report clean

help:
	@echo "make setup        create .venv with the pinned Triton stack (idempotent)"
	@echo "make serve        start tritonserver on model_repository/ (HTTP_PORT=$(HTTP_PORT))"
	@echo "make test         run all tests, including real-server integration tests"
	@echo "make test-unit    run the fast unit tests only"
	@echo "make fuzz         property tests (@given) on random examples, more of them (not gating)"
	@echo "make bench        explicit vs best-tuned native: emulated t4/a100, MiniLM, h200_minilm, device idle -> results/bench/ (~42 min, the last full run: results/bench_hold_unbounded)"
	@echo "make bench-smoke  perf_analyzer at a fixed rate: emulated_explicit vs emulated_native"
	@echo "make reliability  overload 2x (60 s), soak (10 min), native overload -> results/reliability.md"
	@echo "make simulate-report  simulator: explicit vs native model -> results/simulator_report.md"

setup: $(STAMP)
	@test -f .wheelhouse/.stamp || bash scripts/setup_env.sh  # the test wheelhouse, if removed

# Re-run the setup only when what it installs changes; a second `make setup` is instant.
$(STAMP): requirements.txt pyproject.toml scripts/setup_env.sh
	bash scripts/setup_env.sh
	@touch $@

serve: setup
	$(PY) -m server_ops.launcher --http-port $(HTTP_PORT) $(SERVE_ARGS)

test: setup
	$(PY) -m pytest -q tests

test-unit: setup
	$(PY) -m pytest -q tests/unit

# The gating suite runs the property tests on the same examples every time (the "ci"
# Hypothesis profile, tests/conftest.py); this searches new ones ("search" profile).
fuzz: setup
	HYPOTHESIS_PROFILE=search $(PY) -m pytest -q $$(grep -rlE '^@given' tests/unit --include='*.py')

bench: setup
	$(PY) scripts/bench.py

bench-smoke: setup
	$(PY) scripts/bench_smoke.py

reliability: setup
	$(PY) scripts/reliability.py

simulate-report: setup
	$(PY) scripts/simulate_report.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
