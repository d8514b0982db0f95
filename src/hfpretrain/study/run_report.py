"""The write-up of one training run, generated from its folder: everything a homework report asks for.

Sections: data processing (the manifest, example batches), the model and every hyper-parameter,
hardware and time, what the training code does, training and validation curves, the final validation
loss in nats and bits per byte, lm-eval scores, conditional and unconditional generations, and the
commands that reproduce each step. Reads ``RUN/recipe.yaml``, ``summary.json``, ``log.jsonl`` and
``final/`` (a ``save_pretrained`` checkpoint); runs lm-eval and generation unless told not to.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

from hfpretrain.paths import DATA_ROOT_LAYOUT

DEFAULT_PROMPTS = ("The history of the", "def fibonacci(n):", "Question: Why is the sky blue?\nAnswer:")

TRAINING_CODE = """\
`scripts/pretrain.py` builds the model from its config JSON (random init), reads the packed blocks in a
seeded order that is a pure function of the step (exact resume), and trains with `PretrainTrainer`, a
`transformers.Trainer` subclass: the loss is computed from the final hidden states without materialising
all logits (a fused or chunked cross-entropy), weight decay applies to matrices only, a non-finite loss
stops the run, checkpoints are written atomically with a COMPLETE marker, and callbacks log tokens/s, MFU,
memory and gradient norms to `log.jsonl`. See docs/training.md."""


PLAN_KEYS = ("parameters", "seq_len", "world_size", "tokens_per_step", "flops_per_token")


def _read(path: Path, what: str = "a JSON object"):
    """``path`` parsed (JSON, or YAML for ``.yaml``) and checked to be a mapping; else one ValueError naming it."""
    try:
        text = path.read_text()
        obj = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(
            f"{path}{where}: not valid YAML ({getattr(e, 'problem', None) or type(e).__name__}): "
            "the file is corrupt or cut short"
        ) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{path}: not valid JSON ({str(e).splitlines()[0]}): the file is corrupt or cut short"
        ) from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: holds {type(obj).__name__ if obj is not None else 'nothing'}, not {what}")
    return obj


def _check_run(run_dir: Path, recipe: dict, summary: dict) -> None:
    """The keys the report reads, each missing one named with its file (a run of this tool writes them all)."""
    data = recipe.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("path"), str) or not data["path"]:
        raise ValueError(f"{run_dir / 'recipe.yaml'}: no data.path: not the recipe of a run")
    for key, kind in (("training", dict), ("optimizer", dict)):
        if recipe.get(key) is not None and not isinstance(recipe[key], kind):
            raise ValueError(f"{run_dir / 'recipe.yaml'}: {key} is {type(recipe[key]).__name__}, not a mapping")
    plan = summary.get("plan")
    missing = ["global_step"] if not isinstance(summary.get("global_step"), int) else []
    missing += ["plan"] if not isinstance(plan, dict) else [f"plan.{k}" for k in PLAN_KEYS if k not in plan]
    if not missing and not (
        isinstance(plan["parameters"], dict) and {"total", "non_embedding"} <= plan["parameters"].keys()
    ):
        missing.append("plan.parameters.total/non_embedding")
    if missing:
        raise ValueError(f"{run_dir / 'summary.json'}: no {', '.join(missing)}: not the summary of a finished run")


def _fmt(x, digits: int = 4) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def _table(rows: list[tuple]) -> list[str]:
    return ["| | |", "|---|---|", *(f"| {k} | {_fmt(v)} |" for k, v in rows), ""]


PACKING = {  # docs/data.md § Flags, --pack
    "concat": "documents run across block boundaries; the tail that does not fill a block is dropped",
    "whole": "documents kept whole where they fit: a document longer than a block gets whole blocks of its own, "
    "the others fill blocks best-fit",
}


def data_rows(manifest: dict) -> list[tuple[str, object]]:
    """The data table of a run report. The tokens training reads are the blocks' (blocks × seq_len), not every token
    tokenized: packing drops the tail that fills no block (a report once gave the tokenized count as the training
    tokens, 384 more than any run read)."""
    train, val = manifest["train"], manifest["validation"]
    in_blocks = train.get("block_tokens", train["blocks"] * manifest["seq_len"])
    return [
        ("train documents", train["documents"]),
        ("train tokens tokenized", train["tokens"]),
        ("train tokens in blocks (what training reads)", in_blocks),
        ("train blocks", train["blocks"]),
        ("train text bytes", train.get("text_bytes")),
        ("bad records skipped", sum((train.get("skipped") or {}).values())),
        ("validation documents", val["documents"]),
        ("validation tokens", val["tokens"]),
        ("validation bytes per token", val["text_bytes"] / val["tokens"] if val.get("text_bytes") else None),
    ]


def data_lines(data_path: Path, manifest: dict, mixture: dict | None = None) -> list[str]:
    """``mixture``: the recipe's ``data.mixture`` (source name -> weight), of which ``data_path`` is one source."""
    from hfpretrain.data.show import render_batches

    train, tok = manifest["train"], manifest["tokenizer"]
    lines = [
        "## Data",
        "",
        # the inputs' file format is not their content: "Pile-format" read as "the Pile" for the shipped mix
        f"`{data_path}`: the documents of the inputs below (their text, whatever the corpus: the shipped mix "
        f"is not the Pile) tokenized with `{tok['name_or_path']}` ({tok['vocab_size']:,} "
        f"tokens, end-of-text `{tok['eos_token']}` after every document), packed into blocks of "
        f"{manifest['seq_len']} tokens ({PACKING[manifest.get('pack', 'concat')]}), saved as Arrow with "
        f"`datasets.save_to_disk`. Fingerprint `{manifest['fingerprint']}`.",
        "",
    ]
    if mixture:
        total = sum(mixture.values())
        lines += [
            "Trained on a mixture (`data.mixture`; the tables below are of this source, whose validation "
            "blocks the run scores): " + ", ".join(f"{name} {w / total:.0%}" for name, w in mixture.items()) + ".",
            "",
        ]
    lines += _table(data_rows(manifest))
    inputs = [i["path"] for i in manifest.get("inputs", [])]
    if inputs:
        lines += [
            "Inputs: "
            + ", ".join(f"`{Path(p).name}`" for p in inputs[:12])
            + (f" and {len(inputs) - 12} more" if len(inputs) > 12 else ""),
            "",
        ]
    per_set = train.get("tokens_per_set") or {}
    if per_set:
        total = sum(per_set.values())
        lines += ["| set | train tokens | share |", "|---|---:|---:|"]
        lines += [
            f"| {name} | {n:,} | {100 * n / total:.1f}% |" for name, n in sorted(per_set.items(), key=lambda kv: -kv[1])
        ]
        lines.append("")
    lines += [
        "Example batch (the first training blocks, decoded; `⏎` marks end-of-text):",
        "",
        "```",
        render_batches(data_path, num_batches=1, batch_size=2, max_chars=400).rstrip(),
        "```",
        "",
    ]
    return lines


