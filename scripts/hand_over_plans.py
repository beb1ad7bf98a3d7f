"""Entry point of benchmarks/hand_over_plans.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.hand_over_plans import main

if __name__ == "__main__":
    sys.exit(main())
