"""Settings come from kpd.toml and KPD_* variables; bad values name the setting and its bounds."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from foundation import config
from foundation.config import SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    import os

    for name in list(os.environ):
        if name.startswith("KPD_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_defaults_match_design() -> None:
    s = load_settings()
    assert s.bootstrap == "127.0.0.1:9092"
    assert (s.http_host, s.http_port) == ("127.0.0.1", 8080)
    assert s.api_token is None
    assert s.buffer_topic == "kpd.delay"
    assert s.group("orders").retry_topic == "kpd.retry.orders"
    assert s.group("orders").dlq_topic == "kpd.dlq.orders"
    assert s.group("orders").max_deliveries == 16
    assert s.group("orders").backoff_ms[:3] == [10_000, 30_000, 60_000]
    assert s.group("orders").backoff_ms[-1] == 7_200_000
    assert s.group("orders").leases == "durable"
    assert s.data_dir == Path(".kpd/data") / s.node_id
    assert s.standby_schedules == "all"
    assert s.ingest_behind_delivery_ms == 20


def test_retry_and_dlq_names_follow_the_state_topic_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KPD_STATE_TOPIC_PREFIX", "team-a.kpd.")
    monkeypatch.setenv("KPD_GROUPS__named__DLQ_TOPIC", "billing-dead")
    s = load_settings()
    assert s.group("orders").retry_topic == "team-a.kpd.retry.orders"
    assert s.group("orders").dlq_topic == "team-a.kpd.dlq.orders"
    assert s.group("named").retry_topic == "team-a.kpd.retry.named"
    assert s.group("named").dlq_topic == "billing-dead"  # an explicit name is kept as given


def test_a_group_s_settings_are_resolved_once_and_the_resolved_ones_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config, "MAX_RESOLVED_GROUPS", 3)
    s = load_settings()
    orders = s.group("orders")
    assert s.group("orders") is orders  # asked per request and per copy: no copy each time
    assert s.for_worker(1).group("orders").retry_topic == "kpd.retry.orders"
    with pytest.raises(ValidationError):
        orders.max_deliveries = 1  # shared by every caller: nobody may change it
    for name in ("a", "b", "c"):  # group names come from URLs: the fourth empties the cache
        s.group(name)
    again = s.group("orders")
    assert again is not orders and again == orders


def test_environment_overrides_toml(monkeypatch: pytest.MonkeyPatch, clean_env: Path) -> None:
    (clean_env / "kpd.toml").write_text(
        'http_port = 9000\nnode_id = "from-file"\n[groups.orders]\nmax_deliveries = 3\n'
    )
    monkeypatch.setenv("KPD_HTTP_PORT", "9100")
    s = load_settings()
    assert s.http_port == 9100  # env wins
    assert s.node_id == "from-file"  # file still read
    assert s.group("orders").max_deliveries == 3
    assert s.group("other").max_deliveries == 16


def test_nested_group_setting_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KPD_GROUPS__billing__BACKOFF_MS", "[1000, 2000]")
    assert load_settings().group("billing").backoff_ms == [1000, 2000]
    monkeypatch.setenv("KPD_GROUPS__billing__LEASES", "memory")
    assert load_settings().group("billing").leases == "memory"
    assert load_settings().group("other").leases == "durable"


def test_secrets_are_not_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KPD_API_TOKEN", "s3cret-token")
    s = load_settings()
    assert s.api_token is not None and s.api_token.get_secret_value() == "s3cret-token"
    assert "s3cret-token" not in repr(s)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("KPD_HTTP_PORT", "70000", "less than or equal to 65535"),
        ("KPD_HTTP_PORT", "0", "greater than or equal to 1"),
        ("KPD_HTTP_PORT", "eighty", "valid integer"),
        ("KPD_BOOTSTRAP", "localhost", "host:port"),
        ("KPD_BOOTSTRAP", "a:1,b:99999", "host:port"),
        ("KPD_NODE_ID", "bad id!", "should match pattern"),
        ("KPD_NODE_ID", "x" * 65, "should match pattern"),
        ("KPD_BUFFER_TOPIC", "no spaces allowed", "should match pattern"),
        ("KPD_MAX_DELAY_MS", "-1", "greater than or equal to 0"),
        ("KPD_MAX_RECORD_BYTES", "10", "greater than or equal to 1024"),
        ("KPD_LOG_LEVEL", "LOUD", "should match pattern"),
        ("KPD_GROUPS__g__MAX_DELIVERIES", "0", "greater than or equal to 1"),
        ("KPD_GROUPS__g__INVISIBLE_MS", "999", "greater than or equal to 1000"),
        ("KPD_GROUPS__g__BACKOFF_MS", "[]", "at least 1 item"),
        ("KPD_GROUPS__g__BACKOFF_MS", "not json", "JSON"),
        ("KPD_GROUPS__g__LEASES", "lazy", "'durable' or 'memory'"),
        ("KPD_STANDBY_SCHEDULES", "some", "'all' or 'next'"),
        ("KPD_INGEST_BEHIND_DELIVERY_MS", "-1", "greater than or equal to 0"),
        ("KPD_INGEST_BEHIND_DELIVERY_MS", "10001", "less than or equal to 10000"),
        ("KPD_INGEST_BEHIND_DELIVERY_MS", "1e9", "valid integer"),
        ("KPD_STANDBY_SCHEDULES", "ALL", "'all' or 'next'"),
        ("KPD_TYPO_SETTING", "1", "Extra inputs are not permitted"),
    ],
)
def test_bad_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as error:
        load_settings()
    message = str(error.value)
    assert expected in message
    assert name.upper().split("__")[0] in message.upper()


def test_bad_toml_is_a_clear_error(clean_env: Path) -> None:
    (clean_env / "kpd.toml").write_text("http_port = [unclosed\n")
    with pytest.raises(SettingsError, match="cannot read settings"):
        load_settings()


def test_unknown_key_in_toml_is_rejected(clean_env: Path) -> None:
    (clean_env / "kpd.toml").write_text("htpp_port = 1\n")
    with pytest.raises(SettingsError, match="htpp_port"):
        load_settings()


def test_missing_config_file_named_by_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KPD_CONFIG", "/nonexistent/kpd.toml")
    with pytest.raises(SettingsError, match="KPD_CONFIG"):
        load_settings()
