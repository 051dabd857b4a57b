"""The `kpd` command: it starts a sidecar (`sidecar`), a local Kafka (`devtools`), the Spark
audit (`spark`) or a client verb (`kpd_client`). The top of the import graph: nothing imports it.
"""
