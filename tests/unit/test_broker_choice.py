"""The test-broker fixture picks: KPD_BOOTSTRAP, else Docker, else the local broker."""

from __future__ import annotations

import socket

from devtools import broker_for_tests
from devtools.broker_for_tests import BrokerSource, choose_broker_source


def never() -> bool:
    raise AssertionError("Docker must not be probed when KPD_BOOTSTRAP is set")


def test_env_wins_without_probing_docker() -> None:
    assert choose_broker_source({"KPD_BOOTSTRAP": "k:9092"}, never) is BrokerSource.ENV


def test_docker_when_engine_answers() -> None:
    assert choose_broker_source({}, lambda: True) is BrokerSource.DOCKER


def test_local_broker_last() -> None:
    assert choose_broker_source({}, lambda: False) is BrokerSource.LOCAL
    assert choose_broker_source({"KPD_BOOTSTRAP": "  "}, lambda: False) is BrokerSource.LOCAL


def test_free_ports_are_picked_below_the_ephemeral_range(monkeypatch, tmp_path) -> None:
    """An outgoing connection takes its local port from the ephemeral range, so a port picked
    there could be taken before its sidecar binds it; one picked below it cannot."""
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    monkeypatch.setattr(broker_for_tests, "EPHEMERAL_RANGE", ranges)
    ports = [broker_for_tests.free_port() for _ in range(50)]
    assert all(broker_for_tests.LOWEST_PORT <= port < 32767 for port in ports)
    for port in ports[:5]:  # free: each can be bound
        socket.create_server(("127.0.0.1", port)).close()


def test_with_no_room_below_the_ephemeral_range_the_kernel_picks(monkeypatch, tmp_path) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("1024\t65535\n")
    monkeypatch.setattr(broker_for_tests, "EPHEMERAL_RANGE", ranges)
    port = broker_for_tests.free_port()  # no room to pick from: the kernel's pick, free
    socket.create_server(("127.0.0.1", port)).close()
