"""Training: the recipe, its plan, the Trainer subclass, its callbacks and checkpoints (run.py reads top to bottom)."""

from .config import Recipe, RecipeError, load_recipe
from .run import pretrain, shutdown_distributed

__all__ = ["Recipe", "RecipeError", "load_recipe", "pretrain", "shutdown_distributed"]
