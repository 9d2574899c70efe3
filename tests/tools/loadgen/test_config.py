"""tools.loadgen.config: every run is bounded, configs are validated, a split shares the load."""
from __future__ import annotations

import pytest

from tools.loadgen.config import Config


def test_runs_are_always_bounded_and_configs_validated():
    with pytest.raises(ValueError, match="unbounded"):
        Config(target="http://127.0.0.1:1/").validate()
    with pytest.raises(ValueError, match="unbounded"):
        Config(target="http://127.0.0.1:1/", rate=10).validate()
    with pytest.raises(ValueError):
        Config(target="127.0.0.1:1", requests=1).validate()  # not a URL
    with pytest.raises(ValueError, match="--call"):
        Config(target="127.0.0.1:1", grpc=True, requests=1).validate()


def test_split_shares_the_load_exactly():
    config = Config(target="http://127.0.0.1:1/", requests=101, concurrency=7, rate=30.0, seed=1)
    parts = config.split(3)
    assert sum(p.requests for p in parts) == 101
    assert sum(p.concurrency for p in parts) == 7
    assert sum(p.rate for p in parts) == pytest.approx(30.0)
    assert len({p.seed for p in parts}) == 3
