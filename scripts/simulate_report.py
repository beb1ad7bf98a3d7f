"""Entry point of benchmarks/simulate_report.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.simulate_report import main

if __name__ == "__main__":
    sys.exit(main())
