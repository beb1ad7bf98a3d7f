"""Entry point of benchmarks/queue_policy_stall.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.queue_policy_stall import main

if __name__ == "__main__":
    sys.exit(main())
