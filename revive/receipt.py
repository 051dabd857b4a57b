"""Receipts: the opaque, signed handle a worker gets with each popped message (docs/receipts.md).

The codec is compiled (`native/`, module `kpd_core`): a pop batch's receipts come out of one
`encode_batch` call, and `decode` is total on hostile input: anything that is not a receipt this
codec issued for this group raises `InvalidReceipt` (a `ValueError` with a `reason`).
Every sidecar signs with the same secret (`receipt_secret`), so any of them reads a receipt.
"""

from __future__ import annotations

import structlog
from kpd_core import (
    MAX_BATCH_MESSAGES,
    MAX_CACHED_SEGMENTS,
    MAX_RECEIPT_CHARS,
    InvalidReceipt,
    Receipt,
    ReceiptCodec,
)

from foundation.config import Settings

log = structlog.get_logger(__name__)

__all__ = [
    "MAX_BATCH_MESSAGES",
    "MAX_CACHED_SEGMENTS",
    "MAX_RECEIPT_CHARS",
    "InvalidReceipt",
    "Receipt",
    "ReceiptCodec",
    "receipt_secret",
]


def receipt_secret(settings: Settings) -> bytes:
    """`KPD_RECEIPT_SECRET`, or a development secret with a warning."""
    if settings.receipt_secret is not None:
        return settings.receipt_secret.get_secret_value().encode()
    log.warning(
        "KPD_RECEIPT_SECRET is not set: using a development secret; set the same secret "
        "on every sidecar in production"
    )
    return b"kpd-development-receipt-secret"
