"""Property: whatever the mix of request sizes, signatures, caps, slots and splits, each
request receives exactly its own rows, in order, and no batch exceeds the cap."""
from __future__ import annotations

import asyncio

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.batching.config import BatchingConfig
from gateway.batching.scheduler import BatchScheduler
from wire.tensors import Tensor

request_strategy = st.tuples(
    st.integers(min_value=1, max_value=40),          # rows
    st.sampled_from([1, 3]),                         # inner width: two signatures
    st.sampled_from(["FP32", "INT64"]),              # datatype: two more
    st.floats(min_value=0, max_value=0.003),         # arrival gap
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(request_strategy, min_size=1, max_size=30),
       max_batch_size=st.integers(min_value=1, max_value=16),
       max_inflight=st.integers(min_value=1, max_value=3),
       policy=st.sampled_from(["adaptive", "window"]))
def test_every_request_gets_exactly_its_own_rows(requests, max_batch_size, max_inflight, policy):
    asyncio.run(_scenario(requests, max_batch_size, max_inflight, policy))


async def _scenario(requests, max_batch_size, max_inflight, policy):
    batch_rows: list[int] = []
    signatures_per_batch: list[int] = []

    async def executor(inputs):
        batch_rows.append(len(inputs[0].data))
        signatures_per_batch.append(len({(t.datatype, t.data.shape[1:]) for t in inputs}))
        await asyncio.sleep(0.001)
        # A row-wise function whose output reveals which rows it was given.
        return [Tensor("OUT", t.datatype, t.data * 3 + 1) for t in inputs]

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", executor, BatchingConfig(policy=policy, max_batch_size=max_batch_size,
                                                      max_inflight=max_inflight, max_latency_s=0.002))
    counter = 0
    sent = []
    tasks = []
    for rows, width, datatype, gap in requests:
        dtype = np.float32 if datatype == "FP32" else np.int64
        data = np.arange(counter, counter + rows * width, dtype=dtype).reshape(rows, width)
        counter += rows * width
        sent.append(data)
        tasks.append(asyncio.ensure_future(scheduler.submit("m", [Tensor("IN", datatype, data)])))
        await asyncio.sleep(gap)
    results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
    for data, result in zip(sent, results, strict=True):
        np.testing.assert_array_equal(result.outputs[0].data, data * 3 + 1)
        assert result.outputs[0].data.dtype == data.dtype
    assert max(batch_rows) <= max_batch_size
    assert sum(batch_rows) == sum(len(d) for d in sent)
    assert set(signatures_per_batch) == {1}
