"""The coordinator node: owns the league state, answers match requests, takes results, decides snapshots and resets, persists history in SQLite."""