def _optimizer_name(recipe: dict) -> str:
    """optimizer.name; a run saved before it was the one selector: its old name and training.optim."""
    name = (recipe.get("optimizer") or {}).get("name", "adamw")
    optim = (recipe.get("training") or {}).get("optim")
    return f"{name} ({optim})" if optim else name


def model_lines(recipe: dict, summary: dict, config: dict) -> list[str]:
    """``config``: the final checkpoint's config.json."""
    plan, training = summary["plan"], recipe.get("training", {})
    params = plan["parameters"]
    e2e = summary.get("end_to_end") or {}
    rows = [
        ("architecture", config.get("model_type") or plan.get("shape", {}).get("model_type")),
        (
            "layers × width × heads",
            f"{config.get('num_hidden_layers', config.get('n_layer'))} × "
            f"{config.get('hidden_size', config.get('n_embd'))} × "
            f"{config.get('num_attention_heads', config.get('n_head'))}",
        ),
        ("vocabulary", config.get("vocab_size")),
        ("tied embeddings", config.get("tie_word_embeddings")),
        ("parameters (total / non-embedding)", f"{params['total']:,} / {params['non_embedding']:,}"),
        ("sequence length", plan["seq_len"]),
        ("optimizer", _optimizer_name(recipe)),
        ("peak learning rate", training.get("learning_rate")),
        ("schedule", training.get("lr_scheduler_type")),
        ("schedule arguments", training.get("lr_scheduler_kwargs")),
        ("warmup steps", training.get("warmup_steps")),
        ("weight decay", training.get("weight_decay")),
        ("betas", f"{training.get('adam_beta1')}, {training.get('adam_beta2')}"),
        ("gradient clipping", training.get("max_grad_norm")),
        ("precision", "bf16" if training.get("bf16") else "fp32"),
        (
            "micro-batch × accumulation × GPUs",  # the split that ran (batch.micro_batch=auto may fold the recipe's)
            f"{plan.get('micro_batch', training.get('per_device_train_batch_size'))} × "
            f"{plan.get('gradient_accumulation_steps', training.get('gradient_accumulation_steps', 1))} × "
            f"{plan['world_size']}",
        ),
        ("tokens per step", plan["tokens_per_step"]),
        ("steps", summary["global_step"]),
        ("training tokens", plan["tokens_per_step"] * summary["global_step"]),
        ("passes over the data", plan.get("passes_over_data")),
        ("training FLOPs", f"{plan['flops_per_token'] * plan['tokens_per_step'] * summary['global_step']:.3e}"),
        ("seed", str(training.get("seed"))),
        ("hardware", f"{plan['world_size']} × {plan.get('device', '?')}"),
        ("training wall time (s)", (summary.get("train") or {}).get("train_runtime")),
        ("tokens/s end to end", e2e.get("tokens_per_s")),
        ("MFU end to end", e2e.get("mfu")),
    ]
    return [
        "## Model, hyper-parameters, hardware",
        "",
        *_table(rows),
        "## What the training code does",
        "",
        TRAINING_CODE,
        "",
    ]


