"""Which sidecar the client's next call goes to (`kpd_client.sidecars`): each in turn, one found
away asked last until `AWAY_S` has passed."""

from __future__ import annotations

import pytest

from kpd_client.sidecars import AWAY_S, Sidecars

URLS = ["http://a:1", "http://b:2/", "http://c:3"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_calls_start_at_each_sidecar_in_turn() -> None:
    sidecars = Sidecars(URLS, Clock())
    firsts = [sidecars.in_turn() for _ in range(4)]
    assert firsts == [
        ["http://a:1", "http://b:2", "http://c:3"],
        ["http://b:2", "http://c:3", "http://a:1"],
        ["http://c:3", "http://a:1", "http://b:2"],
        ["http://a:1", "http://b:2", "http://c:3"],
    ]


def test_a_sidecar_found_away_is_asked_last_until_its_time_is_up() -> None:
    clock = Clock()
    sidecars = Sidecars(URLS, clock)
    sidecars.away("http://a:1")
    clock.now += AWAY_S - 0.1
    sidecars.away("http://b:2")
    assert sidecars.in_turn() == ["http://c:3", "http://a:1", "http://b:2"]  # turn 0
    assert sidecars.in_turn() == ["http://c:3", "http://b:2", "http://a:1"]  # turn 1
    clock.now += 0.1  # a's time is up, not b's
    assert sidecars.in_turn() == ["http://c:3", "http://a:1", "http://b:2"]  # turn 2
    assert sidecars.in_turn() == ["http://a:1", "http://c:3", "http://b:2"]  # turn 3
    clock.now += AWAY_S
    assert sidecars.in_turn() == ["http://b:2", "http://c:3", "http://a:1"]  # turn 4


def test_with_every_sidecar_away_each_is_still_asked() -> None:
    clock = Clock()
    sidecars = Sidecars(URLS[:2], clock)
    for url in URLS[:2]:
        sidecars.away(url.rstrip("/"))
    assert sidecars.in_turn() == ["http://a:1", "http://b:2"]


def test_a_client_needs_a_sidecar() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Sidecars([])
