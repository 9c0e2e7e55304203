"""Redis backends for several replicas: the session store (``RedisSessionStore``, KAOS ``RedisMemory``) and the
formation job queue. Long-term memory stays in SQLite or PostgreSQL.

URLs: ``redis://[:password@]host:6379/0?prefix=memlane:`` (``rediss://`` for TLS); ``prefix``
namespaces every key (the service gives each tenant its own).

Its row in :data:`memlane.registry.BACKENDS` (``redis``, extra ``redis``; schemes ``redis``,
``rediss``, ``unix``) names ``sessions.RedisSessionStore``, ``jobs.RedisJobStore``,
``url.tenant_url`` (a key prefix per service tenant), the driver (redis-py) and its
``ConnectionError`` / ``TimeoutError`` as "server unreachable". It has no ``open_stores``.
"""
