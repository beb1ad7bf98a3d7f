"""Entry point of benchmarks/bench.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.bench import main

if __name__ == "__main__":
    sys.exit(main())
