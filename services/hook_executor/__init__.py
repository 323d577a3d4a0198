"""hook-executor: runs one family's abx-plugins hooks on snapshots, pulled from JetStream."""
