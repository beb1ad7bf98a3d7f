"""Entry point of benchmarks/host_ledger.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.host_ledger import main

if __name__ == "__main__":
    sys.exit(main())
