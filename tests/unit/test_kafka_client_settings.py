"""The settings every Kafka client kpd makes shares (`foundation.kafka_clients`)."""

from __future__ import annotations

from confluent_kafka import Producer

from foundation.config import Settings
from foundation.kafka_clients import base_config, producer_config


def test_no_client_kpd_makes_asks_the_broker_to_create_a_topic() -> None:
    """kpd creates topics only with CreateTopics: librdkafka's producers (and confluent-kafka's
    admin clients, built on one) would otherwise have a broker with auto.create.topics.enable
    create any topic they look up or write."""
    settings = Settings(node_id="a")
    for config in (base_config(settings), producer_config(settings)):
        assert config["allow.auto.create.topics"] is False
    # librdkafka takes it for a producer (it refuses an unknown or invalid property at once).
    Producer({**producer_config(settings), "bootstrap.servers": "127.0.0.1:1"}).flush(0)
