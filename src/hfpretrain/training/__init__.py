"""Training: the recipe, its plan, the Trainer subclass, its callbacks and checkpoints (run.py reads top to bottom).

``pretrain`` and ``shutdown_distributed`` are imported from run.py on first use: it loads the Trainer and
transformers' model code (seconds), which checking a recipe (``load_recipe``) does not need."""

from .config import Recipe, RecipeError, load_recipe

__all__ = ["Recipe", "RecipeError", "load_recipe", "pretrain", "shutdown_distributed"]


def __getattr__(name: str):
    if name in ("pretrain", "shutdown_distributed"):
        from . import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
