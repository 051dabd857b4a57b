"""Spark delivery audit of the kpd delivery log (`kpd audit`, or `spark-submit spark/audit.py`)."""
