"""Leader election through Kafka group membership (as Kafka Connect and Karapace do).

Every sidecar joins one consumer group subscribed to a single-partition topic. The group
coordinator assigns that partition to exactly one member: that member is the leader. When it
leaves (clean stop) the partition moves at once; when it dies, after its session timeout.

Election alone does not stop a paused ex-leader from writing: the transactional producers of the
leader (one fixed transactional.id per role) do, because a new leader's `init_transactions`
fences every older producer with the same id.
"""

from __future__ import annotations

import threading

import structlog
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from sidecar.metrics import IS_LEADER

log = structlog.get_logger(__name__)

CLIENT_PREFIX = "kpd-leader-candidate "


class Election:
    """Keeps this node in the election group; `is_leader` tells whether it leads right now."""

    def __init__(
        self,
        client_config: dict[str, object],
        topic: str,
        group: str,
        session_timeout_ms: int,
        advertised_url: str,
    ) -> None:
        self._group = group
        self._consumer = Consumer(
            {
                **client_config,
                # Followers find the leader's HTTP address in its group membership.
                "client.id": f"{CLIENT_PREFIX}{advertised_url}",
                "group.id": group,
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": max(100, session_timeout_ms // 4),
                "enable.auto.commit": False,
                # Sticky: a sidecar joining must not take leadership from a healthy leader.
                "partition.assignment.strategy": "cooperative-sticky",
            }
        )
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="election", daemon=True)
        self.is_leader = False
        self.leader_known = False

    def start(self) -> None:
        self._consumer.subscribe(
            [self._topic],
            on_assign=self._assigned,
            on_revoke=self._revoked,
            on_lost=self._revoked,
        )
        self._thread.start()

    def leader_url(self, admin: AdminClient, timeout_s: float) -> str | None:
        """The HTTP address of the member that holds the election partition, if any."""
        futures = admin.describe_consumer_groups([self._group], request_timeout=timeout_s)
        description = futures[self._group].result(timeout=timeout_s)
        for member in description.members:
            assignment = member.assignment.topic_partitions if member.assignment else []
            if assignment and member.client_id.startswith(CLIENT_PREFIX):
                return str(member.client_id[len(CLIENT_PREFIX) :])
        return None

    def stop(self) -> None:
        """Leave the group (hands leadership over at once) after demoting this node."""
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                # No records ever arrive; polling serves the group protocol and callbacks.
                self._consumer.poll(0.1)
        finally:
            self._set_leader(False)
            self._consumer.close()

    def _assigned(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        self.leader_known = True
        if partitions:
            self._set_leader(True)

    def _revoked(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            self._set_leader(False)

    def _set_leader(self, leader: bool) -> None:
        if leader == self.is_leader:
            return
        self.is_leader = leader
        IS_LEADER.set(int(leader))
        log.info("leadership changed", leader=leader)
