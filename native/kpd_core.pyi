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

MAX_DELIVERY_COUNT: int

class PartitionLedger:
    def __init__(self, committed_offset: int, *, retain_settled: int = 1024) -> None: ...
    def open_checkpoint(
        self,
        checkpoint_id: int,
        offsets: Iterable[int],
        delivery_counts: Iterable[int],
        deadline_ms: int,
    ) -> None: ...
    def ack(self, checkpoint_id: int, offset: int, now_ms: int) -> str: ...
    def ack_status(self, checkpoint_id: int, offset: int, now_ms: int) -> str: ...
    def settle(self, checkpoint_id: int, offset: int, outcome: int) -> str: ...
    def change_deadline(
        self, checkpoint_id: int, offset: int, deadline_ms: int, now_ms: int
    ) -> str: ...
    def seek(self, offset: int) -> None: ...
    def open_leases(self) -> list[tuple[int, int]]: ...
    def next_deadline_ms(self) -> int | None: ...
    def expired(self, now_ms: int) -> list[tuple[int, int, int]]: ...
    def delivery_count(self, checkpoint_id: int, offset: int) -> int: ...
    def low_watermark(self, cursor: int) -> int: ...
    def in_flight(self) -> int: ...
    def live_checkpoints(self) -> int: ...
    def scans(self) -> int: ...
    def heap_bytes(self) -> int: ...
    def __deepcopy__(self, memo: object) -> PartitionLedger: ...

class DeliveryRenderer:
    def __init__(self, node: str, hidden_headers: Iterable[str]) -> None: ...
    def render(
        self,
        group: str,
        batch: list[tuple[object, object]],
        counts: Iterable[int],
        receipts: list[str],
        at_ms: int,
        invisible_until_ms: int,
    ) -> tuple[list[bytes], list[tuple[str, bytes]]]: ...

HEADER_FRAMING_BYTES: int

class SourceRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int
    size: int
    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[tuple[str, bytes | None]] | None,
        timestamp_ms: int,
    ) -> None: ...
    @staticmethod
    def of(message: object) -> SourceRecord: ...

class Origin:
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: str, partition: int, offset: int) -> None: ...
    @staticmethod
    def here(record: SourceRecord) -> Origin: ...

class Provenance:
    origin: Origin
    previous_deliveries: int
    distrust: str | None
    def __init__(
        self, origin: Origin, previous_deliveries: int, distrust: str | None = None
    ) -> None: ...

def provenance(record: SourceRecord, retry_topic: str) -> Provenance: ...
def lane_name(source_topic: str, origin_topic: str) -> str: ...
def lane_runs(
    messages: list[object], retry_topic: str, untrusted: str
) -> list[tuple[str, str, int, list[tuple[SourceRecord, Provenance]]]]: ...
def ack_records(
    ledger: tuple[str, str, int],
    leases: Iterable[tuple[int, int]],
    outcome: int,
    at_ms: int,
) -> list[bytes]: ...

class InvalidRecord(ValueError): ...

class Limits:
    def __init__(
        self, *, max_delay_ms: int, max_record_bytes: int, forbidden_targets: Iterable[str]
    ) -> None: ...

class ScheduleRequest:
    schedule_id: str
    target: str
    due_ms: int
    headers: tuple[tuple[str, bytes | None], ...]
    def __init__(
        self,
        schedule_id: str,
        target: str,
        due_ms: int,
        headers: tuple[tuple[str, bytes | None], ...],
    ) -> None: ...

class CancelRequest:
    schedule_id: str
    def __init__(self, schedule_id: str) -> None: ...

CONTROL_HEADERS: tuple[str, str, str, str, str]  # target, deliver-at, delay-ms, id, cancel
COPY_HEADERS: tuple[str, str, str, str]  # delivery-count, origin-topic, -partition, -offset

def parse(
    headers: Iterable[tuple[str, bytes | None]] | None,
    key: bytes | None,
    value: bytes | None,
    timestamp_ms: int,
    default_id: str,
    limits: Limits,
) -> ScheduleRequest | CancelRequest: ...
def murmur2(data: bytes) -> int: ...
def partition_of(key: bytes | str, partitions: int) -> int: ...
