"""Running the app under uvicorn: in the foreground (``attnplan serve``) or in a thread (tests).

The listening socket is bound here, before uvicorn starts, so that a port in use is one clear
error and a test can bind port 0 and learn the free port without a race. Every server runs
``connections.guarded_protocol`` (header, body and request deadlines, connection cap) and ``logs.install``
(rate-limited error logs, access lines without query strings).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Optional

import uvicorn

from attnplan.errors import SetupError
from attnplan.policy import InvalidInputError

from . import logs
from .connections import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, MAX_CONNECTIONS, REQUEST_TIMEOUT_S, guarded_protocol, nofile_cap


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP (not the default 0) so asyncio sets TCP_NODELAY on accepted connections:
    # without it uvicorn's separate header and body writes meet the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise InvalidInputError("port", f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def http_impl() -> str:
    """``ATTNPLAN_HTTP``: ``auto`` (httptools when installed, else h11), ``h11`` or ``httptools``."""
    import os

    wanted = os.environ.get("ATTNPLAN_HTTP", "auto").strip().lower()
    return wanted if wanted in ("h11", "httptools") else "auto"


def event_loop() -> str:
    """uvloop where installed (``ATTNPLAN_LOOP=asyncio`` opts out), else asyncio's own loop."""
    import importlib.util
    import os

    wanted = os.environ.get("ATTNPLAN_LOOP", "auto").strip().lower()
    if wanted == "asyncio" or (wanted == "auto" and importlib.util.find_spec("uvloop") is None):
        return "asyncio"
    return "uvloop"


def config(app: Any, *, log_level: str = "info", access_log: bool = True, max_connections: int = MAX_CONNECTIONS,
           header_timeout: float = HEADER_TIMEOUT_S, body_timeout: float = BODY_TIMEOUT_S,
           request_timeout: float = REQUEST_TIMEOUT_S) -> uvicorn.Config:
    # One worker: the node's facts and the answer caches live in this process. The cap stays
    # under the descriptor limit, so accept() never fails with EMFILE.
    protocol = guarded_protocol(nofile_cap(max_connections), header_timeout, body_timeout, request_timeout,
                                http=http_impl())
    cfg = uvicorn.Config(app, log_level=log_level, access_log=access_log, server_header=False, http=protocol,
                         proxy_headers=False, timeout_graceful_shutdown=5, timeout_keep_alive=5, loop=event_loop())
    logs.install()  # after uvicorn.Config, which (re)configures logging
    return cfg


def serve(app: Any, host: str, port: int, *, log_level: str = "info", access_log: bool = True,
          banner: str = "", max_connections: int = MAX_CONNECTIONS, header_timeout: float = HEADER_TIMEOUT_S,
          body_timeout: float = BODY_TIMEOUT_S, request_timeout: float = REQUEST_TIMEOUT_S) -> None:
    sock = bind(host, port)
    server = uvicorn.Server(config(app, log_level=log_level, access_log=access_log, max_connections=max_connections,
                                   header_timeout=header_timeout, body_timeout=body_timeout,
                                   request_timeout=request_timeout))  # configures logging
    # uvicorn names no address when handed a socket: say where we listen, and on what terms.
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    logging.getLogger("uvicorn.error").info("attnplan listening on http://%s:%d%s", shown, sock.getsockname()[1],
                                            f" ({banner})" if banner else "")
    server.run(sockets=[sock])


class BackgroundServer:
    """A real uvicorn server on a free loopback port, in a thread::

        with BackgroundServer(create_app(...)) as srv:
            httpx.get(srv.url + "/healthz")
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, log_level: str = "warning",
                 access_log: bool = False, max_connections: int = MAX_CONNECTIONS,
                 header_timeout: float = HEADER_TIMEOUT_S, body_timeout: float = BODY_TIMEOUT_S,
                 request_timeout: float = REQUEST_TIMEOUT_S):
        self.sock = bind(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        self.url = f"http://{host}:{self.port}"
        self.config = config(app, log_level=log_level, access_log=access_log, max_connections=max_connections,
                             header_timeout=header_timeout, body_timeout=body_timeout,
                             request_timeout=request_timeout)
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True,
                                       name=f"uvicorn-{self.port}")

    def __enter__(self) -> "BackgroundServer":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise SetupError(f"uvicorn did not start on port {self.port} within 20 s: see its log above (a port in use, "
                                 "a bad certificate) and start it again")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Optional[BaseException]) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
