"""`python -m vflflare.cli`: the `vflflare` command."""

import sys

from vflflare.cli import main

sys.exit(main())
