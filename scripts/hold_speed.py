"""Entry point of benchmarks/hold_speed.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.hold_speed import main

if __name__ == "__main__":
    sys.exit(main())
