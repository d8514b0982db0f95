"""lm-eval is an extra (``pip install 'hfpretrain[eval]'``): a CPU user who only trains does not install it.

What needs it checks first, and says so in one line naming the extra, in the words of
``hfpretrain.training.run.missing_extras`` (a usage error, exit 2: nothing was done).
"""

from __future__ import annotations

import importlib.util


class MissingExtraError(ValueError):
    """An optional package this feature needs is not installed; the message names the extra.

    A ValueError, so that every command that reports a bad input in one line reports this too."""


def require_lm_eval(what: str) -> None:
    """Raise ``MissingExtraError`` ("``what`` needs the lm-eval package: pip install ...") when lm-eval cannot
    be imported; checked before any work, instead of an ImportError halfway through it."""
    if importlib.util.find_spec("lm_eval") is None:
        raise MissingExtraError(f"{what} needs the lm-eval package: pip install 'hfpretrain[eval]'")
