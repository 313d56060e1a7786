# Two commands for a fresh machine: `make demo` and `make test`. Both create .venv if missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test install clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-install whenever the package metadata changes.
$(VENV)/.installed: setup.cfg setup.py | $(PY)
	$(PIP) install -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install -e '.[test]'
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m training.demo

test: $(VENV)/.installed-test
	$(PY) -m pytest tests

clean:
	rm -rf $(VENV) build *.egg-info
