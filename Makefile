# aegis_nb: `make demo` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# Third-party MCP clients (Node 22, MCP Inspector, conformance suite) for tests/test_clients_*.py, and
# the reference memory server the gateway tests put behind it (tests/real_servers_support.py).
CLIENTS := tests/clients/node_modules/.installed
# mcp-server-git (PyPI), another server the gateway tests put behind it, in a venv of its own: its
# dependencies' pins are its own, not to be mixed with ours.
GIT_SERVER_VERSION := 2026.10.19
GIT_SERVER_VENV    := .venvs/mcp-server-git
GIT_SERVER         := $(GIT_SERVER_VENV)/.installed-$(GIT_SERVER_VERSION)

.PHONY: demo test test-pythons lint bench lab install clients clean assets soak

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# Exact versions are pinned in package.json; no lock file, since npm rewrites it per platform.
$(CLIENTS): tests/clients/package.json
	@if command -v npm >/dev/null; then \
		cd tests/clients && npm install --no-package-lock --no-audit --no-fund --loglevel=error \
		&& touch node_modules/.installed; \
	else echo "npm not found: the third-party client tests will skip"; fi

$(GIT_SERVER):
	rm -rf $(GIT_SERVER_VENV)
	$(PYTHON) -m venv $(GIT_SERVER_VENV)
	$(GIT_SERVER_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(GIT_SERVER_VENV)/bin/python -m pip install --quiet 'mcp-server-git==$(GIT_SERVER_VERSION)'
	touch $@

clients: $(CLIENTS) $(GIT_SERVER)

demo: $(STAMP)
	$(VENV)/bin/aegis-nb demo

test: $(STAMP) $(CLIENTS) $(GIT_SERVER)
	$(PY) -m pytest $(PYTEST_ARGS)
	$(PY) -m pytest --nbval notebooks/ --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg

# The pytest suite on the other Pythons that requires-python admits, each in a venv of its own under
# .venvs/, kept until pyproject.toml changes. Tests marked slow (killed processes, browsers, external
# clients and servers) drive other programs more than the Python they run on: `make test` runs them
# once, and leaving them out here keeps CI well under its time budget (~2 min a version).
# pyenv's shims answer for every installed version but fail unless it is selected, so each candidate
# is tried. A Python this machine lacks is skipped; under AEGIS_STRICT=1 (CI) that is a failure.
PYTHONS    ?= 3.12 3.13
PYENV_ROOT ?= $(HOME)/.pyenv
VENVS      := .venvs

test-pythons: $(CLIENTS)
	@for v in $(PYTHONS); do \
		py=; for c in "$$(command -v python$$v)" $(PYENV_ROOT)/versions/$$v.*/bin/python$$v; do \
			if [ -z "$$py" ] && "$$c" -c '' 2>/dev/null; then py=$$c; fi; \
		done; \
		if [ -z "$$py" ]; then \
			echo "== Python $$v: not found, skipped"; \
			if [ "$$AEGIS_STRICT" = 1 ]; then exit 1; fi; continue; \
		fi; \
		venv=$(VENVS)/$$v; \
		if [ ! -f $$venv/$(notdir $(STAMP)) ]; then \
			echo "== Python $$v: installing .[dev] into $$venv"; \
			{ [ -x $$venv/bin/python ] || "$$py" -m venv $$venv; } \
			&& $$venv/bin/python -m pip install --quiet --upgrade pip \
			&& $$venv/bin/python -m pip install --quiet -e '.[dev]' \
			&& rm -f $$venv/.installed-* && touch $$venv/$(notdir $(STAMP)) || exit 1; \
		fi; \
		echo "== Python $$v ($$py)"; \
		$$venv/bin/python -m pytest -p no:cacheprovider -m "not slow" $(PYTEST_ARGS) || exit 1; \
	done

# Retake the screenshots in assets/ from a real JupyterLab (the browser tests, writing into assets/).
assets: $(STAMP)
	AEGIS_REFRESH_ASSETS=1 $(PY) -m pytest tests/test_browser_live.py tests/test_magics_browser.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The journal's fault-injection harness for minutes (AEGIS_SOAK_SECONDS, default 180; seeds from
# AEGIS_SOAK_SEED): concurrent sagas with cancelled callers, failing steps and undos, write failures
# and SIGKILLed children, each followed by recovery and the invariant checks. Prints the counts.
soak: $(STAMP)
	$(PY) -m tests.soak

bench: $(STAMP)
	@for script in bench/*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

# Served from the repository root, so the tutorials' pictures (../assets/) load, as on Binder.
# JupyterLab refuses to run as root without --allow-root (containers and CI machines run as root).
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=. notebooks/01_quickstart.ipynb \
		$(if $(filter 0,$(shell id -u)),--allow-root)

clean:
	rm -rf $(VENV) $(VENVS) .pytest_cache .mypy_cache .ruff_cache
