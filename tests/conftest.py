"""Shared fixtures: the data root (full or embedded), small tokenized corpora and a tiny trained checkpoint.

Everything here is real: real Arrow files from the real pipeline, real Trainer runs.
Session-scoped so the expensive pieces are built once per test run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist the workers already fill the cores: one intra-op thread each (and in the processes they start),
# since two workers' OpenMP pools spin against each other (the study tests: 191 s -> 116 s on 2 cores, half the CPU).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# glibc hands a freed block of 32 MiB or more back to the system (munmap), and trims the heap's free top past 128 KiB:
# the next step's logits (the tiny model's 512 x 50,257 floats, 103 MB, and their softmax) were then faulted in again
# page by page, each page zeroed by the kernel. Kept in the process instead (its peak, not its sum, stays resident;
# a free top past 1 GiB is still trimmed): tests/training/test_train.py 203 -> 178 CPU-s (system time 33 -> 15 s).
# glibc reads these at a process's start: in the environment for xdist's workers and every process the tests start,
# and through mallopt for this one.
_MALLOC = {"MALLOC_MMAP_MAX_": ("0", -4), "MALLOC_TRIM_THRESHOLD_": (str(1 << 30), -1)}  # value, mallopt's M_ number
for _name, (_value, _param) in _MALLOC.items():
    os.environ.setdefault(_name, _value)
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(_param, int(os.environ[_name]))
    except Exception:  # not glibc, or a value that is no C int: its defaults
        pass

REPO = Path(__file__).resolve().parents[1]


def pytest_sessionstart(session):
    """torch, transformers, datasets and accelerate, which nearly every test file imports, and the training code
    over them, imported once and frozen out of the garbage collector: every full collection (accelerate's after
    each Trainer run, a study's after each of its runs, in the tests' processes and the children forked from
    them) otherwise walks their objects (the IsoFLOP micro study alone: 62.8 s -> 56.9 s). Not in xdist's
    controller, which runs no test: its workers start after this hook, and import them themselves."""
    if not os.environ.get("PYTEST_XDIST_WORKER") and getattr(session.config.option, "numprocesses", None):
        return
    import gc

    import accelerate  # noqa: F401
    import datasets  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import hfpretrain.training.run  # noqa: F401 - the Trainer and model code: in this process once, not in each
    # child tests/forked.py forks from it (a forked `train`, even one refused at start, imported them again: seconds)

    gc.freeze()


# The tests run on $DATA_ROOT when it is set (the full data mount), else on the embedded sample that
# ships with the package (src/hfpretrain/assets/default_data: GPT-2 tokenizer, mini_train/mini_val,
# a few dozen ARC test questions). Tests marked `full_data` need files only the full mount has and are
# skipped, with the reason, on the embedded sample.
def _full_data() -> bool:
    from hfpretrain.paths import using_embedded_data

    return not using_embedded_data()  # DATA_ROOT set, and not to the embedded root itself


FULL_DATA = _full_data()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "full_data(what): needs the full data mount (DATA_ROOT), e.g. the Qwen3 tokenizer or the full "
        "eval sets; skipped when only the embedded sample data is available",
    )

    config.addinivalue_line(
        "markers", "gpu: needs a CUDA GPU (benchmarks/gpu_tests.sh runs them on the GPU machine); skipped without one"
    )


# The longest test files (minutes each, `make test PYTEST_ARGS=--durations=40`), run first: `make test` deals whole
# files to its workers in collection order, and one of these dealt last would run alone after the others finish.
LONGEST_FILES = (
    "training/test_distributed.py",
    "training/test_parallel.py",
    "test_faults.py",
    "test_readme.py",
    "study/test_study.py",
    "study/test_design.py",
    "eval/test_harness.py",
)


def _longest_first(item) -> int:
    path = item.nodeid.split("::", 1)[0].removeprefix("tests/")
    return LONGEST_FILES.index(path) if path in LONGEST_FILES else len(LONGEST_FILES)


def pytest_collection_modifyitems(config, items):
    import torch

    items.sort(key=_longest_first)  # stable: the other files, and the tests in each file, keep their order

    if os.environ.get("PYTEST_XDIST_WORKER"):  # torch read OMP_NUM_THREADS when imported; this holds if it came first
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

    if not torch.cuda.is_available():
        for item in items:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (benchmarks/gpu_tests.sh)"))
    if FULL_DATA:
        return
    for item in items:
        marker = item.get_closest_marker("full_data")
        if marker is not None:
            what = f" ({marker.args[0]})" if marker.args else ""
            item.add_marker(
                pytest.mark.skip(
                    reason=f"needs the full data mount{what}: only the embedded sample data is in use (set DATA_ROOT)"
                )
            )


@pytest.fixture(scope="session")
def data_root() -> Path:
    """$DATA_ROOT, else the embedded sample data root."""
    from hfpretrain.paths import EMBEDDED_DATA_ROOT

    root = os.environ.get("DATA_ROOT")
    if not root:
        return EMBEDDED_DATA_ROOT
    if not Path(root).is_dir():
        pytest.fail(f"DATA_ROOT={root} is not a directory (unset it to use the embedded sample data)")
    return Path(root)


@pytest.fixture(scope="session")
def gpt2_tokenizer(data_root) -> Path:
    return data_root / "tokenizers" / "gpt2"


@pytest.fixture(scope="session")
def mini_train(data_root) -> Path:
    return data_root / "pretrain" / "mix" / "mini_train.jsonl.zst"


@pytest.fixture(scope="session")
def mini_val(data_root) -> Path:
    return data_root / "pretrain" / "mix" / "mini_val.jsonl.zst"


@pytest.fixture(scope="session")
def mini_blocks_bpe1k(tmp_path_factory, mini_train, mini_val) -> Path:
    """``mini_blocks`` with a 1,024-token byte-level BPE trained on the same 300 documents: for the tests that
    train many tiny models (the studies), whose time GPT-2's 50k-row head and loss would otherwise take."""
    from hfpretrain.data import tokenize_corpus
    from hfpretrain.data.train_tokenizer import train_tokenizer

    base = tmp_path_factory.mktemp("bpe1k")
    tokenizer = train_tokenizer([mini_train], vocab_size=1024, out=base / "tokenizer", max_docs=300)
    return tokenize_corpus(
        inputs=[mini_train],
        val_inputs=[mini_val],
        out=base / "mini_blocks",
        tokenizer=tokenizer,
        seq_len=128,
        max_docs=300,
        val_docs=100,
    )


@pytest.fixture(scope="session")
def mini_blocks(tmp_path_factory, mini_train, mini_val, gpt2_tokenizer) -> Path:
    """Output dir of the real data pipeline: 300 mini_train docs / 100 mini_val docs, gpt2, seq_len 128.

    Layout: train/ and validation/ (datasets.save_to_disk; column input_ids = 128 uint16 ids per row,
    set_ids), tokenizer/, manifest.json. See docs/data.md.
    """
    from hfpretrain.data import tokenize_corpus

    return tokenize_corpus(
        inputs=[mini_train],
        val_inputs=[mini_val],
        out=tmp_path_factory.mktemp("data") / "mini_blocks",
        tokenizer=gpt2_tokenizer,
        seq_len=128,
        max_docs=300,
        val_docs=100,
    )
