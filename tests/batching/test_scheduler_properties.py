"""Property: whatever the mix of request sizes, signatures, priority levels, caps, slots and
splits, each request receives exactly its own rows, in order, and no batch exceeds the cap."""
from __future__ import annotations

import asyncio

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.batching.config import BatchingConfig
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import BatchScheduler
from wire.tensors import Tensor

request_strategy = st.tuples(
    st.integers(min_value=1, max_value=40),          # rows
    st.sampled_from([1, 3]),                         # inner width: two signatures
    st.sampled_from(["FP32", "INT64"]),              # datatype: two more
    st.floats(min_value=0, max_value=0.003),         # arrival gap
    st.integers(min_value=0, max_value=3),           # priority (0: the model's default level)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(request_strategy, min_size=1, max_size=30),
       max_batch_size=st.integers(min_value=1, max_value=16),
       max_inflight=st.integers(min_value=1, max_value=3),
       policy=st.sampled_from(["adaptive", "window"]),
       priority_levels=st.sampled_from([0, 3]))
def test_every_request_gets_exactly_its_own_rows(requests, max_batch_size, max_inflight, policy, priority_levels):
    asyncio.run(_scenario(requests, max_batch_size, max_inflight, policy, priority_levels))


async def _scenario(requests, max_batch_size, max_inflight, policy, priority_levels):
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
                                                      max_inflight=max_inflight, max_latency_s=0.002,
                                                      priority_levels=priority_levels,
                                                      default_priority_level=priority_levels))
    counter = 0
    sent = []
    tasks = []
    for rows, width, datatype, gap, priority in requests:
        dtype = np.float32 if datatype == "FP32" else np.int64
        data = np.arange(counter, counter + rows * width, dtype=dtype).reshape(rows, width)
        counter += rows * width
        sent.append(data)
        tasks.append(asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", [Tensor("IN", datatype, data)], priority=priority))))
        await asyncio.sleep(gap)
    results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
    for data, result in zip(sent, results, strict=True):
        np.testing.assert_array_equal(result.outputs[0].data, data * 3 + 1)
        assert result.outputs[0].data.dtype == data.dtype
    assert max(batch_rows) <= max_batch_size
    assert sum(batch_rows) == sum(len(d) for d in sent)
    assert set(signatures_per_batch) == {1}


# -- variable-length inputs (gateway.batching.padding) ------------------------------------------------

padded_request = st.tuples(
    st.integers(min_value=1, max_value=12),   # rows
    st.integers(min_value=1, max_value=30),   # length along the padded dim
    st.floats(min_value=0, max_value=0.002),  # arrival gap
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(padded_request, min_size=1, max_size=25),
       max_batch_size=st.integers(min_value=1, max_value=16),
       max_batch_cost=st.sampled_from([0, 30, 64, 200]),
       buckets=st.sampled_from([(), (8, 16, 30), (30,)]),
       max_inflight=st.integers(min_value=1, max_value=2))
def test_padded_requests_get_exactly_their_own_rows_within_the_caps(requests, max_batch_size, max_batch_cost,
                                                                     buckets, max_inflight):
    asyncio.run(_padded_scenario(requests, max_batch_size, max_batch_cost, buckets, max_inflight))


async def _padded_scenario(requests, max_batch_size, max_batch_cost, buckets, max_inflight):
    from gateway.batching.config import GeneratedInput, PaddedInput, PaddedSpec

    padding = PaddedSpec(inputs=(PaddedInput("IN", 1, -7),), buckets=buckets, outputs=(("TOKENS", 1),),
                            generated=(GeneratedInput("LEN", "INT64", "length"),))
    batches: list[tuple[int, int]] = []

    async def executor(inputs):
        data, length = inputs[0].data, inputs[1].data[:, 0]
        batches.append(data.shape)
        await asyncio.sleep(0.001)
        real = np.arange(data.shape[1]) < length[:, None]
        pooled = np.where(real, data, 0).sum(axis=1, keepdims=True)  # the model reads the real length
        return [Tensor("TOKENS", "INT64", data * 3 + 1), Tensor("POOLED", "INT64", pooled)]

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", executor, BatchingConfig(max_batch_size=max_batch_size, max_inflight=max_inflight,
                                                      max_batch_cost=max_batch_cost, rows=padding))
    counter, sent, tasks = 0, [], []
    for rows, length, gap in requests:
        data = np.arange(counter, counter + rows * length, dtype=np.int64).reshape(rows, length)
        counter += rows * length
        sent.append(data)
        tasks.append(asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", [Tensor("IN", "INT64", data)]))))
        await asyncio.sleep(gap)
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
    for data, result in zip(sent, results, strict=True):
        padded = next((b for b in buckets if b >= data.shape[1]), data.shape[1])
        if max_batch_cost and padded > max_batch_cost:
            assert type(result).__name__ == "PayloadTooLarge"  # one row would cost more than a batch may
            continue
        tokens, pooled = result.outputs
        np.testing.assert_array_equal(tokens.data, data * 3 + 1)
        np.testing.assert_array_equal(pooled.data, data.sum(axis=1, keepdims=True))
    for rows, padded in batches:
        assert rows <= max_batch_size
        assert not max_batch_cost or rows * padded <= max_batch_cost
        assert not buckets or padded in buckets
