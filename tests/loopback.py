"""A loopback HTTP server that answers every GET with one JSON body and records each path: the
schema tests use it to prove that no remote `$ref` is ever fetched (its hits stay empty)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def schema_server(body: bytes) -> Iterator[tuple[str, list[str]]]:
    """(a schema URL on the server, the paths it was asked for)."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/schema.json", hits
    finally:
        server.shutdown()
        server.server_close()
