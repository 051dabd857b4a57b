"""Prometheus metrics shared by the whole process (one default registry, served at /metrics)."""

from __future__ import annotations

from prometheus_client import Gauge

KAFKA_REACHABLE = Gauge("kpd_kafka_reachable", "1 when the last metadata probe answered")
IS_LEADER = Gauge("kpd_leader", "1 while this sidecar is the elected leader")
