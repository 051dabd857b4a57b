"""The API's producer (`foundation.async_producer`) against a real broker: its thread serves
delivery reports while records are outstanding and sleeps on an event between them."""

from __future__ import annotations

import asyncio
import time

from foundation.async_producer import AsyncProducer


def test_deliveries_resolve_in_a_burst_and_after_the_producer_sat_idle(
    kafka_bootstrap: str, new_topic
) -> None:
    topic = new_topic(partitions=2)
    producer = AsyncProducer({"bootstrap.servers": kafka_bootstrap})

    async def burst(n: int, tag: str) -> set[tuple[int, int]]:
        """Produce n records; where each landed, as its delivery report said."""
        futures = [producer.produce(topic, f"{tag}{i}".encode(), b"k%d" % i) for i in range(n)]
        delivered = await asyncio.wait_for(asyncio.gather(*futures), 30)
        return {(message.partition(), message.offset()) for message in delivered}

    try:
        placed = asyncio.run(burst(200, "a"))
        assert len(placed) == 200  # each in a place of its own
        ends = {p: max(o for q, o in placed if q == p) + 1 for p, _ in placed}
        serving = producer._thread
        time.sleep(0.5)  # at rest: nothing outstanding, the thread waits for the next record
        assert serving.is_alive() and not producer._produced.is_set()
        assert len(producer._producer) == 0
        for _ in range(3):  # one record at a time, each after the thread went back to sleep
            [(partition, offset)] = asyncio.run(burst(1, "b"))
            assert offset == ends.get(partition, 0)  # the partition's next
            ends[partition] = offset + 1
            time.sleep(0.2)
    finally:
        started = time.monotonic()
        producer.close()
    assert time.monotonic() - started < 2  # the event ends the thread's wait at once
    assert not serving.is_alive()
