"""Never early by the broker's clock, even from a node whose clock runs ahead (principle 3).

The sidecar's processes get a `sitecustomize` that moves their wall clock 3 s ahead (what an
unsynchronised VM looks like); the target topics stamp records with the broker's own time
(LogAppendTime), which is what consumers see.
"""

from __future__ import annotations

from pathlib import Path

from kafka_helpers import (
    TopicReader,
    buffer_record,
    header_dict,
    led_shards,
    make_producer,
    metric_values,
    now_ms,
    produce_all,
    wait_for,
)
from load_helpers import readiness

AHEAD_MS = 3_000
SKEW = f"""
import time
_time_ns, _time = time.time_ns, time.time
time.time_ns = lambda: _time_ns() + {AHEAD_MS} * 1_000_000
time.time = lambda: _time() + {AHEAD_MS} / 1000
"""


def clock_ahead(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "skew"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SKEW)
    return {"PYTHONPATH": str(folder)}


def test_a_clock_ahead_waits_out_its_offset(sidecar_factory, new_topic, kafka_bootstrap, tmp_path):
    sidecar = sidecar_factory("ahead", max_clock_offset_ms="10000")
    sidecar.env.update(clock_ahead(tmp_path))
    sidecar.start()
    target = new_topic("stamped", config={"message.timestamp.type": "LogAppendTime"})
    with sidecar.client() as http:
        wait_for(lambda: metric_values(http).get("kpd_clock_offset_ms", 0) > AHEAD_MS / 2, 30,
                 "the offset measured")  # fmt: skip
        offset = metric_values(http)["kpd_clock_offset_ms"]
    due = now_ms() + 2_000  # by the test's (and the broker's) clock: 5 s ahead on the sidecar's
    records = [
        buffer_record(target, value=b"x", deliver_at=due + i, schedule_id=f"clock-{i}")
        for i in range(200)
    ]
    produce_all(make_producer(kafka_bootstrap), sidecar.env["KPD_BUFFER_TOPIC"], records)
    with TopicReader(kafka_bootstrap, target) as reader:
        messages = reader.read_count(len(records), 60)
    early = [
        (m.timestamp()[1], int(header_dict(m)["kpd-deliver-at"]))
        for m in messages
        if m.timestamp()[1] < int(header_dict(m)["kpd-deliver-at"])
    ]
    print(f"\nmeasured offset {offset:.0f} ms for a clock {AHEAD_MS} ms ahead")
    assert abs(offset - AHEAD_MS) < 500
    assert not early, f"{len(early)} early by the broker's clock: {early[:5]}"


def test_a_clock_too_far_off_leads_nothing(sidecar_factory, tmp_path):
    normal = sidecar_factory("normal").start()
    skewed = sidecar_factory("skewed", max_clock_offset_ms="1000")
    skewed.env.update(clock_ahead(tmp_path))
    skewed.start(ready=False)
    wait_for(lambda: "leading nothing" in readiness(skewed.url), 60, "the refusal")
    assert led_shards(normal) == {0, 1}  # the healthy sidecar leads every shard
    assert led_shards(skewed) == set()
