"""Developer tooling: a local Kafka from Maven Central, brokers and sidecars for tests.

Not imported by the server; tests, benches and `kpd kafka` use it.
"""
