"""An idempotent Kafka producer whose deliveries can be awaited from asyncio handlers.

confluent-kafka's own AIOProducer buffers records for up to `buffer_timeout` before sending, which
would add that much to every HTTP call; here each record is handed to librdkafka at once and a
background thread serves the delivery callbacks, while any are due: with none outstanding it
sleeps on an event, not in a poll (confluent-kafka wakes a poll 5 times a second).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

POLL_S = 0.1  # while records are outstanding: a poll returns as soon as it served a report


class AsyncProducer:
    def __init__(self, config: dict[str, Any]) -> None:
        self._producer = Producer(
            {
                **config,
                "enable.idempotence": True,
                "linger.ms": 1,
                "message.timeout.ms": 15_000,
                "partitioner": "murmur2_random",  # same partitions as Java clients
            }
        )
        self._stop = threading.Event()
        self._produced = threading.Event()  # set by `produce` and `close`: serve the reports
        self._thread = threading.Thread(target=self._serve, name="api-producer", daemon=True)
        self._thread.start()

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> asyncio.Future[Message]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                loop.call_soon_threadsafe(_resolve, future, message, None)
            else:
                loop.call_soon_threadsafe(_resolve, future, None, KafkaException(error))

        placed = {} if partition is None else {"partition": partition}
        self._producer.produce(
            topic, value=value, key=key, headers=headers or [], on_delivery=delivered, **placed
        )
        self._produced.set()
        return future

    def list_topics(self, topic: str, timeout: float) -> Any:
        return self._producer.list_topics(topic=topic, timeout=timeout)

    def close(self) -> None:
        self._stop.set()
        self._produced.set()
        self._thread.join(timeout=5)
        self._producer.flush(5)

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._produced.wait()
            self._produced.clear()  # before the look: a record produced after it sets it again
            while len(self._producer) > 0 and not self._stop.is_set():
                self._producer.poll(POLL_S)


def _resolve(
    future: asyncio.Future[Message], message: Message | None, error: Exception | None
) -> None:
    if future.done():  # the request was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(message)  # type: ignore[arg-type]
