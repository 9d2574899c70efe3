"""`python -m tools.loadgen ...`: the command line (see `cli`)."""
import sys

from tools.loadgen.cli import main

if __name__ == "__main__":
    sys.exit(main())
