"""The test-broker fixture picks: KPD_BOOTSTRAP, else Docker, else the local broker."""

from __future__ import annotations

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
