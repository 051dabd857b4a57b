"""The shard group: who leads which shard (membership, owners), who watches whom and takes a
silent member's shards over early (ring, links, successor), and what runs on a worker for the
shards it leads and follows (conductor, shard_roles, standby). `sidecar` wires it and runs it.
"""
