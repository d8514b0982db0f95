"""Export a checkpoint to share it: weights in bf16 by default (half of fp32, what Hub models ship), the
tokenizer, the model card (its load lines naming the export, or the Hub repo it is pushed to) and lineage beside
them, and optionally a push to the Hugging Face Hub.

The export is written first; a push that fails (offline, no token) leaves it in place with one line saying
how to upload it later.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from hfpretrain.eval.card import refresh_card
from hfpretrain.eval.checkpoint import OutputFolderError, check_checkpoint, check_output_folder

DTYPES = ("bfloat16", "float16", "float32")


class PushError(RuntimeError):
    """One line: the push failed, the export is kept."""


def export_checkpoint(checkpoint, out, dtype: str = "bfloat16", push_to_hub: str | None = None,
                      private: bool = False) -> Path:
    """Write ``checkpoint`` (a ``save_pretrained`` folder) to ``out`` in ``dtype``; push it to the Hub
    repo ``push_to_hub`` (``user/name``) if given. Returns ``out``."""
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype}: one of {', '.join(DTYPES)}")
    src = check_checkpoint(checkpoint)
    out = check_output_folder(out)
    if out.resolve() == src.resolve():
        raise OutputFolderError(f"--out {out}: is the checkpoint itself; export to another folder")
    # after the checks: a bad input is answered at once, not after seconds of importing torch
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars: noise in a one-line-per-outcome command
    model = AutoModelForCausalLM.from_pretrained(src, dtype=getattr(torch, dtype))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    if (src / "lineage.json").is_file():  # where the model came from
        shutil.copyfile(src / "lineage.json", out / "lineage.json")
    if (src / "README.md").is_file():  # the model card (with the scores hfpretrain eval added), loading the copy
        (out / "README.md").write_text(refresh_card((src / "README.md").read_text(), push_to_hub or out))
    if push_to_hub:
        push(out, push_to_hub, private)
    return out


def push(folder: Path, repo_id: str, private: bool = False) -> str:
    """Upload ``folder`` as the model repo ``repo_id`` (created if missing); returns its URL."""
    from huggingface_hub import HfApi

    try:
        api = HfApi()
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                          commit_message="hfpretrain export")
    except Exception as err:  # offline, no token, no permission, a network error: all one line
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PushError(f"--push-to-hub {repo_id}: {reason}; the export is in {folder} "
                        f"(upload it later: huggingface-cli upload {repo_id} {folder})") from None
    return f"https://huggingface.co/{repo_id}"
