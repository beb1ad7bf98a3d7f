"""Entry point of benchmarks/validate_simulator.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.validate_simulator import main

if __name__ == "__main__":
    sys.exit(main())
