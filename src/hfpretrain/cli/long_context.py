"""Long-context evaluation of a checkpoint: loss by position on long validation documents, passkey retrieval.

    hfpretrain long-context CKPT --data DATA [--blocks 16] [--min-document-tokens N] [--lengths 2048 4096 8192 16384]
        [--samples 20] [--short-data DATA_2K --short-blocks 64] [--retrieval-docs FILE --retrieval-samples 50]
        [--document-mask auto|on|off] [--dtype auto|bf16|fp32] [--device cuda] [--out FILE]

DATA is an output folder of tokenize_pile.py (its validation blocks; packed at the length to evaluate, e.g. the
context phase's); --short-data one packed at the length the model was trained at before, for the short-context
loss and bits per byte (does the extension cost short-context quality?); --retrieval-docs a file of
`hfpretrain retrieval-docs` made from held-out text, for retrieval accuracy by distance beside the passkey's.
Writes CKPT/long_context.json (or --out), which the run's report (scripts/report.py) shows as a table and a plot.
See hfpretrain/eval/long_context.py for what is measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import islice
from pathlib import Path

from hfpretrain.cli import error


def _document_mask(choice: str, checkpoint: Path) -> bool:
    """auto: what the run trained with (its recipe.yaml beside final/), else off."""
    if choice != "auto":
        return choice == "on"
    recipe = checkpoint.parent / "recipe.yaml"
    if not recipe.is_file():
        return False
    import yaml

    try:
        return bool(((yaml.safe_load(recipe.read_text()) or {}).get("model") or {}).get("document_mask"))
    except (yaml.YAMLError, AttributeError):
        return False


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", help="save_pretrained folder (a run's final/ or checkpoint-N, with its tokenizer)")
    p.add_argument("--data", help="tokenize_pile.py output whose validation blocks give the loss by position")
    p.add_argument("--blocks", type=int, default=16, help="validation blocks for the loss by position")
    p.add_argument(
        "--min-document-tokens",
        type=int,
        default=0,
        help="count only documents at least this long inside a block (the long ones)",
    )
    p.add_argument(
        "--lengths",
        type=int,
        nargs="*",
        default=[2048, 4096, 8192, 16384],
        help="passkey prompt lengths in tokens (none: no passkey)",
    )
    p.add_argument("--samples", type=int, default=20, help="passkey prompts per length (depths spread over 0..1)")
    p.add_argument("--short-data", help="tokenize_pile.py output at the original length: plain loss and bits per byte")
    p.add_argument("--short-blocks", type=int, default=64, help="validation blocks of --short-data")
    p.add_argument("--retrieval-docs", help="retrieval-docs output (.jsonl.zst) of held-out text: accuracy by distance")
    p.add_argument("--retrieval-samples", type=int, default=50, help="documents of --retrieval-docs to score")
    p.add_argument(
        "--document-mask",
        choices=("auto", "on", "off"),
        default="auto",
        help="positions restart per document (auto: as the run's recipe.yaml says)",
    )
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--dtype", choices=("auto", "bf16", "fp32"), default="auto", help="auto: bf16 on a GPU")
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--out", default=None, help="default: CKPT/long_context.json")
    a = p.parse_args(argv)

    from hfpretrain.eval.checkpoint import CheckpointNotFoundError, check_checkpoint
    from hfpretrain.outdir import nesting_problem, writable_problem

    checkpoint = Path(a.checkpoint)
    try:  # as eval and generate do: without tokenizer files the scoring divided by zero
        check_checkpoint(checkpoint, tokenizer=True)
    except CheckpointNotFoundError as err:
        return error(err)
    out = Path(a.out) if a.out else checkpoint / "long_context.json"
    problem = (
        "a folder, not a .json file"
        if out.is_dir()
        else (nesting_problem(out.parent, "eval") or writable_problem(out.parent))
    )
    if problem:  # before the scoring, not after it
        return error(f"--out {out}: {problem}")
    if a.data is None and a.short_data is None and not a.lengths and a.retrieval_docs is None:
        return error(
            "nothing to measure: give --data (loss by position), --short-data, --lengths (passkey) "
            "and/or --retrieval-docs"
        )
    for flag, folder in (("--data", a.data), ("--short-data", a.short_data)):
        if folder is not None and not (Path(folder) / "manifest.json").is_file():
            return error(f"{flag} {folder}: no manifest.json (an output folder of tokenize_pile.py)")
    for name in ("blocks", "samples", "batch_size", "short_blocks", "retrieval_samples"):
        if getattr(a, name) < 1:
            return error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if any(n < 64 for n in a.lengths):
        return error(f"--lengths {a.lengths}: a passkey prompt needs at least 64 tokens")
    documents = []
    if a.retrieval_docs is not None:
        from hfpretrain.data.read import DataError, expand_inputs, generate_records
        from hfpretrain.data.retrieval import asked_facts

        try:
            rows = generate_records(expand_inputs([a.retrieval_docs]), on_bad="fail")
            rows = (row for row in rows if not row["skip"])
            documents = [row["text"] for row in islice(rows, a.retrieval_samples)]
            for document in documents:
                asked_facts(document)
        except (DataError, ValueError) as err:
            return error(f"--retrieval-docs {a.retrieval_docs}: {err}")
        if not documents:
            return error(f"--retrieval-docs {a.retrieval_docs}: no documents in it")

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from hfpretrain.data.manifest import bits_per_byte, require_manifest, tokens_per_byte
    from hfpretrain.data.order import load_input_ids
    from hfpretrain.eval.long_context import loss_by_position, mean_loss, passkey_accuracy, retrieval_accuracy

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        return error(f"--device {device}: no CUDA GPU is available here (--device cpu, or leave it out)")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}.get(a.dtype) or (
        torch.bfloat16 if device.startswith("cuda") else torch.float32
    )
    try:
        config = AutoConfig.from_pretrained(str(checkpoint))
    except (OSError, ValueError) as err:
        return error(f"{checkpoint}: cannot read its config.json ({str(err).splitlines()[0]})")
    # learned absolute positions (GPT-2) stop at n_positions: past it the embedding lookup fails (a RoPE model
    # takes any length: how well it does past its training length is what is measured)
    learned = None if getattr(config, "rope_parameters", None) else getattr(config, "n_positions", None)
    if learned:
        longest = {f"--lengths {n}": n for n in a.lengths or []}
        for flag, folder in (("--data", a.data), ("--short-data", a.short_data)):
            if folder is not None:
                try:
                    longest[f"{flag} {folder} (blocks of"] = int(require_manifest(folder, flag)["seq_len"])
                except (OSError, ValueError) as err:
                    return error(err)
        past = [f"{what} {n})" if what.endswith("of") else what for what, n in longest.items() if n > learned]
        if past:
            return error(
                f"{checkpoint}: {config.model_type} learns absolute positions up to {learned}, so "
                f"it has none for {', '.join(past)}: lengths up to {learned}"
            )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    except (OSError, ValueError) as err:
        return error(f"{checkpoint}: cannot load its tokenizer ({str(err).splitlines()[0]})")
    from hfpretrain.training.resolve import tokenizer_hash

    for flag, folder in (("--data", a.data), ("--short-data", a.short_data)):
        # blocks of another tokenizer index past the embedding (an IndexError), or score the wrong tokens
        try:
            recorded = (require_manifest(folder, flag).get("tokenizer") or {}) if folder is not None else {}
        except (OSError, ValueError) as err:
            return error(err)
        if (
            recorded.get("sha256")
            and recorded["sha256"] != tokenizer_hash(tokenizer)
            and recorded.get("vocab_size") != len(tokenizer)
        ):
            return error(
                f"{flag} {folder} was tokenized with {recorded.get('name_or_path')} "
                f"({recorded.get('vocab_size')} tokens), not {checkpoint}'s tokenizer ({len(tokenizer)} "
                "tokens): tokenize the data with the checkpoint's tokenizer"
            )
    if learned and documents:
        longest = max(map(len, tokenizer(documents, add_special_tokens=False)["input_ids"]))
        if longest > learned:
            return error(
                f"--retrieval-docs {a.retrieval_docs}: documents of up to {longest} tokens, past the "
                f"{learned} positions {config.model_type} learns: make them with --max-tokens {learned} "
                "or less"
            )
    try:
        model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=dtype).to(device)
    except (OSError, ValueError) as err:
        return error(f"{checkpoint}: cannot load the model ({str(err).splitlines()[0]})")
    result = {
        "checkpoint": str(checkpoint),
        "dtype": str(dtype).removeprefix("torch."),
        "max_position_embeddings": getattr(model.config, "max_position_embeddings", None),
        "rope_parameters": getattr(model.config, "rope_parameters", None),
    }
    try:
        if a.data is not None:
            manifest = require_manifest(a.data, "--data")
            blocks = load_input_ids(a.data, "validation")
            blocks = blocks.select(range(min(a.blocks, len(blocks))))
            result["loss_by_position"] = {
                "data": str(a.data),
                **loss_by_position(
                    model,
                    blocks,
                    int(manifest["tokenizer"]["eos_token_id"]),
                    _document_mask(a.document_mask, checkpoint),
                    a.min_document_tokens,
                    a.batch_size,
                ),
            }
        if a.short_data is not None:
            manifest = require_manifest(a.short_data, "--short-data")
            blocks = load_input_ids(a.short_data, "validation")
            blocks = blocks.select(range(min(a.short_blocks, len(blocks))))
            short = mean_loss(
                model,
                blocks,
                int(manifest["tokenizer"]["eos_token_id"]),
                _document_mask(a.document_mask, checkpoint),
                a.batch_size,
            )
            ratio = tokens_per_byte(manifest)
            result["short_context"] = {
                "data": str(a.short_data),
                "seq_len": int(manifest["seq_len"]),
                "blocks": len(blocks),
                **short,
                "bpb": bits_per_byte(short["loss"], ratio) if ratio else None,
            }
        if a.lengths:
            result["passkey"] = passkey_accuracy(model, tokenizer, a.lengths, a.samples, batch_size=a.batch_size)
        if documents:
            result["retrieval"] = {"data": str(a.retrieval_docs), **retrieval_accuracy(model, tokenizer, documents)}
    except ValueError as err:
        return error(err)
    except torch.OutOfMemoryError as err:
        return error(f"out of memory ({str(err).splitlines()[0]}): fewer --lengths or a smaller --batch-size", 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    from hfpretrain.study.long_context_report import summary_lines

    print("\n".join(summary_lines(result)))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
