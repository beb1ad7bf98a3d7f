"""Entry point of benchmarks/stub_ab.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.stub_ab import main

if __name__ == "__main__":
    sys.exit(main())
