"""Entry point of benchmarks/sla_carriage.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.sla_carriage import main

if __name__ == "__main__":
    sys.exit(main())
