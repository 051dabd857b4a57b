"""Cross-shard routing: which worker serves a call, scatter and gather over shards, forwarding
to the sidecar that owns a shard, and the long polls waiting for records."""
