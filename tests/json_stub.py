"""The base of the unit tests' stand-in sidecars: a quiet HTTP handler that answers JSON."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


class JsonHandler(BaseHTTPRequestHandler):
    def answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass
