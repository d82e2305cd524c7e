"""``python -m hgpo_rllib.cli ...``: the ``rllib`` command without its console script."""

import sys

from hgpo_rllib.cli import main

sys.exit(main())
