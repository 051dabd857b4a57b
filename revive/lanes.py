"""What a lane is (`revive.fetcher` sorts records into lanes): its name, key and entries.

A lane's name says where its records are read from (its source topic) and which pops ask for
them (its origin topic): the same topic for originals, the group's retry topic and the topic a
copy came from for retries.
"""

from __future__ import annotations

from kpd_core import Provenance
from kpd_core import lane_name as lane_name  # the face of lane names for the rest of revive

from revive.source_record import SourceRecord

# (lane name, partition); the lane name is `orders` for originals and `kpd.retry.g/orders` for
# retries (no topic name has a `/`).
LaneKey = tuple[str, int]
# A lane's entry. The tuple holds untracked objects only, so the collector untracks it at its
# first collection (`revive.source_record`).
Fetched = tuple[SourceRecord, Provenance]
# Retry-topic records whose kpd headers cannot be trusted gather under this origin ("" is no
# topic name, so no pop asks for it); the pop service dead-letters them with the reason.
UNTRUSTED = ""


def source_topic(lane: str) -> str:
    return lane.split("/", 1)[0]


def origin_topic(lane: str) -> str:
    """The topic pops ask for to get this lane's records (`UNTRUSTED` for distrusted ones)."""
    return lane.split("/", 1)[-1]
