"""``python -m demo``: the demo job (see :mod:`demo.runner`)."""

import sys

from demo.runner import main

if __name__ == "__main__":
    sys.exit(main())
