"""``python -m graspsim.cli <verb> ...``: the same as the ``graspsim`` command."""

import sys

from .cli import main

sys.exit(main())
