"""HTTP produce/schedule validation: every bad request is a 4xx problem+json with a code."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from kafka_helpers import TopicReader, header_dict, now_ms, wait_delivering, wait_for

PROBLEM = "application/problem+json"
MAX_DELAY_MS = 10 * 365 * 24 * 3600 * 1000  # the default


@pytest.fixture(scope="module")
def sidecar(module_sidecar_factory):
    """One sidecar for the module: each test calls it with topics of its own."""
    return module_sidecar_factory("a", max_request_bytes="65536", max_record_bytes="1024").start()


def _problem(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM, response.headers
    body = response.json()
    assert body["code"] == code, body
    assert body["status"] == status
    return body


def _invalid(response: httpx.Response, field: str) -> dict:
    body = _problem(response, 422, "invalid_request")
    fields = [e["field"] for e in body["errors"]]
    assert any(f.startswith(field) for f in fields), (field, body["errors"])
    return next(e for e in body["errors"] if e["field"].startswith(field))


def _post(http: httpx.Client, topic: str, *messages: dict) -> httpx.Response:
    return http.post(f"/v1/topics/{topic}/messages", json={"messages": list(messages)})


def test_validation_errors(sidecar, new_topic):
    topic = new_topic("http")
    with sidecar.client() as http:
        error = _invalid(
            _post(http, topic, {"value": "x", "delay_ms": -1}), "body.messages.0.delay_ms"
        )
        assert error["bounds"] == {"ge": 0}
        assert "greater than or equal to 0" in error["message"]
        error = _invalid(
            _post(http, topic, {"value": "x"}, {"value": "y", "deliver_at_ms": -5}),
            "body.messages.1.deliver_at_ms",
        )
        assert error["bounds"] == {"ge": 0}

        error = _invalid(
            _post(http, topic, {"value": "x", "delay_ms": MAX_DELAY_MS + 1}),
            "body.messages.0.delay_ms",
        )
        assert str(MAX_DELAY_MS) in error["message"]
        assert error["bounds"]["max_delay_ms"] == MAX_DELAY_MS
        error = _invalid(
            _post(http, topic, {"value": "x", "deliver_at_ms": now_ms() + MAX_DELAY_MS + 60_000}),
            "body.messages.0.deliver_at_ms",
        )
        _invalid(_post(http, topic, {"value": "x", "delay_ms": 10**30}), "body.messages.0")

        error = _invalid(_post(http, topic, {"value_b64": "not base64!"}), "body.messages.0")
        assert "value_b64" in error["message"]
        error = _invalid(
            _post(http, topic, {"value": "x", "value_b64": base64.b64encode(b"x").decode()}),
            "body.messages.0",
        )
        assert "value or value_b64" in error["message"]
        error = _invalid(
            _post(http, topic, {"value": "x", "delay_ms": 5, "deliver_at_ms": now_ms()}),
            "body.messages.0",
        )
        assert "delay_ms or deliver_at_ms" in error["message"]
        for control in ("kpd-target", "kpd-deliver-at", "kpd-delay-ms", "kpd-id", "kpd-cancel"):
            error = _invalid(
                _post(http, topic, {"value": "x", "delay_ms": 5, "headers": {control: topic}}),
                "body.messages.0",
            )
            assert "control headers" in error["message"]
        for bad_id in ("a/b", "x" * 129, "", "abc\n", "caf\u00e9", "../x"):
            _invalid(_post(http, topic, {"value": "x", "delay_ms": 5, "id": bad_id}), "body")
        _invalid(_post(http, topic, {"value": "x", "id": "no-delay"}), "body.messages.0")
        _invalid(_post(http, topic, {"value": "x", "delay_ms": 1.5}), "body.messages.0.delay_ms")
        _invalid(_post(http, topic, {"value": 5}), "body.messages.0.value")
        _invalid(_post(http, topic, {"value": "x", "headers": {"": "x"}}), "body.messages.0")
        many_headers = {f"h{i}": "v" for i in range(101)}
        _invalid(_post(http, topic, {"value": "x", "headers": many_headers}), "body.messages.0")
        _invalid(_post(http, topic, {"value": "x", "surprise": 1}), "body.messages.0.surprise")
        _invalid(_post(http, topic), "body.messages")
        _invalid(http.post(f"/v1/topics/{topic}/messages", json={}), "body.messages")
        _invalid(http.post(f"/v1/topics/{topic}/messages", json=[1, 2]), "body")
        too_many = [{"value": "x"} for _ in range(1001)]
        error = _invalid(_post(http, topic, *too_many), "body.messages")
        assert error["bounds"]["max_length"] == 1000

        for raw in (b"{not json", b"", b'{"messages": [', b"\xff\xfe", b'{"messages": 1'):
            response = http.post(
                f"/v1/topics/{topic}/messages",
                content=raw,
                headers={"content-type": "application/json"},
            )
            _problem(response, 422, "invalid_request")
        # Nesting deeper than the JSON parser's recursion limit: FastAPI answers 400 itself.
        response = http.post(
            f"/v1/topics/{topic}/messages",
            content=b"[" * 10_000 + b"]" * 10_000,
            headers={"content-type": "application/json"},
        )
        _problem(response, 400, "bad_request")


def test_size_limits_are_413(sidecar, new_topic):
    topic = new_topic("size")
    with sidecar.client() as http:
        big = {"value": "x" * 70_000}
        body = _problem(_post(http, topic, big), 413, "request_too_large")
        assert "65536" in body["detail"]

        body = _problem(
            _post(http, topic, {"value": "small"}, {"value": "y" * 1025, "delay_ms": 10}),
            413,
            "record_too_large",
        )
        assert body["field"] == "messages.1" and body["max_bytes"] == 1024
        body = _problem(
            _post(http, topic, {"value_b64": base64.b64encode(b"z" * 1100).decode()}),
            413,
            "record_too_large",
        )
        # Headers count too.
        _problem(
            _post(http, topic, {"value": "v", "headers": {"h": "x" * 1100}}),
            413,
            "record_too_large",
        )
        # Nothing of a refused request was written.
        wait_delivering(http, new_topic("warm"))
    with TopicReader(sidecar.env["KPD_BOOTSTRAP"], topic) as reader:
        assert reader.read_for(0.5) == []


def test_streamed_body_over_the_limit_is_413(sidecar, new_topic):
    topic = new_topic("chunked")

    def chunks():
        for _ in range(100):
            yield b" " * 1000
        yield b'{"messages": [{"value": "x"}]}'

    with sidecar.client() as http:
        streamed = http.post(
            f"/v1/topics/{topic}/messages",
            content=chunks(),  # no Content-Length: chunked transfer encoding
            headers={"content-type": "application/json"},
        )
    _problem(streamed, 413, "request_too_large")


def test_unknown_and_kpd_topics_are_per_item_errors(sidecar, new_topic):
    env = sidecar.env
    with sidecar.client() as http:
        response = _post(http, "no-such-topic-77", {"value": "x"}, {"value": "y", "delay_ms": 5})
        assert response.status_code == 200
        results = response.json()["results"]
        assert [r["status"] for r in results] == ["error", "error"]
        assert {r["code"] for r in results} == {"unknown_topic"}
        for internal in (
            f"{env['KPD_STATE_TOPIC_PREFIX']}schedules",
            f"{env['KPD_STATE_TOPIC_PREFIX']}leader",
            f"{env['KPD_STATE_TOPIC_PREFIX']}pop-state",
        ):
            response = _post(http, internal, {"value": "x"}, {"value": "x", "delay_ms": 5})
            assert response.status_code == 200, response.text
            assert [r["code"] for r in response.json()["results"]] == ["kpd_topic"] * 2
        for own in (env["KPD_BUFFER_TOPIC"], env["KPD_INVALID_TOPIC"]):
            response = _post(http, own, {"value": "x", "delay_ms": 5})
            assert response.status_code == 200, response.text
            assert [r["code"] for r in response.json()["results"]] == ["kpd_topic"]
        # The sidecar is still healthy and delivering.
        wait_delivering(http, new_topic("warm"), timeout_s=15)


def test_hostile_strings_are_4xx_never_500(sidecar):
    hostile_topics = [
        "..%2F..%2Fetc%2Fpasswd",
        "../../etc/passwd",
        "%2e%2e",
        "t" * 250,
        "\u0442\u0435\u0441\u0442",
        "a%00b",
        "a b",
        "%F0%9F%92%A3",
    ]
    hostile_ids = [*hostile_topics, "x" * 129, "x" * 20_000, "%0A", "id%0D%0AX-Injected:%201"]
    with sidecar.client() as http:
        for topic in hostile_topics:
            response = http.post(
                f"/v1/topics/{topic}/messages", json={"messages": [{"value": "x"}]}
            )
            assert 400 <= response.status_code < 500, (topic, response.status_code, response.text)
            assert response.headers["content-type"] == PROBLEM
            assert "code" in response.json()
        for schedule_id in hostile_ids:
            for method in ("GET", "DELETE"):
                response = http.request(method, f"/v1/schedules/{schedule_id}")
                assert 400 <= response.status_code < 500, (schedule_id[:40], response.status_code)
                assert response.headers["content-type"] == PROBLEM
                assert "code" in response.json()
                assert "X-Injected" not in response.headers
        weird = [
            {"value": "\u0000\ud7ff\U0001f4a3", "key": "\u202e\u0000", "delay_ms": 0},
            {"value": "x", "headers": {"\u00e9\U0001f4a3": "\u0000"}, "delay_ms": 0},
        ]
        response = _post(http, "no-such-topic-zz", *weird)
        assert response.status_code == 200 and response.json()["results"][0]["code"] == (
            "unknown_topic"
        )
        response = http.post(
            "/v1/topics/x/messages",
            content=b'{"messages": [{"value": "\\ud800"}]}',
            headers={"content-type": "application/json"},
        )
        assert 400 <= response.status_code < 500, response.text
        assert http.get("/healthz").status_code == 200


def test_immediate_and_delayed_produce_over_http(sidecar, new_topic):
    topic = new_topic("ok")
    with sidecar.client() as http:
        response = _post(
            http,
            topic,
            {"key": "k1", "value": "now", "headers": {"h": "1"}},
            {"value_b64": base64.b64encode(b"\x00\xff").decode(), "delay_ms": 300, "id": "d1"},
        )
        assert response.status_code == 200, response.text
        first, second = response.json()["results"]
        assert first["status"] == "enqueued" and first["offset"] >= 0
        assert second["status"] == "scheduled" and second["id"] == "d1"
        with TopicReader(sidecar.env["KPD_BOOTSTRAP"], topic) as reader:
            now, later = reader.read_count(2, 15)
        assert (now.key(), now.value(), now.headers()) == (b"k1", b"now", [("h", b"1")])
        assert later.value() == b"\x00\xff"
        assert header_dict(later)["kpd-deliver-at"] == str(second["deliver_at_ms"]).encode()
        assert later.timestamp()[1] >= second["deliver_at_ms"]
        wait_for(
            lambda: http.get("/v1/schedules/d1").json()["state"] == "delivered", 10, "delivered"
        )


def test_racing_schedule_calls_answer_the_due_time_that_stands(sidecar, new_topic):
    """The first schedule of an id wins, and so does every call's answer: calls racing with the
    same ids and other due times all answer the due time a GET shows afterwards."""
    topic = new_topic("race")
    base = now_ms() + 600_000
    ids = [f"race-{i}" for i in range(30)]

    def schedule_all(offset_ms: int) -> dict[str, int]:
        with sidecar.client() as http:
            messages = [{"value": "x", "deliver_at_ms": base + offset_ms, "id": i} for i in ids]
            response = _post(http, topic, *messages)
        assert response.status_code == 200, response.text
        return {r["id"]: r["deliver_at_ms"] for r in response.json()["results"]}

    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(schedule_all, (0, 1000, 2000)))
    with sidecar.client() as http:
        standing = {i: http.get(f"/v1/schedules/{i}").json()["deliver_at_ms"] for i in ids}
    assert answers == [standing] * 3
