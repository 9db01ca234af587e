"""``python -m hw``: the project's command line, :mod:`hw.cli`."""

import sys

from hw.cli import main

if __name__ == "__main__":
    sys.exit(main())
