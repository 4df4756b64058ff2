"""``python -m dynocell.engine.reference``: run the reference engine (see :mod:`.api`).

Arguments are checked before torch is imported, so a bad flag fails fast (exit 2).
"""

import sys

from .args import parse

if __name__ == "__main__":
    parse(sys.argv[1:])
    from .api import main

    sys.exit(main())
