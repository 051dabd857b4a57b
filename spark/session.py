"""The audit's Spark session: a local one of our own, with Spark's Kafka connector from the cache.

The connector jars are fetched once from Maven Central into the kpd cache (`$KPD_CACHE_DIR`, else
`~/.cache/kpd`) and reused afterwards. Under spark-submit the session is the submitter's.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from pyspark.sql import SparkSession

KAFKA_CONNECTOR = "spark-sql-kafka-0-10_2.13"
TOKEN_PROVIDER = "spark-token-provider-kafka-0-10_2.13"
# Used only when Maven Central lacks the connector of the exact Spark version (seen with pyspark
# 4.3.0: neither it nor the 4.1+/4.2 token providers are published). Override by environment.
CONNECTOR_VARIABLE = "KPD_SPARK_KAFKA_VERSION"
TOKEN_PROVIDER_VARIABLE = "KPD_SPARK_TOKEN_PROVIDER_VERSION"
FALLBACK_CONNECTOR = os.environ.get(CONNECTOR_VARIABLE, "4.2.0")
FALLBACK_TOKEN_PROVIDER = os.environ.get(TOKEN_PROVIDER_VARIABLE, "4.0.0")


def connector_jars(spark_version: str) -> list[str]:
    """Jars of Spark's Kafka connector, from the kpd cache (Maven Central on the first run).

    Jars Spark already ships (scala-library, slf4j, ...) are left out: the same classes twice on
    the class path, in different versions, is how odd linkage errors start.
    """
    from foundation.maven import COMPLETE_MARKER, Artifact, MavenError, cache_root, fetch_jars

    g = "org.apache.spark"
    exact = (f"spark-kafka-{spark_version}", [Artifact(g, KAFKA_CONNECTOR, spark_version)])
    compat = (
        f"spark-kafka-{spark_version}-compat-{FALLBACK_CONNECTOR}-{FALLBACK_TOKEN_PROVIDER}",
        [
            Artifact(g, KAFKA_CONNECTOR, FALLBACK_CONNECTOR, exclusions=((g, TOKEN_PROVIDER),)),
            # Spark ships its own Hadoop client; the token provider would add a second one.
            Artifact(
                g,
                TOKEN_PROVIDER,
                FALLBACK_TOKEN_PROVIDER,
                exclusions=(("org.apache.hadoop", "hadoop-client-runtime"),),
            ),
        ],
    )
    cached = [cache_root() / n for n, _ in (exact, compat)]
    folder = next((f for f in cached if (f / COMPLETE_MARKER).exists()), None)
    if folder is None:
        try:
            folder = fetch_jars(*exact)
        except MavenError:
            print(
                f"[kpd audit] {KAFKA_CONNECTOR}:{spark_version} is not on Maven Central; using "
                f"{FALLBACK_CONNECTOR} with token provider {FALLBACK_TOKEN_PROVIDER}",
                file=sys.stderr,
            )
            folder = fetch_jars(*compat)
    return [str(j) for j in sorted(folder.glob("*.jar")) if _base(j.name) not in _spark_jars()]


def _base(jar: str) -> str:
    """`kafka-clients-3.9.2.jar` → `kafka-clients`."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)*\.jar$", "", jar)


def _spark_jars() -> set[str]:
    import pyspark

    home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)
    return {_base(j.name) for j in (Path(home) / "jars").glob("*.jar")}


def local_session(
    master: str, kafka: bool, driver_memory: str = "2g", conf: dict[str, str] | None = None
) -> SparkSession:
    """A session of our own; with `kafka`, the connector jars come from the cache."""
    import pyspark

    builder = (
        SparkSession.builder.appName("kpd-audit")
        .master(master)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")  # our progress lines instead
        # One machine: 200 shuffle partitions (the default) mostly add scheduling overhead.
        .config("spark.sql.shuffle.partitions", "16")
        # The audit caches the log once; compressing that cache cost more time than it saved
        # memory in bench/audit.py (the cache spills to disk when it does not fit anyway).
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    if kafka:
        builder = builder.config("spark.jars", ",".join(connector_jars(pyspark.__version__)))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
