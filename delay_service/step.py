"""What one delay-leader step changes: its transaction, and what to apply once it commits."""

from __future__ import annotations

import time
from collections.abc import Hashable

from delay_service import metrics
from delay_service.schedules import Schedule, ScheduleIndex
from foundation.clock import now_ms
from foundation.metrics import observe_all
from foundation.producers_in_turn import ProducersInTurn
from foundation.state_follower import stage_position
from foundation.store import Batch, Store
from foundation.transactions import Transaction


class Step:
    def __init__(self, producers: ProducersInTurn, timeout_s: float, tracked: bool) -> None:
        self.txn = Transaction(producers, timeout_s, tracked, role="delay")
        self.records: dict[str, Schedule] = {}  # latest state per id, as this step leaves it
        # State per id as the index held it when this step first looked: applying the step's
        # records after the commit starts from it instead of reading RocksDB again.
        self.found: dict[str, Schedule | None] = {}
        self.ordered: list[Schedule] = []
        self.encoded: list[bytes] = []  # the records of `ordered` as written to the topic
        self.applied: list[Schedule] = []  # the records that changed state, once committed
        self.index_reads = 0  # schedules read from RocksDB (not held in memory, not written yet)
        self.delivered_due_ms: list[int] = []  # due times of this step's deliveries
        self.first_delivered_s = 0.0  # monotonic time of its first delivery
        self.scheduled = self.cancelled = self.invalid = self.forwarded = 0
        # (due, id) taken from the wheel: a redo puts them back.
        self.taken: list[tuple[int, str]] = []
        self.settled: set[Hashable] = set()  # verdicts of an earlier attempt this step settles
        self.targets: dict[str, bool] = {}  # whether each target exists, asked once a step
        self._state_ends: dict[int, int] = {}  # schedules partition -> last offset seen written

    @property
    def txn_used(self) -> bool:
        return self.txn.used

    def put(self, record: Schedule, encoded: bytes) -> None:
        self.records[record.schedule_id] = record
        self.ordered.append(record)
        self.encoded.append(encoded)

    def delivered(self, due_ms: int) -> None:
        if not self.delivered_due_ms:
            self.first_delivered_s = time.monotonic()
        self.delivered_due_ms.append(due_ms)

    def delivering_for_s(self) -> float:
        """How long the step's first delivery has waited for its commit (0 if none yet)."""
        return time.monotonic() - self.first_delivered_s if self.delivered_due_ms else 0.0

    def wrote_state(self, partition: int, offset: int) -> None:
        self._state_ends[partition] = max(self._state_ends.get(partition, -1), offset)

    def index_batch(
        self, store: Store, index: ScheduleIndex, shard: int, schedules_topic: str
    ) -> Batch:
        """The RocksDB batch of this step's records (all of ids of `shard`, the leader's), with
        the schedules positions they reach."""
        batch = store.batch()
        self.applied = index.stage(batch, shard, self.ordered, self.encoded, self.found)
        # The index now holds these state records: a restart need not read them again.
        for partition, last in self._state_ends.items():
            stage_position(batch, schedules_topic, partition, last + 1)
        return batch

    def count(self) -> None:
        """After the commit: lateness is measured when deliveries became visible, not when kpd
        stamped them."""
        visible = now_ms()
        observe_all(metrics.LATENESS, [(visible - due) / 1000 for due in self.delivered_due_ms])
        metrics.DELIVERED.inc(len(self.delivered_due_ms))
        metrics.SCHEDULED.inc(self.scheduled)
        metrics.CANCELLED.inc(self.cancelled)
        metrics.INVALID.inc(self.invalid)
        metrics.INDEX_READS.inc(self.index_reads)
