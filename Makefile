# Two entry points: `make demo` (the whole pipeline, small, on CPU) and `make test`.
# Both create .venv and install what is missing. They read DATA_ROOT (a data folder with tokenizers/,
# eval/, pretrain/) when it is set, else the small embedded sample in src/hfpretrain/assets/default_data
# (tests that need the full data are then skipped); see README.md.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TORCH   ?= torch==2.13.0
# Where no NVIDIA GPU is, torch's CPU build (a 192 MB wheel) from PyTorch's index beside PyPI, as the README's install
# line does: pip's default Linux wheel is the CUDA build, several GB. Only if that index answers within 5 s (a machine
# that reaches a PyPI mirror only would otherwise wait out pip's retries); TORCH_INDEX=URL names another, or none.
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi),,https://download.pytorch.org/whl/cpu)
STAMP   := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
# Subprocesses the tests start (accelerate launch, scripts) must find the venv's tools.
export PATH := $(abspath $(BIN)):$(PATH)
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
# No WANDB_MODE here: transformers prints "[INFO] Running in WANDB offline mode" on every command when it is
# offline, report_to none or not; a run that reports to W&B without a login logs offline by itself (training/run.py).
export TOKENIZERS_PARALLELISM ?= false
# DeepSpeed JIT-builds its CPU shared-memory collective (deepspeed_shm_comm, 1-3 min on 2 cores) at the first ZeRO
# launch, into torch's extension cache (~/.cache/torch_extensions unless TORCH_EXTENSIONS_DIR). Its build flags name
# the venv's paths, so a build from another venv replaced it there and the next run here built it again: one cache
# per venv. DeepSpeed has no switch to skip the op (TorchBackend builds it whenever it can; only inference uses it).
export TORCH_EXTENSIONS_DIR ?= $(abspath $(VENV))/torch_extensions

.PHONY: install demo test check-data

# The venv and torch, then the package with an extra: `eval` for the demo (lm-eval: what it needs), `test` for the
# suite (the demo's, and pytest, ruff, triton, deepspeed, torchao, the loggers). Each extra has its stamp.
define VENV_AND_TORCH
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	index="$(TORCH_INDEX)"; if [ -n "$$index" ] && ! $(BIN)/python -c "import sys, urllib.request; \
		urllib.request.urlopen(sys.argv[1], timeout=5)" "$$index/" 2>/dev/null; then index=; fi; \
	echo "installing $(TORCH)$${index:+ with $$index beside the usual indexes}"; \
	$(BIN)/python -m pip install -q "$(TORCH)" $${index:+--extra-index-url "$$index"}
endef

$(STAMP): setup.cfg pyproject.toml
	$(VENV_AND_TORCH)
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

$(DEMO_STAMP): setup.cfg pyproject.toml
	$(VENV_AND_TORCH)
	$(BIN)/python -m pip install -q -e ".[eval]"
	touch $(DEMO_STAMP)

install: $(STAMP)

# DATA_ROOT given (argument or environment): it must be a data folder; not given: the embedded sample.
RUN_ENV := $(if $(strip $(DATA_ROOT)),DATA_ROOT="$(abspath $(DATA_ROOT))",env -u DATA_ROOT)

check-data:
	@if [ -n "$(strip $(DATA_ROOT))" ]; then \
		test -d "$(DATA_ROOT)/tokenizers" || { echo "error: DATA_ROOT=$(DATA_ROOT) has no tokenizers/ folder"; exit 2; }; \
	else echo "DATA_ROOT is not set: using the embedded sample data (src/hfpretrain/assets/default_data)"; fi

demo: $(DEMO_STAMP) check-data
	$(RUN_ENV) $(BIN)/python scripts/demo.py

# One test file per process, one process per core (pytest-xdist): the files' fixtures stay in one process.
XDIST   ?= -n auto --dist loadfile
test: install check-data
	$(BIN)/ruff check src tests scripts benchmarks
	$(BIN)/ruff format --check src tests scripts benchmarks
	$(RUN_ENV) $(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)
