"""Entry point of benchmarks/stub_threads.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.stub_threads import main

if __name__ == "__main__":
    sys.exit(main())
