"""Entry point of benchmarks/gpu_shape_probe.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.gpu_shape_probe import main

if __name__ == "__main__":
    sys.exit(main())
