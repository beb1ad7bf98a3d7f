"""Entry point of benchmarks/instances_desync.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.instances_desync import main

if __name__ == "__main__":
    sys.exit(main())
