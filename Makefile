# The front door. `make test` and `make demo` bootstrap everything they need from nothing.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
MODEL_DIR := .models/all-MiniLM-L6-v2
# Extra pytest arguments for check, unit and test: `make check ARGS=--lf` reruns what failed last.
ARGS ?=

.PHONY: setup install check test demo try unit lint bench bench-quick eval clean

# A developer's venv: the runtime, then the test and lint tools (the `test` extra) on top.
setup: install $(VENV)/.installed

# A deployed venv: the runtime dependencies only (no pytest, Synapse or linters), the offline
# model and the Personas' fast CLI. Exact versions from constraints.txt, as for `setup`.
install: $(VENV)/.runtime $(MODEL_DIR)/.verified $(VENV)/bin/huginn-chat-fast

$(VENV)/.runtime: pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e .
	@touch $@

$(VENV)/.installed: $(VENV)/.runtime
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	@touch $@

# The Personas' CLI without `site` (tools/cli_launcher.py): the same commands, a faster start.
# Its modules are compiled here too: a Persona cannot write __pycache__ under the checkout, and
# without it every start compiles them again (~15 ms). compileall skips what is up to date.
$(VENV)/bin/huginn-chat-fast: $(VENV)/.runtime tools/cli_launcher.py FORCE
	$(PY) -m compileall -q daemon
	$(PY) tools/cli_launcher.py --venv $(VENV) --root .

FORCE:

$(MODEL_DIR)/.verified: $(VENV)/.runtime tools/fetch_model.py
	$(PY) tools/fetch_model.py --dest $(MODEL_DIR)

# The tiers (markers set in tests/conftest.py): `integration` (every test under tests/integration)
# and `synapse` (a test that starts the real homeserver) are set by the test's place and fixtures;
# `slow` by hand. The tests run on every core (pytest-xdist), a file's tests on one worker in the
# file's order (its module fixtures built once), the files handed out in collection order (the
# long integration files first, the many short unit files filling in after them: xdist's default
# reorder, by test count, left the one-test Synapse files for the end). pytest exits 5 when it
# collected nothing: a failure here too.
XDIST := -n auto --dist loadfile --no-loadscope-reorder

# The fast loop: lint, then every test that needs no Synapse and is not slow, each property test
# trying fewer examples (the `check` profile in tests/conftest.py).
check: lint
	$(PY) -m pytest -q $(XDIST) -m "not integration and not synapse and not slow" --hypothesis-profile=check $(ARGS)

# Every tier: what CI runs.
test: setup
	$(PY) -m pytest -q $(XDIST) $(ARGS)

unit: setup
	$(PY) -m pytest -q $(XDIST) tests/unit $(ARGS)

# Configured in pyproject.toml. mypy covers the product and its tools (strict on scope/ and
# chunker/); the tests are held by ruff only. lint-imports checks the direction of imports (the
# layers and the read side's ban on write paths: [tool.importlinter]).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-logo

demo: setup
	$(PY) -m devtools.demo

# The demo, then its homeserver and reader left running: it prints the lines to paste and the
# one that stops them.
try: setup
	$(PY) -m devtools.demo --try

# Speed and memory, every target a ratio measured side by side in one run (bench/bench.py); the
# figures end the output as `name: value` lines and land in bench/results/{full,quick}.json.
bench: setup
	nice $(PY) bench/bench.py

# The CI size (< 3 min on 2 cores), run by .ci/run after the tests so the harness cannot rot.
bench-quick: setup
	nice $(PY) bench/bench.py --quick

# Retrieval quality on real chat (bench/eval.py), per corpus: seeds a throwaway Synapse once
# (cached under .cache/eval/ by corpus hash), runs the real refresher and reader, prints the
# figures and writes .cache/eval/last.md. Options through ARGS, e.g. ARGS="--corpus irc2 --pool F".
eval: setup
	nice $(PY) -m bench.eval $(ARGS)

clean:
	rm -rf $(VENV) .models