def curve_lines(run_dir: Path, out_dir: Path, summary: dict, manifest: dict | None) -> list[str]:
    from hfpretrain.study.plots import plot_run
    from hfpretrain.data.manifest import bits_per_byte, tokens_per_byte

    # bits per byte from the loss and the data's text bytes (runs evaluated before the manifest had
    # text_bytes logged them per byte on disk)
    ratio = tokens_per_byte(manifest) if manifest else None
    from hfpretrain.study.plots import run_log

    png = plot_run(
        run_log(run_dir) or run_dir / "log.jsonl", out_dir / "curves.png", title=run_dir.name, tokens_per_byte=ratio
    )
    final = dict(summary.get("final_eval") or {})
    if ratio and "eval_loss" in final:
        final["eval_bpb"] = bits_per_byte(final["eval_loss"], ratio)
    elif not (summary.get("plan") or {}).get("validation_text_bytes"):
        final["eval_bpb"] = None  # logged per byte on disk, before the manifest had the text's bytes
    lines = [
        "## Training and validation curves",
        "",
        f"![training and validation loss]({png.name})",
        "",
        "Final validation (the whole validation set unless the recipe limits it):",
        "",
    ]
    lines += _table(
        [
            ("loss (nats/token)", final.get("eval_loss")),
            ("bits per byte", final.get("eval_bpb")),
            ("perplexity", final.get("eval_perplexity")),
            ("tokens evaluated", final.get("eval_tokens")),
        ]
    )
    return lines


# Tasks a report scores: ARC and OpenBookQA sit at chance for models of a few tens of millions of parameters;
# HellaSwag, PIQA and LAMBADA move earlier, so they can tell such models apart.
REPORT_TASKS = ("arc_easy", "arc_challenge", "openbookqa", "hellaswag", "piqa", "lambada_openai")
# Accuracy of a uniform guess: 1 / choices (ARC has a few 3- and 5-choice questions: ~0.25); LAMBADA's target is
# a free word, where guessing scores ~0.
CHANCE = {
    "arc_easy": 0.25,
    "arc_challenge": 0.25,
    "openbookqa": 0.25,
    "hellaswag": 0.25,
    "piqa": 0.5,
    "winogrande": 0.5,
    "lambada_openai": 0.0,
}


def chance_lines(results: dict) -> list[str]:
    """Each scored task's accuracy next to its chance level, and the report tasks that were not scored."""
    scored = results.get("results") or {}
    rows = [
        f"| {t} | {r['acc,none']:.4f} | {CHANCE[t]:.2f} | {r['acc,none'] - CHANCE[t]:+.4f} |"
        for t, r in scored.items()
        if t in CHANCE and isinstance(r.get("acc,none"), (int, float))
    ]
    missing = [t for t in REPORT_TASKS if t not in scored]
    lines = ["| task | acc | chance | acc − chance |", "|---|---|---|---|", *rows, ""] if rows else []
    if missing:
        lines += [
            f"Not scored: {', '.join(missing)} (not in the data root, or the saved final/eval/results.json "
            "predates them: delete it and run `scripts/report.py RUN_DIR` again).",
            "",
        ]
    return lines


