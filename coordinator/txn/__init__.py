"""The transaction coordinator: per-shard metadata, its log, and phase-two marker writing."""
