"""Entry point of benchmarks/make_perf_inputs.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.make_perf_inputs import main

if __name__ == "__main__":
    sys.exit(main())
