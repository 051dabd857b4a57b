"""kpd's Python SDK: an HTTP client for the pop and delay API. Imports nothing of the server."""

from kpd_client.client import AsyncKpdClient, KpdClient, PoppedMessage
from kpd_client.retry import KpdError
from kpd_client.worker import run_worker

__all__ = ["AsyncKpdClient", "KpdClient", "KpdError", "PoppedMessage", "run_worker"]
