"""SQLite backends: one WAL database file for sessions and long-term memory."""
