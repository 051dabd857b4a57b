"""`kpd audit` takes Kafka bootstrap and topic from the settings of `kpd run` (kpd.toml, KPD_*),
flags win over them; bad settings and bad options stop it with a message, exit status 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from audit_synthlog import build_log, produce_log
from kafka_helpers import unique
from short_jvm import SHORT_LIVED_JVM

from kpd_cli.main import main as kpd

pytestmark = pytest.mark.spark

KPD = str(Path(sys.executable).parent / "kpd")
LENIENT = ["--max-early", "1", "--max-missing", "1", "--max-duplicates", "1"]
LENIENT += ["--max-malformed", "5"]
UNREACHABLE = "127.0.0.1:1"


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No KPD_* variable from the outside, and a working folder without kpd.toml."""
    for name in list(os.environ):
        if name.upper().startswith("KPD_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


@pytest.fixture
def log_topic(kafka_bootstrap, new_topic) -> str:
    topic = new_topic("audit-settings", config={"retention.ms": "-1"})
    produce_log(kafka_bootstrap, topic, build_log(anomalies=True))
    return topic


def audit(tmp_path: Path, *args: str) -> tuple[int, dict]:
    out = tmp_path / unique("out")
    status = kpd(["audit", "--out", str(out), *LENIENT, *args])
    summary_file = out / "summary.json"
    return status, json.loads(summary_file.read_text()) if summary_file.exists() else {}


def check_read(status: int, summary: dict, bootstrap: str, topic: str) -> None:
    assert status == 0, summary
    assert (summary["source"]["bootstrap"], summary["source"]["topic"]) == (bootstrap, topic)
    assert summary["records"]["valid"] == len(build_log(anomalies=True).records)


def test_bootstrap_and_topic_from_environment(
    spark, clean_env, tmp_path, kafka_bootstrap, log_topic
):
    clean_env.setenv("KPD_BOOTSTRAP", kafka_bootstrap)
    clean_env.setenv("KPD_DELIVERY_LOG_TOPIC", log_topic)
    check_read(*audit(tmp_path), kafka_bootstrap, log_topic)


def test_bootstrap_and_topic_from_kpd_toml(spark, clean_env, tmp_path, kafka_bootstrap, log_topic):
    (tmp_path / "kpd.toml").write_text(
        f'bootstrap = "{kafka_bootstrap}"\ndelivery_log_topic = "{log_topic}"\n'
    )
    check_read(*audit(tmp_path), kafka_bootstrap, log_topic)
    # KPD_CONFIG names another file; the environment wins over the file.
    other = tmp_path / "other.toml"
    other.write_text(f'bootstrap = "{UNREACHABLE}"\ndelivery_log_topic = "{log_topic}"\n')
    clean_env.setenv("KPD_CONFIG", str(other))
    clean_env.setenv("KPD_BOOTSTRAP", kafka_bootstrap)
    check_read(*audit(tmp_path), kafka_bootstrap, log_topic)


def test_flags_win_over_settings(spark, clean_env, tmp_path, kafka_bootstrap, log_topic):
    clean_env.setenv("KPD_BOOTSTRAP", UNREACHABLE)
    clean_env.setenv("KPD_DELIVERY_LOG_TOPIC", log_topic)
    check_read(*audit(tmp_path, "--bootstrap", kafka_bootstrap), kafka_bootstrap, log_topic)
    clean_env.setenv("KPD_BOOTSTRAP", kafka_bootstrap)
    clean_env.setenv("KPD_DELIVERY_LOG_TOPIC", unique("absent"))
    check_read(*audit(tmp_path, "--topic", log_topic), kafka_bootstrap, log_topic)
    # The audit's own KPD_SPARK_* variables are not "unknown settings".
    clean_env.setenv("KPD_SPARK_TOKEN_PROVIDER_VERSION", "4.0.0")
    check_read(*audit(tmp_path, "--topic", log_topic), kafka_bootstrap, log_topic)


def test_real_cli_process_reads_the_environment(kafka_bootstrap, log_topic, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("KPD_")}
    env |= {"KPD_BOOTSTRAP": kafka_bootstrap, "KPD_DELIVERY_LOG_TOPIC": log_topic}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["JAVA_TOOL_OPTIONS"] = SHORT_LIVED_JVM
    out = tmp_path / "out"
    done = subprocess.run(
        [KPD, "audit", "--out", str(out), "--master", "local[1]", "--driver-memory", "512m",
         *LENIENT],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    check_read(0, json.loads((out / "summary.json").read_text()), kafka_bootstrap, log_topic)
    assert f"reading Kafka topic {log_topic} from {kafka_bootstrap}" in done.stderr


def test_missing_topic_and_unreachable_kafka_fail_fast(
    clean_env, tmp_path, kafka_bootstrap, capsys
):
    absent = unique("absent")
    status, summary = audit(tmp_path, "--bootstrap", kafka_bootstrap, "--topic", absent)
    assert (status, summary) == (1, {})  # an absent topic is no empty, passing log
    assert (
        f"topic {absent!r} does not exist on Kafka at {kafka_bootstrap}" in capsys.readouterr().err
    )
    status, _ = audit(tmp_path, "--bootstrap", UNREACHABLE, "--topic", absent)
    assert status == 1
    assert f"cannot reach Kafka at {UNREACHABLE}" in capsys.readouterr().err
    # Nothing set: the default bootstrap of `kpd run`.
    clean_env.setenv("KPD_DELIVERY_LOG_TOPIC", absent)
    assert audit(tmp_path)[0] == 1
    assert "Kafka at 127.0.0.1:9092" in capsys.readouterr().err


BAD_SETTINGS = [
    ({"KPD_BOOTSTRAP": "no port here"}, None, "KPD_BOOTSTRAP"),
    ({"KPD_BOOTSTRAP": "h:1," * 2000}, None, "KPD_BOOTSTRAP"),
    ({"KPD_DELIVERY_LOG_TOPIC": "bad topic!"}, None, "KPD_DELIVERY_LOG_TOPIC"),
    ({"KPD_DELIVERY_LOG_TOPIC": "t" * 250}, None, "KPD_DELIVERY_LOG_TOPIC"),
    ({"KPD_NOT_A_SETTING": "1"}, None, "unknown setting(s) KPD_NOT_A_SETTING"),
    ({"KPD_CONFIG": "/nonexistent/kpd.toml"}, None, "KPD_CONFIG names '/nonexistent/kpd.toml'"),
    ({}, "bootstrap = [unclosed", "cannot read settings"),
    ({}, 'bootstrap = "x:1"\nfavourite_colour = "red"', "favourite_colour"),
    ({}, "bootstrap = 9092", "KPD_BOOTSTRAP"),
]


@pytest.mark.parametrize(("env", "toml", "named"), BAD_SETTINGS)
def test_bad_settings_stop_with_a_message(clean_env, tmp_path, capsys, env, toml, named):
    for name, value in env.items():
        clean_env.setenv(name, value)
    if toml is not None:
        (tmp_path / "kpd.toml").write_text(toml)
    assert audit(tmp_path) == (1, {})
    err = capsys.readouterr().err
    assert "kpd audit: error: bad settings:" in err and named in err, err
    assert "Traceback" not in err


def test_bad_settings_in_a_real_process_print_no_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("KPD_")}
    env["KPD_BOOTSTRAP"] = "no port here"
    done = subprocess.run([KPD, "audit", "--out", str(tmp_path / "out")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1
    assert "invalid setting KPD_BOOTSTRAP" in done.stderr and "Traceback" not in done.stderr


BAD_OPTIONS = [
    (["--late-threshold-ms", "-1"], "--late-threshold-ms"),
    (["--late-threshold-ms", "soon"], "--late-threshold-ms"),
    (["--late-threshold-ms", "9" * 30], "--late-threshold-ms"),
    (["--grace-ms", "-5"], "--grace-ms"),
    (["--list-limit", "1000000000"], "--list-limit"),
    (["--max-late", "-2"], "--max-late"),
    (["--max-missing", "x"], "--max-missing"),
    (["--since", "-5"], "--since"),
    (["--since", "9" * 20], "--since"),
    (["--until", "yesterday"], "--until"),
    (["--since", "2026-01-02", "--until", "2026-01-01"], "--since is after --until"),
    (["--topic", "bad topic"], "--topic"),
    (["--topic", "t" * 250], "--topic"),
    (["--topic", "../../etc"], "--topic"),
    (["--bootstrap", ""], "--bootstrap"),
    (["--bootstrap", "a b:1"], "--bootstrap"),
    (["--bootstrap", "h:1\n--topic"], "--bootstrap"),
    (["--driver-memory", "lots"], "--driver-memory"),
    (["--kafka-option", "no-value"], "--kafka-option"),
    (["--input", "/nonexistent/log.jsonl"], "no such file"),
]


@pytest.mark.parametrize(("args", "named"), BAD_OPTIONS)
def test_bad_options_exit_1_naming_the_option(tmp_path, capsys, args, named):
    assert kpd(["audit", "--out", str(tmp_path / "out"), *args]) == 1
    err = capsys.readouterr().err
    assert named in err and "usage: kpd audit" in err, err
    assert not (tmp_path / "out").exists()
