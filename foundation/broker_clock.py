"""How far this node's clock may run ahead of the broker's (DESIGN principle 3: never early,
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
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message, Producer

from foundation.clock import now_ms
from foundation.metrics import CLOCK_OFFSET
from foundation.periodic import PeriodicThread

SAMPLE_EVERY_S = 1.0
WINDOW = 60  # samples kept: a minute


class BrokerClock(PeriodicThread):
    def __init__(self, producer_config: dict[str, Any], topic: str, node: str) -> None:
        super().__init__("broker-clock", SAMPLE_EVERY_S)
        self._producer = Producer({**producer_config, "linger.ms": 0, "acks": "all"})
        self._topic, self._node = topic, node
        self._bounds: deque[tuple[int, int]] = deque(maxlen=WINDOW)  # (lower, upper) of offset

    def stop(self) -> None:
        super().stop()
        self._producer.flush(1)

    @property
    def measured(self) -> bool:
        return bool(self._bounds)

    @property
    def margin_ms(self) -> int:
        """How long to wait past a due time so it has passed on the broker's clock too."""
        return max(0, min((upper for _, upper in self._bounds), default=0))

    @property
    def offset_ms(self) -> int:
        """The best estimate of local minus broker time (the tightest interval's middle)."""
        if not self._bounds:
            return 0
        lower = max(low for low, _ in self._bounds)
        upper = min(high for _, high in self._bounds)
        return (lower + upper) // 2

    def tick(self) -> None:
        sent = now_ms()
        self._producer.produce(self._topic, self._node.encode(), on_delivery=self._appended(sent))
        self._producer.flush(SAMPLE_EVERY_S)  # bounded: a broker away only delays samples

    def _appended(self, sent: int) -> Any:
        def report(error: KafkaError | None, message: Message) -> None:
            kind, appended = message.timestamp()
            if error is None and kind == TIMESTAMP_LOG_APPEND_TIME:
                self._bounds.append((sent - appended, now_ms() - appended))
                CLOCK_OFFSET.set(self.offset_ms)

        return report
