# Images for docker compose: `sidecar` (kpd run) and `audit` (kpd audit with Spark + Java).
# The compiled core (native/) is built into a wheel with Rust, which the sidecar image lacks.
FROM python:3.11-slim AS native
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl ca-certificates gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
ENV PATH=/root/.cargo/bin:$PATH
COPY native /native
RUN pip install --no-cache-dir maturin && maturin build --release -m /native/Cargo.toml -o /wheels

FROM python:3.11-slim AS sidecar
WORKDIR /app
COPY --from=native /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl
COPY pyproject.toml README.md ./
COPY foundation foundation
COPY sidecar sidecar
COPY kpd_cli kpd_cli
COPY kpd_client kpd_client
COPY devtools devtools
COPY delay_service delay_service
COPY revive revive
COPY api api
COPY cluster cluster
COPY spark spark
RUN pip install --no-cache-dir .
ENV KPD_HTTP_HOST=0.0.0.0 KPD_DATA_DIR=/data KPD_LOG_FORMAT=json
VOLUME /data
EXPOSE 8080
CMD ["kpd", "run"]

FROM sidecar AS audit
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir '.[audit]'
# Fetch Spark's Kafka connector once, at build time, into the image's cache.
ENV KPD_CACHE_DIR=/opt/kpd-cache
RUN python -c "import pyspark, spark.audit as a; a.connector_jars(pyspark.__version__)"
CMD ["kpd", "audit", "--bootstrap", "kafka:9092", "--out", "/reports"]
