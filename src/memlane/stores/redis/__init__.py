"""Redis backends for several replicas: the session store (KAOS ``RedisMemory``) and the
formation job queue. Long-term memory stays in SQLite or PostgreSQL.

URLs: ``redis://[:password@]host:6379/0?prefix=memlane:`` (``rediss://`` for TLS); ``prefix``
namespaces every key (the service gives each tenant its own).
"""
