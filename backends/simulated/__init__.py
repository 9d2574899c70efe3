"""The project's simulated predictor: a model with a configurable cost and a checkable
answer (OUTPUT0 = 2 x INPUT0, `model`), served in the gateway's own process as a backend
(`inprocess`, PredictorProtocol.SIMULATED). Its standalone server, which speaks it over
the network for tests and benchmarks, is a tool (`tools.simulated_predictor`), not a
predictor client."""
