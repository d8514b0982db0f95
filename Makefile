# Two entry points: `make demo` (the whole pipeline, small, on CPU) and `make test`.
# Both create .venv and install what is missing. DATA_ROOT must point at the data folder
# (tokenizers/, eval/, pretrain/); see README.md.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TORCH   ?= torch==2.13.0
STAMP   := $(VENV)/.installed
# Subprocesses the tests start (accelerate launch, scripts) must find the venv's tools.
export PATH := $(abspath $(BIN)):$(PATH)
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test check-data

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

check-data:
	@test -n "$(DATA_ROOT)" || { echo "error: DATA_ROOT is not set: run e.g. 'make $(MAKECMDGOALS) DATA_ROOT=/path/to/data' (a folder with tokenizers/, eval/, pretrain/)"; exit 2; }
	@test -d "$(DATA_ROOT)/tokenizers" || { echo "error: DATA_ROOT=$(DATA_ROOT) has no tokenizers/ folder"; exit 2; }

demo: install check-data
	DATA_ROOT="$(abspath $(DATA_ROOT))" $(BIN)/python scripts/demo.py

test: install check-data
	DATA_ROOT="$(abspath $(DATA_ROOT))" $(BIN)/python -m pytest $(PYTEST_ARGS)
