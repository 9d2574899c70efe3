"""`python -m tools.bench`: the benchmark's command line, `tools.bench.cli`."""
import sys

from tools.bench.cli import main

sys.exit(main())
