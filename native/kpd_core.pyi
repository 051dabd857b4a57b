from collections.abc import Iterable

MAX_RECEIPT_CHARS: int
MIN_SECRET_BYTES: int
MAX_CACHED_GROUPS: int
MAX_CACHED_SEGMENTS: int
MAX_BATCH_MESSAGES: int

class InvalidReceipt(ValueError):
    reason: str

class Receipt:
    group: str
    topic: str
    partition: int
    offset: int
    checkpoint_id: int
    delivery_count: int
    def __init__(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        checkpoint_id: int,
        delivery_count: int,
    ) -> None: ...

class ReceiptCodec:
    tags_computed: int
    cached_segments: int
    def __init__(self, secret: bytes) -> None: ...
    def encode(self, r: Receipt) -> str: ...
    def encode_batch(
        self,
        group: str,
        topic: str,
        partition: int,
        checkpoint_id: int,
        offsets: Iterable[int],
        counts: Iterable[int],
    ) -> list[str]: ...
    def decode(self, text: object, *, group: str) -> Receipt: ...
