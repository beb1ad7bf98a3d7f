"""Entry point of benchmarks/intake_check.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.intake_check import main

if __name__ == "__main__":
    sys.exit(main())
