"""memlane as a shared service: the HTTP API (``memlane serve``), API keys, and the MCP server
(``memlane mcp``). Needs the ``server`` extra (``pip install 'memlane[server]'``).

* :mod:`memlane.service.hub` — one engine per tenant, rebuilt on a configuration reload.
* :mod:`memlane.service.auth` — API keys (tenant, optional user, read-only), rate limits.
* :mod:`memlane.service.app` — the FastAPI application and its routes.
* :mod:`memlane.service.mcp` — the MCP server (stdio and streamable HTTP).
"""
