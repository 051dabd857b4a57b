"""The foundation: settings, clock, Kafka clients, RocksDB store, topics.

It imports nothing else of kpd; every other package builds on it.
"""