def eval_lines(checkpoint: Path, limit, run: bool, tasks=REPORT_TASKS) -> list[str]:
    from hfpretrain.eval.harness import evaluate_checkpoint, summary_markdown

    saved = checkpoint / "eval" / "results.json"
    if saved.is_file():
        results = _read(saved)
    elif run:
        from hfpretrain.eval.task_data import available_tasks

        # the tasks whose files the data root has (the embedded one: ARC only); none: the harness' default
        results = evaluate_checkpoint(
            checkpoint, tasks=available_tasks(tasks) or None, limit=limit, batch_size=16, out_dir=checkpoint / "eval"
        )
    else:
        return ["## lm-eval", "", "Not run (`--no-eval`).", ""]
    body = [line for line in summary_markdown(results).strip().splitlines() if not line.startswith("# ")]
    return ["## lm-eval (0-shot)", "", *body, "", *chance_lines(results)]


def generation_lines(checkpoint: Path, prompts, max_new_tokens: int) -> list[str]:
    from hfpretrain.eval.generation import generate

    settings = dict(max_new_tokens=max_new_tokens, temperature=0.8, top_p=0.95, seed=0)
    lines = ["## Generations", "", f"Sampling: temperature 0.8, top-p 0.95, seed 0, {max_new_tokens} new tokens.", ""]
    for r in generate(checkpoint, list(prompts), **settings):
        lines += [f"**Prompt:** `{r['prompt']!r}`", "", "```", r["text"].strip(), "```", ""]
    for r in generate(checkpoint, None, num_samples=2, **settings):
        lines += [f"**Unconditional sample {r['index'] + 1}:**", "", "```", r["completion"].strip(), "```", ""]
    return lines


def portable_path(path: str) -> str:
    """A manifest's path as a reader can run it: inside the working directory (the repository: its embedded data
    too), relative to it; else inside a data root (a folder with the data root's layout: .../pretrain/mix/x,
    .../tokenizers/gpt2) as ``$DATA_ROOT/...``, whatever machine tokenized; others (a relative path, a Hub id) as
    they are."""
    p = Path(path)
    if not p.is_absolute():
        return shlex.quote(path)
    if p.is_relative_to(Path.cwd()):
        return shlex.quote(str(p.relative_to(Path.cwd())))
    for i, part in enumerate(p.parts[:-1]):
        if part in DATA_ROOT_LAYOUT:
            return '"$DATA_ROOT"/' + shlex.quote(str(Path(*p.parts[i:])))
    return shlex.quote(path)


def tokenize_command(data_path: Path, manifest: dict) -> str:
    """The ``tokenize_pile.py`` command that makes ``data_path``'s blocks again, from its manifest."""
    inputs = " ".join(portable_path(i["path"]) for i in manifest.get("inputs", []))
    val_inputs = manifest.get("val_inputs")
    val = " ".join(portable_path(i["path"]) for i in val_inputs) if isinstance(val_inputs, list) else ""
    tok = portable_path(manifest["tokenizer"]["name_or_path"])
    # the manifest's choices that change the blocks, as the flags that made them (defaults left out)
    flags = [
        f"--val-docs {manifest['val_docs']}" if manifest.get("val_docs_rule") == "given" else "",
        f"--pack {manifest['pack']}" if manifest.get("pack", "concat") != "concat" else "",
        f"--max-docs {manifest['max_docs']}" if manifest.get("max_docs") else "",
        "--sets " + " ".join(map(shlex.quote, manifest["select_sets"])) if manifest.get("select_sets") else "",
    ]
    return (
        f"python scripts/tokenize_pile.py --input {inputs} "
        + (f"--val-input {val} " if val else "")
        + f"--tokenizer {tok} --seq-len {manifest['seq_len']} "
        + "".join(f + " " for f in flags if f)
        + f"--out {data_path}"
    )


