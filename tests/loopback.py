"""A real HTTP server on 127.0.0.1 for provider tests: ``with serve(Handler, state) as url``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What a fake endpoint answers: status, JSON body (or raw bytes), extra headers."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class LoopbackServer(ThreadingHTTPServer):
    """Handlers reach the test's state as ``self.server.state``."""

    daemon_threads = False  # server_close() joins the handler threads
    block_on_close = True

    def __init__(self, handler: type[BaseHTTPRequestHandler], state: Any) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.state = state

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is expected in some tests


class JsonHandler(BaseHTTPRequestHandler):
    """Quiet handler with JSON helpers; subclasses implement ``do_POST``."""

    server: LoopbackServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def read_json(self) -> Any:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        return json.loads(raw) if raw else None

    def _send(self, reply: Reply) -> None:
        data = json.dumps(reply.body).encode() if not isinstance(reply.body, bytes) else reply.body
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler], state: Any = None) -> Iterator[str]:
    """Run the server on a free port; yields ``http://127.0.0.1:PORT``; shuts it down and joins it."""
    httpd = LoopbackServer(handler, state)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
