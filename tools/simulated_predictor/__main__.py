"""`python -m tools.simulated_predictor ...`: run the simulated predictor server (see `server`)."""
import sys

from tools.simulated_predictor.server import main

if __name__ == "__main__":
    sys.exit(main())
