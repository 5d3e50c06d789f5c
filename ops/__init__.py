"""Operations: metrics, health, structured logs, worker heartbeats and data retention (docs/operations.md)."""
