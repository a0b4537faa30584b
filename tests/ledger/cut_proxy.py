"""A loopback TCP proxy to PostgreSQL that loses a connection right after a chosen statement was sent.

Armed with a marker (``b"COMMIT"``), it forwards the first client message holding it, then drops
every answer the server sends on that connection: the client waits for its ``COMMIT``'s answer
while the server carries it out. :meth:`CutProxy.cut` then ends the server's process with
``pg_terminate_backend`` from another connection, once it has finished the statement, and closes
the client's side, which sees the connection lost with no answer: the write committed, and the
client cannot know. While ``refusing`` is set, new connections are closed at once (the database
cannot be reached).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from sqlalchemy import create_engine, make_url, text

from tests.conftest import PG_URL


class CutProxy:
    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.marker: bytes | None = None
        self.refusing = False
        self.sent = threading.Event()  # the marked message went to the server
        self._marked: socket.socket | None = None  # the server side of the connection marked last
        self._dropping: set[socket.socket] = set()  # clients whose answers are dropped, for good
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        """``url`` through this proxy."""
        return make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    def arm(self, marker: bytes) -> None:
        """Lose the next connection that sends ``marker``, once it has sent it."""
        self.sent.clear()
        self.marker = marker

    def _accept(self) -> None:
        target = make_url(PG_URL)
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            server = socket.create_connection((target.host or "127.0.0.1", target.port or 5432))
            threading.Thread(target=self._up, args=(client, server), daemon=True).start()
            threading.Thread(target=self._down, args=(client, server), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        """Client to server; the marked message is forwarded, and its connection marked to lose its answers."""
        try:
            while data := client.recv(65536):
                marked = False
                with self._lock:
                    if self.marker is not None and self.marker in data:
                        self._dropping.add(client)
                        self._marked, self.marker, marked = server, None, True
                server.sendall(data)
                if marked:
                    self.sent.set()
        except OSError:
            pass
        finally:
            _close(server)

    def _down(self, client: socket.socket, server: socket.socket) -> None:
        """Server to client; nothing more once the connection is marked."""
        try:
            while data := server.recv(65536):
                if client not in self._dropping:
                    client.sendall(data)
        except OSError:
            pass
        finally:
            _close(client)

    def cut(self, timeout_s: float = 10.0) -> None:
        """After the marked message was sent: end its server process once it is idle (the statement done)."""
        assert self.sent.wait(timeout_s), "the marked statement was never sent"
        assert self._marked is not None
        local_port = self._marked.getsockname()[1]
        admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                deadline = time.monotonic() + timeout_s
                find = text("SELECT pid, state FROM pg_stat_activity WHERE client_port = :p")
                while True:
                    pid, state = conn.execute(find, {"p": local_port}).one()
                    if state == "idle":  # COMMIT carried out and answered (the answer was dropped)
                        break
                    assert time.monotonic() < deadline, f"the backend stayed {state!r}"
                    time.sleep(0.01)
                assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
        finally:
            admin.dispose()

    def close(self) -> None:
        _close(self.listener)


def _close(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@contextmanager
def cut_proxy() -> Iterator[CutProxy]:
    proxy = CutProxy()
    try:
        yield proxy
    finally:
        proxy.close()
