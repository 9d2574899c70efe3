"""What is observed of the gateway: `/metrics` (`metrics.py`, with each model's families in
`scheduler_metrics.py` and the tenants' in `tenant_metrics.py`), the live page's snapshot
(`live.py`), what describes the whole gateway as a process's role reads it (`views.py`), the
access and event logs (`logs.py`) and the memory a process gives back (`memory.py`).

It reads the scheduler's figures and the served models; it knows no front end (they count
through it) and no predictor protocol. Traces are `gateway.telemetry`'s.
"""
