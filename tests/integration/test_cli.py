"""`kpd` client verbs as real processes against a real sidecar: output, effects, exit codes.

Exit codes are a contract (docs/reference.md: Command line): 0 done, 1 an error answer / an
item not done / kpd unreachable, 2 bad usage (nothing sent).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_helpers import TopicReader, header_dict, wait_for

DONE, FAILED, USAGE = 0, 1, 2
TOKEN = "cli-test-token"
DEAD_URL = "http://127.0.0.1:1"  # nothing listens on port 1


def kpd(
    *args: str,
    env: dict[str, str] | None = None,
    stdin: str | bytes = "",
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `kpd ARGS` with no KPD_* variable of ours, plus `env`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KPD_")}
    done = subprocess.run(
        [sys.executable, "-m", "kpd_cli", *args],
        input=stdin.encode() if isinstance(stdin, str) else stdin,
        capture_output=True,
        env={**clean, **(env or {})},
        cwd=cwd,
        timeout=120,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def lines(result: subprocess.CompletedProcess[str]) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def expect(result: subprocess.CompletedProcess[str], code: int) -> subprocess.CompletedProcess[str]:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    return result


@pytest.fixture(scope="module")
def sidecar(module_sidecar_factory):
    """One sidecar for the module's tests that need no settings of their own."""
    return module_sidecar_factory("a").start()


def test_produce_now_with_key_and_headers_reaches_the_topic(
    sidecar, new_topic, kafka_bootstrap
) -> None:
    topic = new_topic()
    out = expect(
        kpd(
            "produce",
            topic,
            "--value",
            "héllo",
            "--key",
            "k1",
            "--header",
            "trace=abc",
            "--header",
            "empty=",
            "--url",
            sidecar.url,
        ),
        DONE,
    )
    [result] = lines(out)
    assert result["status"] == "enqueued" and result["partition"] == 0
    with TopicReader(kafka_bootstrap, topic) as reader:
        [record] = reader.read_count(1, 30)
    assert record.value() == "héllo".encode()
    assert record.key() == b"k1"
    assert header_dict(record) == {"trace": b"abc", "empty": b""}
    assert record.offset() == result["offset"]


def test_schedules_get_and_cancel(sidecar, new_topic) -> None:
    topic = new_topic()
    url = ("--url", sidecar.url)
    out = expect(
        kpd("produce", topic, "--value", "v", "--delay-ms", "600000", "--id", "s-1", *url), DONE
    )
    [scheduled] = lines(out)
    assert scheduled["status"] == "scheduled" and scheduled["id"] == "s-1"
    [got] = lines(expect(kpd("schedules", "get", "s-1", *url), DONE))
    assert got == {
        "id": "s-1",
        "state": "scheduled",
        "target": topic,
        "deliver_at_ms": scheduled["deliver_at_ms"],
    }
    assert lines(expect(kpd("schedules", "cancel", "s-1", *url), DONE)) == [
        {"id": "s-1", "state": "cancelled"}
    ]
    assert lines(expect(kpd("schedules", "get", "s-1", *url), DONE))[0]["state"] == "cancelled"
    missing = expect(kpd("schedules", "get", "no-such-id", *url), FAILED)
    assert "404 schedule_not_found" in missing.stderr and missing.stdout == ""
    expect(kpd("schedules", "cancel", "no-such-id", *url), FAILED)
    # A hostile id is one path segment: it never reaches another route (here the produce call).
    hostile = expect(kpd("schedules", "cancel", f"../topics/{topic}/messages", *url), FAILED)
    assert "not_found" in hostile.stderr


