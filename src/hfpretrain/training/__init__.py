"""Training: recipe config, resumable data order, the Trainer subclass and its callbacks."""

from .config import Recipe, RecipeError, load_recipe
from .run import pretrain, shutdown_distributed

__all__ = ["Recipe", "RecipeError", "load_recipe", "pretrain", "shutdown_distributed"]
