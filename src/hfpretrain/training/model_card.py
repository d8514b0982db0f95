"""``final/README.md``: the model card a checkpoint carries, so that the folder (or a Hub repo made from
it) says what the model is, what it was trained on, how well it did, and how to load it.

The lm-eval scores come after training: ``hfpretrain eval`` adds them, and ``hfpretrain export`` points the load
lines at the export or the Hub repo (``hfpretrain.eval.card``). An ``eval/`` folder already in ``final/`` is not
read here: it scored the weights this run has just replaced."""

from __future__ import annotations

from pathlib import Path

# the card's YAML header, which the Hub reads (export adds license and datasets: hfpretrain.eval.card)
METADATA = dict(
    library_name="transformers", pipeline_tag="text-generation", tags=["hfpretrain", "pretraining", "causal-lm"]
)

CARD = """\
# {name}

A {model_type} causal language model with {total:,} parameters ({non_embedding:,} non-embedding), pretrained from
scratch with hfpretrain (`scripts/pretrain.py`). A base model: it continues text, it does
not follow instructions.

| | |
|---|---|
| layers × width × heads | {layers} × {width} × {heads} |
| vocabulary | {vocab:,} (tokenizer `{tokenizer}`) |
| context | {seq_len} tokens |
| training data | `{data_path}` (manifest fingerprint `{fingerprint}`) |
| training tokens | {tokens:,} ({passes:.2f} passes over the data) |
| steps × tokens per step | {steps:,} × {tokens_per_step:,} |
| peak learning rate, schedule | {lr}, {schedule} |
| training FLOPs | {flops:.3e} |
| hardware | {world} × {device} |
| final validation loss | {val_loss} nats/token, {val_bpb} bits per byte ({val_tokens} tokens) |

The recipe that produced it is below; `lineage.json` (when present) names the data.

## Use

{use}

## Evaluation (lm-eval, 0-shot)

{scores}

## Recipe

The recipe as written; saved as `recipe.yaml` (what it resolved to: `resolved.yaml` beside it),
`hfpretrain train recipe.yaml` trains the model again (given the data at `data.path`):

```yaml
{recipe}```
"""


TASKS = "arc_easy,arc_challenge,openbookqa"


def _section(name: str, body: str) -> str:
    return f"<!-- hfpretrain:{name} -->\n{body.strip()}\n<!-- /hfpretrain:{name} -->"


def use_section(path) -> str:
    return _section(
        "use",
        f'''```python
from transformers import pipeline

generate = pipeline("text-generation", model="{path}")
print(generate("The history of the", max_new_tokens=40, do_sample=True, top_p=0.95)[0]["generated_text"])
```''',
    )


def scores_section(path, summary: str | None = None) -> str:
    """``summary``: the ``summary.md`` of ``hfpretrain eval`` (its title, which names the folder scored, left out);
    without it, how to compute the scores."""
    if summary is None:
        body = (
            f"Not scored yet: `hfpretrain eval {path}` writes `eval/summary.md` beside the weights and the scores "
            f"here; or `lm_eval --model hf --model_args pretrained={path} --tasks {TASKS}`."
        )
    else:
        body = "\n".join(line for line in summary.strip().splitlines() if not line.startswith("# "))
    return _section("scores", body)


def peak_learning_rate(scheduler, steps: int, learning_rate: float) -> float | None:
    """The highest learning rate trained with over ``steps`` optimizer steps (step ``s`` uses the schedule's factor
    at ``s``), or None for a scheduler that is no ``LambdaLR``: a warmup longer than the run never reaches
    ``training.learning_rate``, and the card says what ran, not what was set."""
    lambdas = getattr(scheduler, "lr_lambdas", None)
    if not lambdas or steps <= 0:
        return None
    return learning_rate * max(float(lambdas[0](s)) for s in range(steps))


def _learning_rate(set_lr, peak) -> str:
    if peak is None or set_lr is None or peak >= 0.999 * float(set_lr):
        return f"{set_lr}"
    return f"{peak:.3g} (peak reached; {set_lr} set, but the warmup outlasts the run)"


def _num(x, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def write_model_card(folder: str | Path, config, plan: dict, summary: dict, recipe, manifest: dict) -> Path:
    from .config import recipe_to_yaml

    folder = Path(folder)
    final = summary.get("final_eval") or {}
    training = recipe.training
    steps = summary["global_step"]
    card = CARD.format(
        name=folder.parent.name,
        model_type=config.model_type,
        total=plan["parameters"]["total"],
        non_embedding=plan["parameters"]["non_embedding"],
        layers=getattr(config, "num_hidden_layers", None),
        width=getattr(config, "hidden_size", None),
        heads=getattr(config, "num_attention_heads", None),
        vocab=config.vocab_size,
        tokenizer=manifest["tokenizer"].get("name_or_path"),
        seq_len=plan["seq_len"],
        data_path=recipe.data.path,
        fingerprint=manifest.get("fingerprint"),
        tokens=steps * plan["tokens_per_step"],
        passes=steps * plan["samples_per_step"] / plan["train_blocks"] if plan.get("train_blocks") else float("nan"),
        steps=steps,
        tokens_per_step=plan["tokens_per_step"],
        lr=_learning_rate(training.get("learning_rate"), summary.get("peak_learning_rate")),
        schedule=training.get("lr_scheduler_type"),
        flops=plan["flops_per_token"] * plan["tokens_per_step"] * steps,
        world=plan["world_size"],
        device=plan.get("device"),
        val_loss=_num(final.get("eval_loss")),
        val_bpb=_num(final.get("eval_bpb")),
        val_tokens=_num(final.get("eval_tokens")),
        use=use_section(folder),
        scores=scores_section(folder),
        recipe=recipe_to_yaml(recipe),
    )
    from huggingface_hub import ModelCard, ModelCardData

    ModelCard(f"---\n{ModelCardData(**METADATA).to_yaml()}\n---\n\n{card}").save(folder / "README.md")
    return folder / "README.md"