def test_deliver_at_iso_and_epoch_ms(sidecar, new_topic) -> None:
    topic = new_topic()
    url = ("--url", sidecar.url)
    # 2030-01-01T00:00:00Z is 1893456000000; half a millisecond rounds up (never early).
    iso = kpd(
        "produce", topic, "--value", "v", "--deliver-at", "2030-01-01T01:00:00.0005+01:00", *url
    )
    assert lines(expect(iso, DONE))[0]["deliver_at_ms"] == 1_893_456_000_001
    epoch = kpd("produce", topic, "--value", "v", "--deliver-at", "1893456000000", *url)
    assert lines(expect(epoch, DONE))[0]["deliver_at_ms"] == 1_893_456_000_000
    zulu = kpd("produce", topic, "--value", "v", "--deliver-at", "2030-01-01T00:00:00Z", *url)
    assert lines(expect(zulu, DONE))[0]["deliver_at_ms"] == 1_893_456_000_000
    # A due time in the past is delivered at once; then cancelling it is an error answer.
    past = kpd("produce", topic, "--value", "v", "--deliver-at", "1000", "--id", "past-1", *url)
    assert lines(expect(past, DONE))[0]["deliver_at_ms"] == 1000
    wait_for(
        lambda: lines(kpd("schedules", "get", "past-1", *url))[0]["state"] == "delivered",
        30,
        "past-1 delivered",
    )
    late = expect(kpd("schedules", "cancel", "past-1", *url), FAILED)
    assert "409 already_delivered" in late.stderr


def test_produce_stdin_lines_in_batches(sidecar, new_topic, kafka_bootstrap) -> None:
    topic = new_topic()
    count = 2500  # more than the API's 1000 messages per call
    body = "\n".join(json.dumps({"key": f"k{i}", "value": f"m{i}"}) for i in range(count))
    binary = json.dumps(
        {"value_b64": base64.b64encode(b"\x00\xff").decode(), "headers": {"h": "1"}}
    )
    out = expect(kpd("produce", topic, "--url", sidecar.url, stdin=f"{body}\n\n{binary}\n"), DONE)
    results = lines(out)
    assert len(results) == count + 1 and {r["status"] for r in results} == {"enqueued"}
    assert [r["offset"] for r in results] == list(range(count + 1))
    with TopicReader(kafka_bootstrap, topic) as reader:
        records = reader.read_count(count + 1, 60)
    assert [r.value() for r in records[:count]] == [f"m{i}".encode() for i in range(count)]
    assert records[count].value() == b"\x00\xff" and header_dict(records[count]) == {"h": b"1"}


