"""Text generation from a checkpoint through ``transformers.pipeline("text-generation")``.

Conditional (one or many prompts) and unconditional (start from the tokenizer's BOS token, or
its end-of-text/EOS token when there is no BOS, as for GPT-2) sampling with max new tokens,
temperature, top-p, top-k, repetition penalty and a seed.  ``temperature=0`` means greedy.
For a fixed seed the outputs are reproducible (same machine / library versions).
"""

from __future__ import annotations

import os

from hfpretrain.eval.checkpoint import CheckpointNotFoundError, check_checkpoint

__all__ = ["CheckpointNotFoundError", "check_settings", "format_results", "generate", "start_token"]


def _load(model):
    """-> (model, tokenizer) from a path, a (model, tokenizer) pair or a pipeline."""
    if isinstance(model, (tuple, list)) and len(model) == 2:
        return model[0], model[1]
    if isinstance(model, (str, os.PathLike)):
        path = check_checkpoint(model)  # config, whole weights, tokenizer files: before importing transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return AutoModelForCausalLM.from_pretrained(str(path)), AutoTokenizer.from_pretrained(str(path))
    from transformers import Pipeline

    if isinstance(model, Pipeline):
        return model.model, model.tokenizer
    raise TypeError(
        f"model must be a checkpoint folder, a (model, tokenizer) pair or a text-generation pipeline, "
        f"not {type(model).__name__}"
    )


def check_settings(
    max_new_tokens=64, temperature=1.0, top_p=1.0, top_k=50, repetition_penalty=1.0, num_samples=1
) -> None:
    """ValueError naming the first sampling setting out of range (before the model is loaded)."""
    checks = (
        ("max_new_tokens", max_new_tokens, isinstance(max_new_tokens, int) and max_new_tokens >= 1, "an integer >= 1"),
        ("num_samples", num_samples, isinstance(num_samples, int) and num_samples >= 1, "an integer >= 1"),
        ("temperature", temperature, temperature is None or temperature >= 0, ">= 0 (0: greedy)"),
        ("top_p", top_p, 0 < top_p <= 1, "in (0, 1]"),
        ("top_k", top_k, isinstance(top_k, int) and top_k >= 0, "an integer >= 0"),
        ("repetition_penalty", repetition_penalty, repetition_penalty > 0, "> 0"),
    )
    for name, value, ok, need in checks:
        if not ok:
            raise ValueError(f"{name} must be {need}, got {value!r}")


def start_token(tokenizer) -> str:
    """Text that starts an unconditional sample: BOS if the tokenizer has one, else EOS."""
    token = tokenizer.bos_token or tokenizer.eos_token
    if token is None:
        raise ValueError("tokenizer has neither a BOS nor an EOS token: cannot sample unconditionally")
    return token


def generate(
    model,
    prompts=None,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 50,
    repetition_penalty: float = 1.0,
    seed: int = 0,
    device=None,
    num_samples: int = 1,
) -> list[dict]:
    """Generate continuations.

    ``model``: checkpoint dir, ``(model, tokenizer)`` pair or a text-generation pipeline.
    ``prompts``: a string, a list of strings, or ``None`` / ``[]`` for unconditional sampling
    (``num_samples`` samples from the start token).  Returns one dict per sample:
    ``{"prompt", "completion", "text", "unconditional", "seed", "settings"}``.
    """
    check_settings(max_new_tokens, temperature, top_p, top_k, repetition_penalty, num_samples)
    lm, tok = _load(model)  # checks a checkpoint folder before importing transformers
    import torch
    from transformers import pipeline, set_seed

    if isinstance(prompts, str):
        prompts = [prompts]
    prompts = list(prompts or [])
    unconditional = not prompts
    if device is None:
        device = lm.device if getattr(lm, "device", None) is not None and lm.device.type != "meta" else "cpu"
    lm.eval()
    pipe = pipeline("text-generation", model=lm, tokenizer=tok, device=device)

    do_sample = temperature is not None and temperature > 0
    gen_kwargs = dict(
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        repetition_penalty=repetition_penalty,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
        return_full_text=False,
        use_cache=True,  # checkpoints saved before 2026-11-25 say use_cache: false (made from the training config)
    )
    if do_sample:
        gen_kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k)
    settings = {
        "max_new_tokens": max_new_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "top_k": top_k,
        "repetition_penalty": repetition_penalty,
        "do_sample": do_sample,
        "seed": seed,
    }

    inputs = [start_token(tok)] * max(num_samples, 1) if unconditional else prompts
    results = []
    set_seed(seed)
    with torch.no_grad():
        for i, text in enumerate(inputs):
            if unconditional:
                # ask the tokenizer not to add anything: the start token is the whole prompt
                out = pipe(text, add_special_tokens=False, **gen_kwargs)
            else:
                out = pipe(text, **gen_kwargs)
            completion = out[0]["generated_text"]
            prompt = "" if unconditional else text
            results.append(
                {
                    "prompt": prompt,
                    "completion": completion,
                    "text": prompt + completion,
                    "unconditional": unconditional,
                    "index": i,
                    "seed": seed,
                    "settings": settings,
                }
            )
    return results


def format_results(results: list[dict]) -> str:
    """Human-readable: each prompt and its completion, clearly delimited."""
    blocks = []
    for r in results:
        head = f"=== sample {r['index']} (unconditional) ===" if r["unconditional"] else f"=== prompt {r['index']} ==="
        body = [head]
        if not r["unconditional"]:
            body += [r["prompt"], "--- completion ---"]
        body.append(r["completion"])
        blocks.append("\n".join(body))
    return "\n\n".join(blocks) + "\n"
