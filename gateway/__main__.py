"""`python -m gateway ...` is `batching-gateway ...`."""
import sys

from gateway.cli import main

sys.exit(main())
