# Two commands for a fresh machine: `make demo` and `make test`. Both create .venv if missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := -m pip --disable-pip-version-check -q
# The TensorFlow / TF Text versions that stock TF Serving links: exports must run there too.
COMPAT_VENV ?= .venv-tf2.20
COMPAT_PACKAGES := tensorflow==2.20.0 tensorflow-text==2.20.0
# Keras on JAX without TensorFlow, for the backend-neutral tests; tfformer runs from the source
# tree there (PYTHONPATH), as it is not installed.
NOTF_VENV ?= .venv-notf
NOTF_PACKAGES := keras==3.15.1 jax==0.10.2 jaxlib==0.10.2 numpy h5py sentencepiece==0.2.3 \
	sacrebleu==2.6.0 pytest pytest-timeout pytest-xdist
# The model side's tests (keras.ops only): besides the TensorFlow run of every test, `make test`
# runs them on JAX without TensorFlow installed, as on the GPU machine (a JAX run in .venv as
# well would repeat the same tests on the same Keras and JAX versions).
BACKEND_TESTS := tests/test_attention.py tests/test_model.py tests/test_embedding.py \
	tests/test_mixed_precision.py \
	tests/test_feed_forward.py tests/test_losses.py tests/test_schedule.py tests/test_config.py \
	tests/test_keras_search.py tests/test_scoring.py tests/test_alignments.py tests/test_backends.py tests/test_store_training.py \
	tests/test_jax_processes.py
# Test processes: most tests leave a core idle (Python start-up, subprocesses, small models).
# worksteal: each worker starts with a contiguous share of the list, which tests/conftest.py
# begins with its own slow tests, dealt a module at a time (so a module's shared fixtures are
# built on one worker only), and an idle worker steals from a busy one's queue, so no worker
# is left alone with the slow tests at the end.
TEST_WORKERS ?= 2
PYTEST := -m pytest -n $(TEST_WORKERS) --dist worksteal

.PHONY: demo test install compat notf clean

# Virtualenvs are cached per machine, keyed by a hash of the Python version and their pins.
VENV_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tfformer/venvs
pins_hash = $(shell $(PYTHON) -c 'import hashlib, sys; \
	print(hashlib.sha256((sys.version + " $(strip $(1))").encode()).hexdigest()[:16])')
# The pins of .venv are setup.cfg's and setup.py's.
METADATA_HASH := $(shell cat setup.cfg setup.py | $(PYTHON) -c \
	'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')
