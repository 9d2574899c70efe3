"""Stubs generated from protos/ by tools/gen_protos.py, and the descriptor pool they use."""
