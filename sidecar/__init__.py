"""A kpd sidecar: the worker processes, their membership in the shard group, and the roles each
runs (the composition root: it wires foundation, delay_service, revive and api)."""
