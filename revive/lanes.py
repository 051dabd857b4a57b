"""What a lane is made of (`revive.fetcher`): its key and its entries."""

from __future__ import annotations

from kpd_core import Provenance

from revive.source_record import SourceRecord

# (lane name, partition); the lane name is `orders` for originals and `kpd.retry.g/orders` for
# retries (no topic name has a `/`).
LaneKey = tuple[str, int]
# A lane's entry. The tuple holds untracked objects only, so the collector untracks it at its
# first collection (`revive.source_record`).
Fetched = tuple[SourceRecord, Provenance]
