"""The simulated predictor as its own server process (`server`), run with
`python -m tools.simulated_predictor`: a stand-in for a real model server in tests and
benchmarks. The model itself lives in `backends.simulated.model`."""
