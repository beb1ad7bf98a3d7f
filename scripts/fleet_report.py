"""Entry point of benchmarks/fleet_report.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.fleet_report import main

if __name__ == "__main__":
    sys.exit(main())