TEST_CACHED := $(VENV_CACHE)/test-$(call pins_hash,$(METADATA_HASH))
# Copies a venv as hard links where the file system allows (instant), else as files.
copy_venv = cp -al $(1) $(2) 2>/dev/null || { rm -rf $(2) && cp -a $(1) $(2); }
# A copied venv's scripts (saved_model_cli, activate, ...) still name the venv they were
# installed in, which may be gone: point them at the copy (sed -i writes new files, so the
# hard-linked cache keeps its own).
rehome_venv = origin=$$(sed -n '1s|^\#!\(.*\)/bin/python[0-9.]*$$|\1|p' $(1)/bin/pip) && \
	if [ -n "$$origin" ] && [ "$$origin" != "$(abspath $(1))" ]; then \
		grep -lIsF "$$origin" $(1)/bin/* | xargs -r sed -i "s|$$origin|$(abspath $(1))|g"; fi

# A new .venv starts as a copy of the cached one with the test dependencies when there is one,
# so that pip then finds them installed and only installs tfformer itself from this clone.
$(PY):
	if [ -f $(TEST_CACHED)/.installed ]; then \
		$(call copy_venv,$(TEST_CACHED),$(VENV)) && rm -f $(VENV)/.installed* && \
		$(call rehome_venv,$(VENV)); \
	else $(PYTHON) -m venv $(VENV); fi

# Re-install whenever the package metadata changes.
$(VENV)/.installed: setup.cfg setup.py | $(PY)
	$(PY) $(PIP) install -e .
	touch $@

# The first test venv of these pins on a machine is kept, without tfformer, as the cache.
$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) $(PIP) install -e '.[test,torch]'
	touch $@
	if [ ! -f $(TEST_CACHED)/.installed ]; then \
		mkdir -p $(VENV_CACHE) && rm -rf $(TEST_CACHED) $(TEST_CACHED).tmp && \
		$(call copy_venv,$(VENV),$(TEST_CACHED).tmp) && rm -f $(TEST_CACHED).tmp/.installed* && \
		$(TEST_CACHED).tmp/bin/python $(PIP) uninstall -y tfformer && \
		mv $(TEST_CACHED).tmp $(TEST_CACHED) && touch $(TEST_CACHED)/.installed; \
	fi

# The compat and no-TensorFlow venvs hold pinned packages only (tfformer runs from the source
# tree there), so every clone on a machine links one shared copy of each.
COMPAT_CACHED := $(VENV_CACHE)/compat-$(call pins_hash,$(COMPAT_PACKAGES))
NOTF_CACHED := $(VENV_CACHE)/notf-$(call pins_hash,$(NOTF_PACKAGES))

# $(call cached_venv,LINK,CACHED,PACKAGES): build CACHED unless complete, then link LINK to it.
define cached_venv
	if [ ! -f $(2)/.installed ]; then \
		rm -rf $(2) && $(PYTHON) -m venv $(2) && \
		$(2)/bin/python $(PIP) install $(3) && touch $(2)/.installed; \
	fi
	rm -rf $(1) && ln -s $(2) $(1)
endef

$(COMPAT_VENV)/.installed:
	$(call cached_venv,$(COMPAT_VENV),$(COMPAT_CACHED),$(COMPAT_PACKAGES))

$(NOTF_VENV)/.installed:
	$(call cached_venv,$(NOTF_VENV),$(NOTF_CACHED),$(NOTF_PACKAGES))

install: $(VENV)/.installed

compat: $(COMPAT_VENV)/.installed

notf: $(NOTF_VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m tfformer.cli.demo

# Test processes keep the bytecode of tfformer's modules (an environment that turns it off would
# have every subprocess compile the package again).
unexport PYTHONDONTWRITEBYTECODE

# JAX programs compiled once are reused from disk by later processes, runs and clones on this
# machine (JAX keys each entry by the program, the compile options and its own version): same
# results, less compile time.
JAX_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tfformer/jax
test: export JAX_COMPILATION_CACHE_DIR = $(JAX_CACHE)
test: export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS = 0
test: export JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES = 0
# The run without TensorFlow goes in one process beside the TensorFlow run: the CPU time that
# the TensorFlow run's workers leave idle (waiting on subprocesses and servers, its last tests)
# is enough for it, with one XLA thread so as not to contend with them (tests/conftest.py).
# Its output follows the TensorFlow run's; either failing fails the target.
test: $(VENV)/.installed-test $(COMPAT_VENV)/.installed $(NOTF_VENV)/.installed
	$(PY) -m ruff check .
	mkdir -p .cache
	KERAS_BACKEND=jax TFFORMER_EXPECT_NO_TENSORFLOW=1 PYTHONPATH=$(CURDIR) \
		XLA_FLAGS=--xla_cpu_multi_thread_eigen=false \
		$(NOTF_VENV)/bin/python -m pytest --cpu-durations=10 $(BACKEND_TESTS) > .cache/notf-tests.log 2>&1 & \
	notf=$$!; \
	TFFORMER_COMPAT_PYTHON=$(abspath $(COMPAT_VENV))/bin/python $(PY) $(PYTEST) \
		--durations=15 --cpu-durations=25 tests; status=$$?; \
	wait $$notf; notf_status=$$?; \
	echo "--- the JAX run without TensorFlow ($(NOTF_VENV)):"; cat .cache/notf-tests.log; \
	[ $$status -eq 0 ] && [ $$notf_status -eq 0 ]

clean:
	rm -rf $(VENV) $(COMPAT_VENV) $(NOTF_VENV) .cache build *.egg-info
