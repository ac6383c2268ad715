"""Node-local state: allocations and requeues (SQLite)."""
