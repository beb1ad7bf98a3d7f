"""Entry point of benchmarks/gpu_bench.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.gpu_bench import main

if __name__ == "__main__":
    sys.exit(main())
