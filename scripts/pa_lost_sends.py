"""Entry point of benchmarks/pa_lost_sends.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.pa_lost_sends import main

if __name__ == "__main__":
    sys.exit(main())
