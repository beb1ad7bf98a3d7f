"""Entry point of benchmarks/grpc_cancel_crash.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.grpc_cancel_crash import main

if __name__ == "__main__":
    sys.exit(main())
