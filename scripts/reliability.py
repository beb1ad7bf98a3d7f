"""Entry point of the benchmarks/reliability/ package, whose docstring says what it does and how to run it."""

import sys

from benchmarks.reliability import main

if __name__ == "__main__":
    sys.exit(main())
