"""librdkafka settings shared by every client kpd makes, so they are chosen in one place."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AdminClient

from sidecar.config import Settings


def base_config(settings: Settings) -> dict[str, Any]:
    return {
        "bootstrap.servers": settings.bootstrap,
        "client.id": f"kpd-{settings.node_id}",
        # librdkafka logs connection errors itself; the probe reports reachability instead.
        "log_level": 3,
    }


def admin_client(settings: Settings) -> AdminClient:
    return AdminClient(base_config(settings))
