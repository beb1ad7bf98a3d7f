"""Entry point of benchmarks/newshape_costs.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.newshape_costs import main

if __name__ == "__main__":
    sys.exit(main())
