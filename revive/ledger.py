"""Per-partition lease bookkeeping for pop consumption (RocketMQ CK/ACK style).

One ``PartitionLedger`` exists per (group, source topic, partition) on the leader. The source
topic is whatever the records were read from: the origin topic or the group's retry topic.

A **checkpoint** is one pop batch from one partition: an id, the sorted offsets it leased
(usually contiguous, gaps allowed), per-offset delivery counts, and a lease deadline. Per offset
it keeps three bits (settled, acked, expiry-reported), and a sparse dict of per-offset deadlines
only for leases that were changed. Contiguous batches store just their first offset, so a leased
message costs a few bytes (`heap_bytes()`), never a Python object.

Settling outcomes (``Outcome``): ``ACKED``; ``REQUEUED`` (nacked, or the lease expired, and the
message was copied to the retry topic: this delivery is over); ``DEAD_LETTERED``.

API (``now_ms`` / deadlines are epoch ms; statuses are the strings of docs/reference.md):

* ``open_checkpoint(checkpoint_id, offsets, delivery_counts, deadline_ms)``: record a pop.
  Checkpoint ids and offsets must both increase across calls (pops read a partition in order).
* ``ack(cp, offset, now_ms)`` -> ``acked`` | ``acked_late`` (deadline passed, not yet requeued)
  | ``already_acked`` | ``superseded`` (this delivery was requeued / dead-lettered) | ``invalid``.
* ``settle(cp, offset, outcome)`` for nack / reject / revive -> ``ok`` | ``already_acked`` |
  ``superseded`` | ``invalid``. The revive loop must publish a retry only when this says ``ok``:
  an ack that raced with expiry wins.
* ``change_deadline(cp, offset, deadline_ms, now_ms)`` -> ``ok`` | ``already_acked`` |
  ``superseded`` | ``invalid``. A lease whose deadline has passed cannot be extended (the revive
  loop may already be requeuing it), so that answers ``superseded``.
* ``expired(now_ms)`` -> ``[(cp, offset, delivery_count)]`` of unsettled leases whose deadline
  passed, each reported once; the caller settles them as ``REQUEUED`` or ``DEAD_LETTERED``.
  ``next_deadline_ms()`` says when to look again (a lower bound).
* ``delivery_count(cp, offset)``, ``in_flight()``, ``low_watermark(cursor)`` (the offset to
  commit: smallest leased-but-unsettled offset, else ``cursor``).

Every method is deterministic in its arguments, so replaying the state records (see
``revive.records``) with their timestamps rebuilds the same ledger. Mutations happen in memory
when called; the caller writes the matching record in the same Kafka transaction as its other
effects and answers the client only after the commit. If that write fails the leader must
rebuild its ledgers from Kafka, since memory is then ahead of the log.

The ledger is compiled (`native/src/ledger.rs`, `kpd_core.PartitionLedger`); this module is its
face: the statuses and `Outcome` are the Python side's names.

Fully settled checkpoints are dropped once the low watermark passes them. A receipt for a
dropped checkpoint answers ``already_acked``, except for the last ``retain_settled`` dropped
checkpoints that requeued or dead-lettered something, which keep answering ``superseded``
exactly for those offsets. Past that bound a late ack of a requeued message reads
``already_acked``: both statuses mean "nothing left to do for this receipt".
"""

from __future__ import annotations

from enum import IntEnum

from kpd_core import MAX_DELIVERY_COUNT, PartitionLedger

ACKED = "acked"
ACKED_LATE = "acked_late"
ALREADY_ACKED = "already_acked"
SUPERSEDED = "superseded"
INVALID = "invalid"
OK = "ok"

__all__ = [
    "ACKED",
    "ACKED_LATE",
    "ALREADY_ACKED",
    "INVALID",
    "MAX_DELIVERY_COUNT",
    "OK",
    "SUPERSEDED",
    "Outcome",
    "PartitionLedger",
]


class Outcome(IntEnum):
    """How one delivery ended; the values are stored in state records, never renumber."""

    ACKED = 1
    REQUEUED = 2
    DEAD_LETTERED = 3
    RELEASED = 4  # an ordered lane's nack or expiry: the message comes again in place
