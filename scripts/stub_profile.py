"""Entry point of benchmarks/stub_profile.py, whose docstring says what it does and how to run it."""

import sys

from benchmarks.stub_profile import main

if __name__ == "__main__":
    sys.exit(main())
