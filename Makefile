# Two commands for a fresh machine: `make demo` and `make test`. Both create .venv if missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := -m pip --disable-pip-version-check -q
# The TensorFlow / TF Text versions that stock TF Serving links: exports must run there too.
COMPAT_VENV ?= .venv-tf2.20
COMPAT_PACKAGES := tensorflow==2.20.0 tensorflow-text==2.20.0
# Test processes: most tests leave a core idle (Python start-up, subprocesses, small models).
TEST_WORKERS ?= 2

.PHONY: demo test install compat clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-install whenever the package metadata changes.
$(VENV)/.installed: setup.cfg setup.py | $(PY)
	$(PY) $(PIP) install -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) $(PIP) install -e '.[test]'
	touch $@

$(COMPAT_VENV)/.installed:
	$(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python $(PIP) install $(COMPAT_PACKAGES)
	touch $@

install: $(VENV)/.installed

compat: $(COMPAT_VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m tfformer.cli.demo

test: $(VENV)/.installed-test $(COMPAT_VENV)/.installed
	$(PY) -m ruff check .
	TFFORMER_COMPAT_PYTHON=$(abspath $(COMPAT_VENV))/bin/python $(PY) -m pytest -n $(TEST_WORKERS) tests

clean:
	rm -rf $(VENV) $(COMPAT_VENV) build *.egg-info