def test_large_stdin_is_split_by_bytes_under_the_request_limit(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    """6 x 900 KB in one call would be over this sidecar's 5 MiB body limit (413)."""
    sidecar = sidecar_factory("big", max_request_bytes=str(5 * 1024 * 1024)).start()
    topic = new_topic()
    body = "".join(json.dumps({"value": str(i) * 900_000}) + "\n" for i in range(6))
    expect(kpd("produce", topic, "--url", sidecar.url, stdin=body), DONE)
    with TopicReader(kafka_bootstrap, topic) as reader:
        records = reader.read_count(6, 60)
    assert [len(r.value()) for r in records] == [900_000] * 6


def test_malformed_stdin_line_sends_nothing(sidecar, new_topic, kafka_bootstrap) -> None:
    topic = new_topic()
    good = json.dumps({"value": "first"})
    for bad, reason in (
        ("{not json", "not JSON"),
        ('["a list"]', "expected a JSON object"),
        ('{"value": "x", "colour": "red"}', "unknown field(s) colour"),
        ('{"value": 5}', "value must be a string"),
        ('{"value": "x", "delay_ms": -1}', "delay_ms must be a whole number >= 0"),
        ('{"value": "x", "delay_ms": true}', "delay_ms must be a whole number >= 0"),
        ('{"value": "x", "value_b64": "eA=="}', "give value or value_b64, not both"),
        ('{"value": "x", "delay_ms": 1, "deliver_at_ms": 2}', "give delay_ms or deliver_at_ms"),
        ('{"value": "x", "headers": {"h": 1}}', "headers must be an object of string values"),
        ('{"value": "x", "headers": ["h"]}', "headers must be an object"),
        ("[" * 100_000 + "]" * 100_000, "not JSON"),
    ):
        stdin = f"{good}\n\n{bad}\n{good}\n"
        out = expect(kpd("produce", topic, "--url", sidecar.url, stdin=stdin), USAGE)
        assert f"stdin line 3: {reason}" in out.stderr, out.stderr
        assert out.stdout == ""
    expect(kpd("produce", topic, "--url", sidecar.url, stdin=""), USAGE)
    not_utf8 = kpd("produce", topic, "--url", sidecar.url, stdin=f"{good}\n".encode() + b"\xff\n")
    assert "stdin line 2: not UTF-8 text" in expect(not_utf8, USAGE).stderr
    # Nothing of the above reached the topic: the first record there is this sentinel.
    expect(kpd("produce", topic, "--value", "sentinel", "--url", sidecar.url), DONE)
    with TopicReader(kafka_bootstrap, topic) as reader:
        [first] = reader.read_count(1, 30)
    assert first.value() == b"sentinel" and first.offset() == 0


def test_produce_error_answers_exit_1(sidecar, new_topic) -> None:
    url = ("--url", sidecar.url)
    unknown = expect(kpd("produce", "no-such-topic-cli", "--value", "v", *url), FAILED)
    assert lines(unknown)[0]["code"] == "unknown_topic" and "unknown_topic: 1" in unknown.stderr
    control = kpd("produce", new_topic(), "--value", "v", "--header", "kpd-target=x", *url)
    assert "422 invalid_request" in expect(control, FAILED).stderr
    far = kpd(
        "produce", new_topic(), "--value", "v", "--delay-ms", str(11 * 365 * 86_400_000), *url
    )
    assert "messages.0.delay_ms" in expect(far, FAILED).stderr
    bad_id = kpd("produce", new_topic(), "--value", "v", "--delay-ms", "5", "--id", "a b", *url)
    assert "422 invalid_request" in expect(bad_id, FAILED).stderr


def test_pop_settle_verbs_and_groups(sidecar_factory, new_topic) -> None:
    sidecar = sidecar_factory("p", api_token=TOKEN).start()
    topic = new_topic()
    auth = {"KPD_API_TOKEN": TOKEN, "KPD_URL": sidecar.url}
    values = "".join(json.dumps({"value": f"m{i}"}) + "\n" for i in range(5))
    binary = json.dumps({"value_b64": base64.b64encode(b"\xff\xfe").decode()})
    expect(kpd("produce", topic, env=auth, stdin=values + binary), DONE)

    wrong = {**auth, "KPD_API_TOKEN": "wrong"}
    for args in (
        ("pop", "g", topic),
        ("ack", "g", "r"),
        ("groups", "g"),
        ("schedules", "get", "x"),
    ):
        assert "401 unauthorized" in expect(kpd(*args, env=wrong), FAILED).stderr
    assert (
        "401 unauthorized"
        in expect(kpd("pop", "g", topic, env={"KPD_URL": sidecar.url}), FAILED).stderr
    )

    popped: list[dict] = []

    def pop_all() -> bool:
        out = expect(
            kpd(
                "pop",
                "g",
                topic,
                "--max",
                "6",
                "--wait-ms",
                "2000",
                "--invisible-ms",
                "60000",
                env=auth,
            ),
            DONE,
        )
        popped.extend(lines(out))
        return len(popped) >= 6

    wait_for(pop_all, 60, "6 messages popped")
    assert len(popped) == 6
    by_value = {m.get("value") or m["value_b64"]: m for m in popped}
    assert set(by_value) == {"m0", "m1", "m2", "m3", "m4", base64.b64encode(b"\xff\xfe").decode()}
    first = by_value["m0"]
    assert first["topic"] == topic and first["delivery_count"] == 1 and first["receipt"]
    assert set(first) == {
        "receipt",
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "headers",
        "timestamp_ms",
        "delivery_count",
        "invisible_until_ms",
    }
    receipt = {value: m["receipt"] for value, m in by_value.items()}

    acked = expect(kpd("ack", "g", receipt["m0"], env=auth), DONE)
    assert lines(acked) == [{"receipt": receipt["m0"], "status": "acked"}]
    assert (
        lines(expect(kpd("ack", "g", receipt["m0"], env=auth), DONE))[0]["status"]
        == "already_acked"
    )
    mixed = expect(kpd("ack", "g", "-", env=auth, stdin=f"{receipt['m1']}\nforged\n"), FAILED)
    assert [r["status"] for r in lines(mixed)] == ["acked", "invalid"]
    assert "ack failed for 1 of 2 receipt(s): invalid: 1" in mixed.stderr

    extended = expect(kpd("extend", "g", receipt["m2"], "--invisible-ms", "120000", env=auth), DONE)
    [lease] = lines(extended)
    assert lease["status"] == "ok" and lease["invisible_until_ms"] > first["invisible_until_ms"]
    assert (
        lines(expect(kpd("extend", "g", "forged", "--invisible-ms", "0", env=auth), FAILED))[0][
            "status"
        ]
        == "invalid"
    )

    nacked = expect(kpd("nack", "g", receipt["m3"], "--delay-ms", "0", env=auth), DONE)
    assert lines(nacked)[0]["status"] == "requeued"
    # The old receipt is over: nacking it again did not happen.
    again = expect(kpd("nack", "g", receipt["m3"], env=auth), FAILED)
    assert lines(again)[0]["status"] == "superseded"

    rejected = expect(kpd("reject", "g", receipt["m4"], "--reason", "bad input", env=auth), DONE)
    assert lines(rejected)[0]["status"] == "dead_lettered"
    assert (
        lines(expect(kpd("reject", "g", receipt["m0"], env=auth), FAILED))[0]["status"]
        == "already_acked"
    )

    requeued: list[dict] = []

    def pop_retry() -> bool:
        requeued.extend(lines(expect(kpd("pop", "g", topic, "--wait-ms", "2000", env=auth), DONE)))
        return bool(requeued)

    wait_for(pop_retry, 60, "the nacked message back")
    assert [(m["value"], m["delivery_count"]) for m in requeued] == [("m3", 2)]

    stats = lines(expect(kpd("groups", "g", "--json", env=auth), DONE))[0]
    assert stats["group"] == "g" and stats["dead_lettered"] == 1
    assert stats["config"]["max_deliveries"] == 16 and topic in stats["topics"]
    table = expect(kpd("groups", "g", env=auth), DONE).stdout
    assert re.search(r"^dead_lettered +1$", table, re.MULTILINE), table
    assert re.search(r"^max_deliveries +16$", table, re.MULTILINE), table
    topic_row = next(line for line in table.splitlines() if line.startswith(topic))
    in_flight = stats["topics"][topic]["in_flight"]
    assert topic_row.split()[1:4] == [
        str(stats["topics"][topic]["available"]),
        str(in_flight),
        str(stats["topics"][topic]["retrying"]),
    ]

    out_of_range = expect(kpd("pop", "g", topic, "--max", "1001", env=auth), FAILED)
    assert "422 invalid_request" in out_of_range.stderr and "max_messages" in out_of_range.stderr
    expect(kpd("pop", "g", topic, "--invisible-ms", "999", env=auth), FAILED)
    expect(kpd("groups", "bad%name", env=auth), FAILED)


def test_url_comes_from_flag_then_kpd_url_then_settings(sidecar, tmp_path: Path) -> None:
    port = str(sidecar.port)
    group = ("groups", "g", "--json")
    # --url wins over KPD_URL; KPD_URL over the configured address.
    expect(kpd(*group, "--url", sidecar.url, env={"KPD_URL": DEAD_URL}), DONE)
    expect(kpd(*group, env={"KPD_URL": sidecar.url, "KPD_HTTP_PORT": "1"}), DONE)
    # The configured address: environment, then kpd.toml; a wildcard host is reached on loopback.
    expect(kpd(*group, env={"KPD_HTTP_PORT": port, "KPD_HTTP_HOST": "0.0.0.0"}), DONE)
    (tmp_path / "kpd.toml").write_text(f'http_port = {port}\nnode_id = "x"\n')
    expect(kpd(*group, cwd=tmp_path), DONE)
    # Settings `kpd run` would refuse (unknown variables, bad unrelated values) do not matter.
    unrelated = {"KPD_HTTP_PORT": port, "KPD_NOT_A_SETTING": "1", "KPD_RECEIPT_SECRET": "short"}
    expect(kpd(*group, env=unrelated), DONE)
    # Unreachable: exit 1 with the address; a malformed address is bad usage.
    dead = expect(kpd(*group, "--url", DEAD_URL), FAILED)
    assert f"cannot reach kpd at {DEAD_URL}" in dead.stderr
    assert "KPD_HTTP_PORT '0'" in expect(kpd(*group, env={"KPD_HTTP_PORT": "0"}), USAGE).stderr
    (tmp_path / "kpd.toml").write_text("http_port = [")
    expect(kpd(*group, cwd=tmp_path), USAGE)


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        (("produce",), "", "required: topic"),
        (
            ("produce", "t", "--value", "v", "--delay-ms", "5", "--deliver-at", "6"),
            "",
            "not allowed with",
        ),
        (
            ("produce", "t", "--value", "v", "--deliver-at", "2026-01-01T00:00:00"),
            "",
            "no time zone",
        ),
        (
            ("produce", "t", "--value", "v", "--deliver-at", "tomorrow"),
            "",
            "expected epoch milliseconds",
        ),
        (
            ("produce", "t", "--value", "v", "--deliver-at", "1969-12-31T23:59:59Z"),
            "",
            "before 1970",
        ),
        (("produce", "t", "--value", "v", "--delay-ms", "-5"), "", "expected a whole number"),
        (("produce", "t", "--value", "v", "--delay-ms", "1e3"), "", "expected a whole number"),
        (("produce", "t", "--value", "v", "--id", "x"), "", "--id names a schedule"),
        (("produce", "t", "--value", "v", "--header", "novalue"), "", "expected NAME=VALUE"),
        (("produce", "t", "--value", "v", "--header", "=v"), "", "expected NAME=VALUE"),
        (("produce", "t", "--value", "v", "--header", "a=1", "--header", "a=2"), "", "given twice"),
        (("produce", "t", "--key", "k"), '{"value": "v"}\n', "--key need --value"),
        (("produce", ""), "", "must not be empty"),
        (("pop", "g"), "", "required: topic"),
        (("pop", "g", "t", "--max", "ten"), "", "expected a whole number"),
        (("pop", "g", "t", "--wait-ms", "٣"), "", "expected a whole number"),
        (("ack", "g"), "", "required: RECEIPT"),
        (("ack", "g", "-"), "\n\n", "no receipts given"),
        (("ack", "g", "-"), b"r1\n\xff\n", "stdin line 2: not UTF-8 text"),
        (("ack", "g", ""), "", "a receipt is empty"),
        (("nack", "g", "r", "--delay-ms", "soon"), "", "expected a whole number"),
        (("reject", "g"), "", "required: RECEIPT"),
        (("extend", "g", "r"), "", "required: --invisible-ms"),
        (("schedules", "delete", "x"), "", "invalid choice"),
        (("schedules", "get"), "", "required: id"),
        (("groups",), "", "required: group"),
        (("groups", "g", "--url", "localhost:8080"), "", "expected http(s)://host"),
        (("groups", "g", "--url", "http://h:port"), "", "URL 'http://h:port'"),
        (("nope",), "", "invalid choice"),
    ],
)
def test_bad_usage_exits_2_without_sending(
    args: tuple[str, ...], stdin: str | bytes, says: str
) -> None:
    # The URL is dead: had anything been sent, the exit would be 1 (cannot reach).
    full = args if "--url" in args else (*args, "--url", DEAD_URL)
    out = expect(kpd(*full, stdin=stdin), USAGE)
    assert says in out.stderr, out.stderr
    assert out.stdout == ""
