"""Entry point of benchmarks/lowload_check.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.lowload_check import main

if __name__ == "__main__":
    sys.exit(main())
