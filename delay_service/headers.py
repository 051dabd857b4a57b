"""Validate a buffer-topic record (docs/reference.md: Delayed messages) into a schedule or a cancel.

The compiled core checks it (`kpd_core.parse(headers, key, value, timestamp_ms, default_id,
limits)`) and answers a `ScheduleRequest` (schedule_id, target, due_ms, and the user's headers:
null values kept, no kpd ones) or a `CancelRequest` (schedule_id). Anything wrong raises
`InvalidRecord` with a reason that ends up in the `kpd-error` header of the copy sent to
`kpd.invalid`; parsing never raises anything else for what a consumer hands over, whatever the
bytes. The rules:

- each kpd header at most once, ASCII, taken as it is (no whitespace trimmed: "x\\n" is not "x");
- key + value + user headers (each counting `HEADER_FRAMING_BYTES`) within `max_record_bytes`;
- `kpd-cancel` names the id to cancel and wins over everything else on the record;
- otherwise `kpd-target` is a topic name ([A-Za-z0-9._-]{1,249}, not "." or ".."), not one of
  `forbidden_targets` (kpd's own) and not Kafka-internal (`__` prefix);
- exactly one of `kpd-deliver-at` (epoch ms) and `kpd-delay-ms` (from the record's timestamp):
  plain decimal digits, at most 15, due at most `max_delay_ms` after the record's timestamp;
- `kpd-id`, `kpd-cancel`: 1..128 of [A-Za-z0-9._:-]; a schedule without `kpd-id` takes
  `default_id`, the very object passed (callers tell a default id by identity).
"""

from __future__ import annotations

from kpd_core import CancelRequest as CancelRequest
from kpd_core import InvalidRecord as InvalidRecord
from kpd_core import Limits as Limits
from kpd_core import ScheduleRequest as ScheduleRequest
from kpd_core import parse as parse

from foundation.wire import CANCEL as CANCEL
from foundation.wire import CONTROL_HEADERS as CONTROL_HEADERS
from foundation.wire import DELAY_MS as DELAY_MS
from foundation.wire import DELIVER_AT as DELIVER_AT
from foundation.wire import ID as ID
from foundation.wire import TARGET as TARGET
