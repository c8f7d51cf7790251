"""`python -m f4pipe` is the `f4pipe` command."""

import sys

from f4pipe.cli import main

sys.exit(main())
