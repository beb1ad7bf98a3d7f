"""Entry point of benchmarks/multi_server.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.multi_server import main

if __name__ == "__main__":
    sys.exit(main())
