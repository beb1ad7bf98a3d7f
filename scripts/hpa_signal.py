"""Entry point of benchmarks/hpa_signal.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.hpa_signal import main

if __name__ == "__main__":
    sys.exit(main())
