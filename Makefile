# The front door. `make test` and `make demo` bootstrap everything they need from nothing.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
MODEL_DIR := .models/all-MiniLM-L6-v2

.PHONY: setup test demo try unit lint bench bench-quick eval clean

setup: $(VENV)/.installed $(MODEL_DIR)/.verified $(VENV)/bin/huginn-chat-fast

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

# The Personas' CLI without `site` (tools/cli_launcher.py): the same commands, a faster start.
# Its modules are compiled here too: a Persona cannot write __pycache__ under the checkout, and
# without it every start compiles them again (~15 ms). compileall skips what is up to date.
$(VENV)/bin/huginn-chat-fast: $(VENV)/.installed tools/cli_launcher.py FORCE
	$(PY) -m compileall -q daemon
	$(PY) tools/cli_launcher.py --venv $(VENV) --root .

FORCE:

$(MODEL_DIR)/.verified: $(VENV)/.installed tools/fetch_model.py
	$(PY) tools/fetch_model.py --dest $(MODEL_DIR)

# pytest exits 5 when it collected nothing: that is a failure here, never a pass.
test: setup
	$(PY) -m pytest -q -p no:cacheprovider

unit: setup
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

# Configured in pyproject.toml. mypy covers the product and its tools (strict on scope/ and
# chunker/); the tests are held by ruff only.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/ruff format --check .

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

# Retrieval quality on real chat (bench/eval.py): seeds a throwaway Synapse once (cached under
# .cache/eval/ by corpus hash), runs the real refresher and reader, prints the figures.
eval: setup
	nice $(PY) -m bench.eval

clean:
	rm -rf $(VENV) .models