def reproduce_lines(run_dir: Path, sources: list[tuple[Path, dict | None]]) -> list[str]:
    """The commands that make a run again: each data source's blocks (``data.path`` first; before them, the
    ``retrieval-docs`` command that wrote an input, as the input records it), training, evaluation, generation."""
    from hfpretrain.data.retrieval import made_by

    ckpt = run_dir / "final"
    lines = ["## Reproduce", "", "```bash"]
    for data_path, manifest in sources:
        if manifest is None:
            lines.append(f"# {data_path}: not on this machine, its command unknown here")
            continue
        for made in filter(None, (made_by(i["path"]) for i in manifest.get("inputs", []))):
            lines.append("python scripts/retrieval_docs.py " + " ".join(map(portable_path, made)))
        lines.append(tokenize_command(data_path, manifest))
    return lines + [
        f"accelerate launch scripts/pretrain.py {run_dir / 'recipe.yaml'}   # this run's recipe, as written",
        f"lm_eval --model hf --model_args pretrained={ckpt} --tasks {','.join(REPORT_TASKS)} "
        "--include_path src/hfpretrain/eval/tasks",
        f"python scripts/generate.py --model {ckpt} --prompt 'The history of the'",
        f"python scripts/report.py {run_dir}",
        "```",
        "",
    ]


def write_run_report(
    run_dir: str | Path,
    out_md: str | Path | None = None,
    eval_limit=None,
    run_eval: bool = True,
    prompts=DEFAULT_PROMPTS,
    max_new_tokens: int = 48,
) -> Path:
    """``RUN/report.md`` (+ curves.png) for a finished run; returns the report's path."""
    run_dir = Path(run_dir)
    from hfpretrain.study.plots import run_log

    for name in ("summary.json", "recipe.yaml", "log.jsonl"):
        if not (run_dir / name).is_file() and not (name == "log.jsonl" and run_log(run_dir)):
            raise FileNotFoundError(f"{run_dir / name} does not exist: {run_dir} is not a finished run folder")
    checkpoint = run_dir / "final"
    if not (checkpoint / "config.json").is_file():
        raise FileNotFoundError(f"{checkpoint} holds no checkpoint (config.json): the run did not finish")
    # every file read and checked before anything is written: a corrupt one is one line naming it
    recipe = _read(run_dir / "recipe.yaml", "a recipe (a mapping)")
    summary = _read(run_dir / "summary.json")
    _check_run(run_dir, recipe, summary)
    config = _read(checkpoint / "config.json")
    from hfpretrain.study.plots import log_problem  # the plot command's line-by-line check of log.jsonl

    problem = log_problem(run_log(run_dir))
    if problem:
        raise ValueError(problem)
    data_path = Path(recipe["data"]["path"])
    manifest_path = data_path / "manifest.json"
    manifest = _read(manifest_path) if manifest_path.is_file() else None
    if manifest is not None:
        from hfpretrain.data.manifest import is_output

        if not is_output(manifest) or not all(
            isinstance(manifest.get(k), dict) for k in ("train", "validation", "tokenizer")
        ):
            raise ValueError(
                f"{manifest_path}: not the manifest of a tokenize output (format, train, validation, tokenizer)"
            )
    out_md = Path(out_md) if out_md else run_dir / "report.md"
    out_md.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# Run report: {run_dir.name}", "", f"Generated from `{run_dir}` by `scripts/report.py`.", ""]
    lines += (
        data_lines(data_path, manifest, recipe["data"].get("mixture"))
        if manifest
        else ["## Data", "", f"`{data_path}` is not on this machine: data section left out.", ""]
    )
    lines += model_lines(recipe, summary, config)
    lines += curve_lines(run_dir, out_md.parent, summary, manifest)
    lines += eval_lines(checkpoint, eval_limit, run_eval)
    from hfpretrain.study.long_context_report import long_context_lines

    lines += long_context_lines(checkpoint, out_md.parent)  # after `hfpretrain long-context` on final/
    if prompts is not None:
        lines += generation_lines(checkpoint, prompts, max_new_tokens)
    if manifest:
        # the mixture's other sources too: a run on data.path alone could not be made again
        others = [Path(p) for p in (recipe["data"].get("sources") or {}).values() if Path(p) != data_path]
        lines += reproduce_lines(
            run_dir,
            [(data_path, manifest)]
            + [(p, _read(p / "manifest.json") if (p / "manifest.json").is_file() else None) for p in others],
        )
    out_md.write_text("\n".join(lines))
    return out_md
