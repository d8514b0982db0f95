"""``python -m hfpretrain COMMAND [ARGS]``: the same as the ``hfpretrain`` console script."""

import sys

from hfpretrain.cli import main

sys.exit(main())
