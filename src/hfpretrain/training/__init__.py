"""Training: recipe config, resumable data order, the Trainer subclass and its callbacks."""

from .config import Recipe, RecipeError, load_recipe
from .run import exit_on_crash, pretrain

__all__ = ["Recipe", "RecipeError", "exit_on_crash", "load_recipe", "pretrain"]
