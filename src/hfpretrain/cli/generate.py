"""Generate text from a checkpoint with transformers.pipeline("text-generation").

    python scripts/generate.py --model CKPT --prompt "Question: Why is the sky blue?\nAnswer:"
    python scripts/generate.py --model CKPT --prompt "Once" --prompt "The sun" --seed 1
    python scripts/generate.py --model CKPT --prompt-file prompts.txt --json
    python scripts/generate.py --model CKPT --unconditional --num-samples 3

Options: --max-new-tokens, --temperature (0 = greedy), --top-p, --top-k, --repetition-penalty,
--seed, --device, --json. Prompts may contain "\\n" escapes; a prompt file has one prompt per line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from hfpretrain.cli import error

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def _unescape(s: str) -> str:
    return s.replace("\\n", "\n").replace("\\t", "\t")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Generate text from a checkpoint")
    p.add_argument("checkpoint", nargs="?", help="save_pretrained directory (model + tokenizer), as eval takes it")
    p.add_argument("--model", help="the same, as a flag (give one of the two)")
    p.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    p.add_argument("--prompt-file", default=None, help="file with one prompt per line")
    p.add_argument("--unconditional", action="store_true", help="sample from the BOS/end-of-text token")
    p.add_argument("--num-samples", type=int, default=1, help="samples for --unconditional")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=50)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None)
    p.add_argument("--json", action="store_true", help="print a JSON list instead of text")
    a = p.parse_args(argv)
    if (a.checkpoint is None) == (a.model is None):
        return error("give the checkpoint once: hfpretrain generate CHECKPOINT (or --model CHECKPOINT)")
    a.model = a.model or a.checkpoint

    prompts = [_unescape(x) for x in a.prompt]
    if a.prompt_file:
        try:
            with open(a.prompt_file, encoding="utf-8") as f:
                prompts += [_unescape(line.rstrip("\n")) for line in f if line.strip()]
        except OSError as err:
            return error(f"cannot read prompt file {a.prompt_file}: {err.strerror}")
    if prompts and a.unconditional:
        print("error: give prompts or --unconditional, not both", file=sys.stderr)
        return 2
    if not prompts and not a.unconditional:
        print("error: no prompt: pass --prompt, --prompt-file or --unconditional", file=sys.stderr)
        return 2

    from hfpretrain.eval.generation import CheckpointNotFoundError, check_settings, format_results, generate

    try:  # the settings, then the checkpoint (config, weights, tokenizer files), before anything is loaded
        check_settings(a.max_new_tokens, a.temperature, a.top_p, a.top_k, a.repetition_penalty, a.num_samples)
    except ValueError as err:  # "top_p must be ..." -> "--top-p must be ..."
        name, rest = str(err).split(" ", 1)
        return error(f"--{name.replace('_', '-')} {rest}")
    try:
        results = generate(
            a.model,
            prompts or None,
            max_new_tokens=a.max_new_tokens,
            temperature=a.temperature,
            top_p=a.top_p,
            top_k=a.top_k,
            repetition_penalty=a.repetition_penalty,
            seed=a.seed,
            device=a.device,
            num_samples=a.num_samples,
        )
    except CheckpointNotFoundError as err:
        return error(err)
    if a.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(format_results(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
