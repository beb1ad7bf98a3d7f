"""Entry point of benchmarks/bench_smoke.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.bench_smoke import main

if __name__ == "__main__":
    sys.exit(main())
