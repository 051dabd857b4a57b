"""Receipts: the opaque, signed handle a worker gets with each popped message (docs/receipts.md).

The codec is compiled (`native/`, module `kpd_core`): a pop batch's receipts come out of one
`encode_batch` call, and `decode` is total on hostile input: anything that is not a receipt this
codec issued for this group raises `InvalidReceipt` (a `ValueError` with a `reason`).
"""

from kpd_core import (
    MAX_BATCH_MESSAGES,
    MAX_CACHED_SEGMENTS,
    MAX_RECEIPT_CHARS,
    InvalidReceipt,
    Receipt,
    ReceiptCodec,
)

__all__ = [
    "MAX_BATCH_MESSAGES",
    "MAX_CACHED_SEGMENTS",
    "MAX_RECEIPT_CHARS",
    "InvalidReceipt",
    "Receipt",
    "ReceiptCodec",
]
