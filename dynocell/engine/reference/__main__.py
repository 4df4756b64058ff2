"""``python -m dynocell.engine.reference``: run the reference engine (see :mod:`.api`)."""

import sys

from .api import main

if __name__ == "__main__":
    sys.exit(main())
