"""How far this node's clock may run ahead of the broker's (docs/principles.md, 3: never early,
by the broker's clock as well as the sidecar's).

Once a second the worker writes a small record to a `LogAppendTime` topic and reads the broker's
append time from the delivery report. The broker appended between the send and the report, so
`sent - appended <= local - broker <= reported - appended`. The smallest upper bound of the last
minute is how far ahead this clock can be: the delay leaders wait that out before a due time
(`margin_ms`), so a record is never early on the broker's clock even where the node's runs ahead.
A node whose offset is beyond `KPD_MAX_CLOCK_OFFSET_MS` either way must not lead at all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message, Producer

from foundation.clock import now_ms
from foundation.metrics import CLOCK_OFFSET
from foundation.periodic import PeriodicThread

SAMPLE_EVERY_S = 1.0
WINDOW = 60  # samples kept: a minute


class ClockBounds:
    """The offset samples of the last minute, and what they say, published as plain ints.

    Only the sampling thread records; delay leaders on other threads read `margin_ms` at every
    step. Readers never iterate the window: iterating it while a sample arrived raised "deque
    mutated during iteration" in a delay leader and restarted its role."""

    def __init__(self) -> None:
        self._window: deque[tuple[int, int]] = deque(maxlen=WINDOW)  # (lower, upper) of offset
        self.measured = False
        self.margin_ms = 0  # how long to wait past a due time so it has passed on the broker too
        self.offset_ms = 0  # the best estimate of local minus broker time

    def record(self, lower: int, upper: int) -> None:
        self._window.append((lower, upper))
        tightest_upper = min(high for _, high in self._window)
        self.offset_ms = (max(low for low, _ in self._window) + tightest_upper) // 2
        self.margin_ms = max(0, tightest_upper)
        self.measured = True  # last: a reader never sees `measured` before the figures


class BrokerClock(PeriodicThread):
    def __init__(self, producer_config: dict[str, Any], topic: str, node: str) -> None:
        super().__init__("broker-clock", SAMPLE_EVERY_S)
        self._producer = Producer({**producer_config, "linger.ms": 0, "acks": "all"})
        self._topic, self._node = topic, node
        self._bounds = ClockBounds()
        self.on_sample: Callable[[], None] = lambda: None  # a sample came: the offset may move

    def stop(self) -> None:
        super().stop()
        self._producer.flush(1)

    @property
    def measured(self) -> bool:
        return self._bounds.measured

    @property
    def margin_ms(self) -> int:
        """How long to wait past a due time so it has passed on the broker's clock too."""
        return self._bounds.margin_ms

    @property
    def offset_ms(self) -> int:
        """The best estimate of local minus broker time (the tightest interval's middle)."""
        return self._bounds.offset_ms

    def tick(self) -> None:
        sent = now_ms()
        self._producer.produce(self._topic, self._node.encode(), on_delivery=self._appended(sent))
        self._producer.flush(SAMPLE_EVERY_S)  # bounded: a broker away only delays samples

    def _appended(self, sent: int) -> Any:
        def report(error: KafkaError | None, message: Message) -> None:  # in `tick`'s flush
            kind, appended = message.timestamp()
            if error is None and kind == TIMESTAMP_LOG_APPEND_TIME:
                self._bounds.record(sent - appended, now_ms() - appended)
                CLOCK_OFFSET.set(self._bounds.offset_ms)
                self.on_sample()

        return report
