"""Pop leases, acks, retry and dead-letter."""
