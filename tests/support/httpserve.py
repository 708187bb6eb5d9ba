"""One way to run a test's stand-in HTTP server: a ThreadingHTTPServer on a daemon thread, and
its stop (shutdown, then close the socket). The SSM, IMDS and package-mirror stand-ins use it."""

from __future__ import annotations

import http.server
import threading


def serve(server: http.server.ThreadingHTTPServer, name: str) -> http.server.ThreadingHTTPServer:
    """Start answering on a daemon thread; each request on its own daemon thread, so a client
    that hangs never holds up the test's teardown."""
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server


def stop(server: http.server.ThreadingHTTPServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()
