"""`python -m backends.simulated`: run the simulated predictor server (see `server`)."""
import sys

from backends.simulated.server import main

sys.exit(main())
