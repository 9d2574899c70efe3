"""The process and its roles: `server.py` assembles one gateway process (`Gateway`: its
front ends, its service, its reloads and its stop), `front_ends.py` serves both front ends
around one service, `roles.py` says what a process of one role holds (the whole gateway in
one process, or under `--workers`, the batcher and the workers of `workers/`).

`gateway.cli` starts it; nothing below the front ends imports it.
"""
