"""Entry point of benchmarks/call_path.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.call_path import main

if __name__ == "__main__":
    main()
    sys.exit(0)
