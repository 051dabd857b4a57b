"""A kpd sidecar: the worker processes and their supervisor (the composition root: it wires
foundation, delay_service, revive, cluster and api)."""
