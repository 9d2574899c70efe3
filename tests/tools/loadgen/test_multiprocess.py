"""tools.loadgen.multiprocess: a run split over processes merges into one exact Result."""
from __future__ import annotations

from tests.tools.loadgen.support import V1, run


async def test_several_processes_merge_their_results(predictor):
    result = await run(target=f"{predictor.http_url}/v1/models/demo:predict", body=V1, requests=101,
                       concurrency=4, processes=2)
    assert result.processes == 2
    assert result.sent == 101 and result.statuses == {"200": 101} and result.answered == 101
