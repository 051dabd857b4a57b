"""The header names of kpd's wire contract (docs/reference.md), in one place for both features.

The compiled core parses the buffer topic's control headers (`delay_service.headers`) and the
kpd headers of retry copies (`revive.copies`): those names come from it, so what it parses and
what kpd writes cannot drift.
"""

from __future__ import annotations

import kpd_core

# A delayed message on the buffer topic, and a cancel.
TARGET, DELIVER_AT, DELAY_MS, ID, CANCEL = kpd_core.CONTROL_HEADERS
CONTROL_HEADERS = frozenset(kpd_core.CONTROL_HEADERS)
# A retry or dead-letter copy of a popped message: how often it was delivered, and its origin.
DELIVERY_COUNT, ORIGIN_TOPIC, ORIGIN_PARTITION, ORIGIN_OFFSET = kpd_core.COPY_HEADERS
# Which seek of its origin topic the copied delivery came after (`revive.seek_stamps`).
ORIGIN_SEEK = "kpd-origin-seek"
DLQ_REASON = "kpd-dlq-reason"  # why a dead letter is one
ERROR = "kpd-error"  # why a buffer record was invalid, on its copy in the invalid topic
TRUNCATED = "kpd-truncated"  # what a copy too large for its topic lost (`foundation.record_size`)
