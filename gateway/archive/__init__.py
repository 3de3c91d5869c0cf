"""The archive: finished turns, sessions and group memory kept past Redis in a real database
(PostgreSQL, or an embedded SQLite file), fed from the Redis outbox by one archiver."""
