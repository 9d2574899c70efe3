"""The profile scenario's reading of py-spy's raw output: own time is the frame on top,
inclusive time any frame on the stack (counted once a stack), packages by the file on top."""
from tools.bench.profile import _aggregate, _name, _package

RAW = "\n".join([
    "<module> (/work/main/gateway/__main__.py:1);run_forever (/usr/lib/python3.11/asyncio/base_events.py:600);"
    "_run (/usr/lib/python3.11/asyncio/events.py:78);_on_headers (/venv/lib/python3.11/site-packages/tornado/"
    "http1connection.py:500) 3",
    "<module> (/work/main/gateway/__main__.py:1);run_forever (/usr/lib/python3.11/asyncio/base_events.py:600);"
    "_run (/usr/lib/python3.11/asyncio/events.py:78);answer (/work/main/gateway/rest/lean.py:120);"
    "answer (/work/main/gateway/rest/lean.py:120) 2",
    "",
    "not a sample line",
])


def test_own_time_is_the_frame_on_top_and_inclusive_counts_a_stack_once():
    found = _aggregate(RAW)
    assert found["samples"] == 5
    assert found["own"]["_on_headers (tornado/http1connection.py)"] == 3
    assert found["own"]["answer (gateway/rest/lean.py)"] == 2
    assert found["inclusive"]["answer (gateway/rest/lean.py)"] == 2  # recursion counted once
    assert found["inclusive"]["_run (asyncio/events.py)"] == 5


def test_packages_are_named_by_the_file_on_top_and_the_gateways_rooms_apart():
    found = _aggregate(RAW)
    assert dict(found["packages"]) == {"tornado": 3, "gateway/rest": 2}
    assert _package(_name("decode (/work/x/wire/codecs/v1.py:3)") or "") == "wire"
