"""Entry point of benchmarks/bench_decision.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.bench_decision import main

if __name__ == "__main__":
    sys.exit(main())
