"""result-projector: the only writer of ArchiveResult, Process and Binary rows (idempotent upserts)."""
