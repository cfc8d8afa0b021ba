"""gunicorn's threaded worker, where no thread ever waits for a client's request.

gunicorn's ``gthread`` worker hands a connection to a pool thread as soon as its first byte
arrives, and the thread then reads the rest of the request in blocking mode, with no deadline:
``threads`` clients that send one byte, or drip a header or a body, hold every thread, and no
one else is answered until they leave.  :class:`BufferedThreadWorker` keeps everything else of
gunicorn (arbiter, signals and drain, parser, access log, thread pool, keep-alive) and changes
where and how long a request is read:

* **Never waited for on a thread.**  A connection waits in the worker's poller until it has
  data (gthread gives a new one to a thread at once, which waits up to 5 s for its first byte).
  The event loop then reads what has arrived, without blocking, into the connection's buffer: while
  the request is not whole (the head, then a body of at most ``max_body`` bytes, by
  ``Content-Length`` or chunked), the connection goes back to the poller; once it is, gunicorn's
  parser reads it from memory.  A slow client costs a buffer, not a thread, and a normal
  request costs the event loop no more than under gthread.  Pipelined requests are taken one
  at a time, each once it is whole.
* **A deadline for the whole request.**  It must arrive within ``request_timeout`` seconds of
  the connection's accept, or on a kept-alive connection of its next request's first byte;
  otherwise the client gets 408 and the connection is closed.  An idle kept-alive connection is
  closed after gunicorn's ``keepalive`` seconds as before.
* **Limits answered here.**  A request line over gunicorn's ``limit_request_line`` gets 414, a
  head over ``max_head`` bytes 431 (gunicorn's parser answers the other limits); a declared body over
  ``max_body`` bytes gets 413 (after the body, up to ``drain_limit`` bytes, was read and dropped,
  so that the client reads the answer instead of a reset; at once for ``Expect: 100-continue``
  or a longer body); a chunked body over ``max_body`` gets 413.  These answers are JSON
  (``{"error", "message", "status"}``, as the shop's own errors) and close the connection.
* **Writes never wait either.**  A thread gathers an answer (head and body, up to 256 KiB at a
  time), sends what the kernel takes in one call and queues the rest; the
  event loop writes it out before the connection's next request is read.  A client that does
  not take its answer within ``request_timeout`` seconds loses the connection; it never holds
  a thread.
* **Short requests never leave the loop.**  A whole request whose target starts with one of
  ``loop_paths`` (the shop's JSON API: a few hundred microseconds of in-memory work) is
  parsed, answered and logged on the event loop: handing it to a thread and back (a queue, a
  wake-up pipe, two poller changes, the GIL passed twice) cost as much CPU as the answer itself.
  Reading never waits and writes are queued, so a request served on the loop waits for no
  client; it delays the loop by its own work only, which is why only routes of bounded work
  belong there.  A pipelined request after one served on the loop waits for the loop's next
  round, behind the other connections' events.
* **Closing off the loop.**  gunicorn lingers on a closed connection for up to 2 s, reading
  what the client still sends, inside its main loop; here the lingering connection waits in the
  poller, so a client that never closes its side cannot stall everyone else.

Connections are still capped by gunicorn's ``worker_connections`` (1000); slow ones are closed
at their deadline, so holding that many needs a steady stream of new connections.

Why this and not another server: gevent or eventlet workers also keep slow clients off the
threads, but monkey-patch the process and still set no read deadline; waitress buffers
requests the same way but has only an inactivity timeout and no SIGTERM drain; a reverse proxy
(nginx) in front would do it all but is another program to ship and run.  This worker relies on
gunicorn's ``gthread`` internals (``TConn``, ``enqueue_req``, ``finish_request``), which is why
the dependency is pinned to gunicorn 27.
"""

from __future__ import annotations

import contextlib
import errno
import json
import re
import selectors
import socket
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, TConn, ThreadWorker

__all__ = ["BufferedThreadWorker", "RequestFrame", "frame_request", "worker_class"]

_CLOSE_LINGER_S = 2.0  # how long a closed connection is drained (gunicorn's close_graceful)
_CLOSE_DRAIN = 64 * 1024
_RECV = 65536
_MORE = object()  # a thread's answer: the request is not whole yet, wait in the poller again
_MAX_QUEUED = 16 << 20  # bytes of answers queued for one connection (far above any page)
_HOLD_MAX = 256 * 1024  # bytes of an answer gathered before they are sent
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_EXPECT = re.compile(rb"\r\nexpect:[ \t]*100-continue[ \t]*(?=\r\n)", re.IGNORECASE)
_REASONS = {408: "Request Timeout", 413: "Request Entity Too Large", 414: "Request-URI Too Long",
            431: "Request Header Fields Too Large"}


# --------------------------------------------------------------------------- framing
@dataclass(frozen=True)
class RequestFrame:
    """Where the first request of a buffer stands.

    Attributes:
        state: ``"more"`` (incomplete), ``"ready"`` (``buf[:end]`` is one whole request, or a
            request gunicorn's parser will refuse without reading more), ``"continue"`` (the
            head asks for ``100 Continue`` and the body has not come), ``"drain"`` (a declared
            body over the limit: drop ``drop`` bytes after ``end``, then answer 413) or
            ``"refuse"`` (answer ``status`` and close).
        end: Bytes of the head (``drain``) or of the whole request (``ready``).
        status: The status of a refusal (``refuse``, ``drain``).
        drop: Body bytes to read and drop (``drain``).
    """

    state: str
    end: int = 0
    status: int = 0
    drop: int = 0


def _head_fields(head: bytes) -> tuple[list[bytes], list[bytes], bool]:
    """Content-Length values, Transfer-Encoding values and whether 100-continue is expected."""
    lengths, codings, expect = [], [], False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip()
        if name == b"content-length":
            lengths.append(value)
        elif name == b"transfer-encoding":
            codings.append(value.lower())
        elif name == b"expect":
            expect = value.lower() == b"100-continue"
    return lengths, codings, expect


def _chunked_end(buf: bytes | bytearray, pos: int, max_body: int) -> RequestFrame:
    """The frame of a chunked body starting at ``pos`` (a malformed one is left to gunicorn)."""
    body = 0
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return RequestFrame("more") if len(buf) - pos <= 1024 else RequestFrame("ready", len(buf))
        token = bytes(buf[pos:eol]).split(b";", 1)[0].strip()
        if not _HEX.fullmatch(token):
            return RequestFrame("ready", len(buf))
        size = int(token, 16)
        body += size
        if body > max_body:
            return RequestFrame("refuse", status=413)
        if size == 0:
            if buf[eol + 2:eol + 4] == b"\r\n":
                return RequestFrame("ready", eol + 4)
            trailers = buf.find(b"\r\n\r\n", eol + 2)
            return RequestFrame("ready", trailers + 4) if trailers >= 0 else RequestFrame("more")
        pos = eol + 2 + size + 2
        if len(buf) < pos:
            return RequestFrame("more")
        if buf[pos - 2:pos] != b"\r\n":
            return RequestFrame("ready", len(buf))


def frame_request(buf: bytes | bytearray, *, max_head: int, max_body: int, drain_limit: int,
                  max_line: int = 8190) -> RequestFrame:
    """How far the first HTTP/1.x request in ``buf`` has arrived (a request line over
    ``max_line`` bytes gets 414, a head over ``max_head`` 431, as gunicorn's own parser would).

    Framing the parser would refuse (two lengths, a length that is not a number, a coding
    other than a final ``chunked``, a length beside a coding) is ``ready`` at once: gunicorn
    answers 400 from what is there.

    Example:
        >>> limits = {"max_head": 1024, "max_body": 10, "drain_limit": 100}
        >>> frame_request(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n", **limits).state
        'more'
        >>> frame_request(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\nGET", **limits)
        RequestFrame(state='ready', end=27, status=0, drop=0)
        >>> frame_request(b"POST / HTTP/1.1\\r\\nContent-Length: 5\\r\\n\\r\\nabc", **limits).state
        'more'
        >>> frame_request(b"POST / HTTP/1.1\\r\\nContent-Length: 50\\r\\n\\r\\n", **limits)
        RequestFrame(state='drain', end=39, status=413, drop=50)
    """
    line = buf.find(b"\r\n", 0, max_line + 2)
    if line < 0 and len(buf) > max_line:
        return RequestFrame("refuse", status=414)
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return RequestFrame("refuse", status=431) if len(buf) > max_head else RequestFrame("more")
    end += 4
    if end > max_head:
        return RequestFrame("refuse", status=431)
    lengths, codings, expect = _head_fields(bytes(buf[:end - 4]))
    if codings:
        if lengths or codings[-1].split(b",")[-1].strip() != b"chunked":
            return RequestFrame("ready", len(buf))
        return _chunked_end(buf, end, max_body)
    if not lengths:
        return RequestFrame("ready", end)
    if len(lengths) > 1 or not lengths[0].isdigit() or len(lengths[0]) > 18:
        return RequestFrame("ready", len(buf))
    size = int(lengths[0])
    if size > max_body:
        if expect or size > drain_limit:
            return RequestFrame("refuse", status=413)
        return RequestFrame("drain", end, 413, size)
    if len(buf) >= end + size:
        return RequestFrame("ready", end + size)
    return RequestFrame("continue" if expect and len(buf) == end else "more")


# --------------------------------------------------------------------------- sockets
class _QueuedSocket(socket.socket):
    """A client socket that never blocks: ``setblocking(True)`` (gunicorn's, before a thread
    handles a request) keeps it non-blocking, and :meth:`sendall` sends what the kernel takes
    and queues the rest in ``wbuf``, which the event loop writes out.  Between :meth:`hold` and
    :meth:`release` (a thread's handling of one request) what is written is gathered first and
    sent at once: an answer's head and body leave in one ``send``, not two."""

    held: bytearray | None = None

    def setblocking(self, flag: bool) -> None:
        if self.gettimeout() != 0.0:  # a system call only when the mode changes
            super().setblocking(False)

    def hold(self) -> None:
        """Gather what is written from now on (up to _HOLD_MAX bytes at a time)."""
        self.held = bytearray()

    def release(self) -> bool:
        """Send what was gathered (queueing the rest); False when the client is gone."""
        data, self.held = self.held, None
        if data:
            try:
                self.sendall(data)
            except OSError:
                return False
        return True

    def sendall(self, data: Any, flags: int = 0) -> None:
        if self.held is not None and not flags:
            self.held += data
            if len(self.held) <= _HOLD_MAX:
                return
            data, self.held = self.held, bytearray()
        if not hasattr(self, "wbuf"):
            self.wbuf = bytearray()
        view = memoryview(data).cast("B")
        sent = 0
        if not self.wbuf:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                sent = self.send(view, flags)
        if len(self.wbuf) + len(view) - sent > _MAX_QUEUED:  # gunicorn ends the connection quietly
            raise ConnectionResetError(errno.ECONNRESET, "the client does not read its answers")
        self.wbuf += view[sent:]


class _Conn(TConn):
    """gunicorn's connection plus this worker's read buffer, deadline and closing."""

    def __init__(self, worker: BufferedThreadWorker, sock: socket.socket, client: Any, server: Any) -> None:
        super().__init__(worker.cfg, sock, client, server)
        self.worker = worker
        self.rbuf = bytearray()
        self.drop = 0  # bytes of an oversize body still to read and drop
        self.continued = False  # 100 Continue sent for the request being read
        self.on_loop = False  # the request in the parser is served on the event loop
        self.deadline = 0.0  # when the request being read must be whole
        # The HTTP/1.1 parser reads from the buffer handed over (never TLS or HTTP/2 here).
        self.parser = http.get_parser(worker.cfg, sock, client)
        self.initialized = self.data_ready = True

    def close(self, graceful: bool = False) -> None:
        if graceful:  # gunicorn's own close_graceful would linger inside the main loop
            self.worker.linger(self)
        else:
            super().close()


# --------------------------------------------------------------------------- the worker
class BufferedThreadWorker(ThreadWorker):
    """gunicorn's ``gthread`` worker that lets a thread take a request only once it has arrived
    whole, with a deadline (see the module docstring).  Configure a subclass with
    :func:`worker_class`."""

    request_timeout = 10.0
    max_head = 64 * 1024
    max_body = 64 * 1024
    drain_limit = 1 << 20
    loop_paths: tuple[bytes, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dispatching = False  # a request is being read or served on the event loop
        self._reading: dict[_Conn, None] = {}  # waiting in the poller for more of a request
        self._writing: dict[_Conn, None] = {}  # waiting in the poller to write out an answer
        self._lingering: dict[_Conn, float] = {}  # connection -> when to close it

    # ---------------------------------------------------------------- the event loop
    def accept(self, listener: Any) -> None:
        """gthread's accept, except that the connection waits in the poller, not on a thread,
        until it has sent something."""
        try:
            client, addr = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        sock = _QueuedSocket(fileno=client.detach())
        conn = _Conn(self, sock, addr, listener.getsockname())
        conn.deadline = time.monotonic() + self.request_timeout
        self._wait(conn)

    def _wait(self, conn: _Conn) -> None:
        """Wait in the poller for more of ``conn``'s request (its deadline runs on)."""
        conn.sock.setblocking(False)
        self._reading[conn] = None
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._readable, conn))

    def _flush(self, conn: _Conn, fs: Any, _fileobj: Any) -> None:
        try:
            sent = conn.sock.send(conn.sock.wbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            sent, conn.sock.wbuf = 0, bytearray()  # the client is gone: nothing more to write
            fs = _Done(False)  # the client is gone: close
        del conn.sock.wbuf[:sent]
        if not conn.sock.wbuf:
            del self._writing[conn]
            self.poller.unregister(conn.sock)
            self.finish_request(conn, fs)

    def _readable(self, conn: _Conn, _fileobj: Any) -> None:
        del self._reading[conn]
        self.poller.unregister(conn.sock)
        self.enqueue_req(conn)

    def on_client_socket_readable(self, conn: _Conn, client: Any) -> None:
        """A kept-alive connection's next request begins: its deadline starts now."""
        conn.deadline = time.monotonic() + self.request_timeout
        super().on_client_socket_readable(conn, client)

    def finish_request(self, conn: _Conn, fs: Any) -> None:
        """After a thread: an answer the client has not taken yet is written out first; an
        unfinished request waits in the poller again; the next pipelined request goes to a
        thread (it may not be whole yet); otherwise as gthread."""
        result = None if fs.cancelled() or fs.exception() is not None else fs.result()
        if getattr(conn.sock, "wbuf", None) and result is not None:
            conn.deadline = time.monotonic() + self.request_timeout
            self._writing[conn] = None
            self.poller.register(conn.sock, selectors.EVENT_WRITE, partial(self._flush, conn, fs))
        elif result is _MORE:
            self._wait(conn)
        elif result is True and conn.rbuf and self.alive:
            conn.deadline = time.monotonic() + self.request_timeout
            conn.sock.setblocking(False)
            self.enqueue_req(conn)
        else:
            super().finish_request(conn, fs)

    # ---------------------------------------------------------------- dispatch
    def enqueue_req(self, conn: _Conn) -> None:
        """Read what has arrived, on the event loop; a whole request is then served on the loop
        when its target starts with one of ``loop_paths``, else on a thread.  The next
        pipelined request of a connection served on the loop waits for the loop's next round,
        after the other connections' events, so one connection cannot keep the loop to itself."""
        if self._dispatching:
            self.method_queue.defer(self.enqueue_req, conn)
            return
        self._dispatching = True
        try:
            self._dispatch(conn)
        finally:
            self._dispatching = False

    def _dispatch(self, conn: _Conn) -> None:
        try:
            result = self._take(conn)
            if result is None:
                if not conn.on_loop:
                    fs = self.tpool.submit(self.serve, conn)
                    fs.add_done_callback(lambda fut: self.method_queue.defer(self.finish_request, conn, fut))
                    return
                result = self.serve(conn)
        except Exception as exc:  # as a thread's: the connection is closed
            self.log.exception("Error handling a request on the event loop")
            result = exc
        self.finish_request(conn, _Done(result))

    def serve(self, conn: _Conn) -> Any:
        """gthread's handling of the whole request in the parser, its answer gathered and sent
        at once: whether to keep the connection."""
        conn.sock.hold()
        try:
            keep = super().handle(conn)
        finally:
            sent = conn.sock.release()
        return keep if sent else False

    def _take(self, conn: _Conn) -> Any:
        while True:
            if not conn.drop:
                taken = self._frame(conn)
                if taken is not _MORE:
                    return taken
            try:
                data = conn.sock.recv(_RECV)
            except (BlockingIOError, InterruptedError):
                return _MORE
            except OSError:
                return False
            if not data:  # the client left before its request was whole
                return False
            if conn.drop:  # an oversize body, read and dropped before its 413
                conn.drop -= len(data)
                if conn.drop <= 0:
                    return self._refuse(conn, 413, _refusal_message(413, self))
            else:
                conn.rbuf += data

    def _frame(self, conn: _Conn) -> Any:
        """None once the buffer's first request is in the parser; else what ``_take`` returns."""
        if not conn.rbuf:
            return _MORE
        frame = frame_request(conn.rbuf, max_head=self.max_head, max_body=self.max_body,
                              drain_limit=self.drain_limit, max_line=self.cfg.limit_request_line)
        if frame.state == "ready":
            conn.on_loop = _target_starts(conn.rbuf, self.loop_paths)
            conn.parser.unreader.unread(bytes(conn.rbuf[:frame.end]))
            del conn.rbuf[:frame.end]
            conn.continued = False
            return None
        if frame.state == "continue" and not conn.continued:
            conn.continued = True  # answered here: the parser must not send a second 100
            conn.rbuf[:] = _EXPECT.sub(b"", bytes(conn.rbuf), count=1)
            _send(conn, b"HTTP/1.1 100 Continue\r\n\r\n")
        elif frame.state == "drain":
            conn.drop = frame.drop - (len(conn.rbuf) - frame.end)
            del conn.rbuf[:]
            if conn.drop <= 0:
                return self._refuse(conn, 413, _refusal_message(413, self))
        elif frame.state == "refuse":
            return self._refuse(conn, frame.status, _refusal_message(frame.status, self))
        return _MORE

    def _refuse(self, conn: _Conn, status: int, message: str) -> bool:
        """Answer ``status`` (JSON, ``Connection: close``); False: gthread then closes."""
        reason = _REASONS[status]
        body = json.dumps({"error": reason, "message": message, "status": status}).encode()
        _send(conn, (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body)
        self.log.info("%s %s: %s", conn.client[0] if conn.client else "-", status, message)
        conn.rbuf.clear()
        return False

    # ---------------------------------------------------------------- closing
    def linger(self, conn: _Conn) -> None:
        """Close ``conn`` after a FIN, reading (and dropping) what the client still sends for at
        most 2 s, so the kernel does not reset the last answer; waits in the poller."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            conn.sock.close()
            return
        conn.drop = _CLOSE_DRAIN
        self._lingering[conn] = time.monotonic() + _CLOSE_LINGER_S
        conn.sock.setblocking(False)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._drain_closing, conn))

    def _drain_closing(self, conn: _Conn, _fileobj: Any) -> None:
        try:
            data = conn.sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        conn.drop -= len(data)
        if not data or conn.drop <= 0:
            self._close_lingering(conn)

    def _close_lingering(self, conn: _Conn) -> None:
        del self._lingering[conn]
        self.poller.unregister(conn.sock)
        conn.sock.close()

    # ---------------------------------------------------------------- deadlines
    def murder_pending(self) -> None:
        """Called by gthread's loop about once a second: a request past its deadline gets 408
        (a connection that sent nothing is just closed); connections lingering after a close
        are closed after 2 s.  While stopping, a connection that has sent nothing yet is kept at
        most gthread's kept-alive linger."""
        super().murder_pending()
        now = time.monotonic()
        for conn in list(self._reading):
            if not self.alive and not conn.rbuf and not conn.drop:
                conn.deadline = min(conn.deadline, now + STOP_KEEPALIVE_LINGER)
            if conn.deadline > now:
                continue
            del self._reading[conn]
            self.poller.unregister(conn.sock)
            self.nr_conns -= 1
            if conn.rbuf or conn.drop:
                self._refuse(conn, 408, f"the request did not arrive whole within {self.request_timeout:g} s")
                self.linger(conn)
            else:
                conn.sock.close()
        for conn in [c for c in self._writing if c.deadline <= now]:  # it stopped reading
            del self._writing[conn]
            self.poller.unregister(conn.sock)
            self.nr_conns -= 1
            self.log.info("%s: answers not taken within %g s", conn.client[0] if conn.client else "-",
                          self.request_timeout)
            conn.sock.close()
        for conn, deadline in list(self._lingering.items()):
            if deadline <= now:
                self._close_lingering(conn)


class _Done:
    """A finished request, as ``finish_request`` reads a thread's future: ``outcome`` is its result,
    or the exception it raised."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    def cancelled(self) -> bool:
        return False

    def exception(self) -> BaseException | None:
        return self.outcome if isinstance(self.outcome, BaseException) else None

    def result(self) -> Any:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def _target_starts(buf: bytearray, prefixes: tuple[bytes, ...]) -> bool:
    """Whether the request line at the start of ``buf`` names a target beginning with a prefix."""
    if not prefixes:
        return False
    space = buf.find(b" ", 0, 16)
    return space > 0 and any(buf.startswith(p, space + 1) for p in prefixes)


def _send(conn: _Conn, data: bytes) -> None:
    """Send without waiting: a client that cannot take a few hundred bytes gets none."""
    try:
        conn.sock.send(data)
    except OSError:
        pass


def _refusal_message(status: int, worker: BufferedThreadWorker) -> str:
    if status == 414:
        return f"request lines longer than {worker.cfg.limit_request_line} bytes are refused"
    if status == 431:
        return f"request heads longer than {worker.max_head} bytes are refused"
    return f"request bodies larger than {worker.max_body} bytes are refused"


def worker_class(*, request_timeout: float, max_body: int, drain_limit: int = 1 << 20,
                 loop_paths: tuple[str, ...] = ()) -> type[BufferedThreadWorker]:
    """A :class:`BufferedThreadWorker` subclass with these limits (gunicorn's ``worker_class``);
    requests whose target starts with one of ``loop_paths`` are served on the event loop."""
    return type("BufferedThreadWorker", (BufferedThreadWorker,),
                {"request_timeout": float(request_timeout), "max_body": int(max_body),
                 "drain_limit": int(drain_limit), "__module__": __name__,
                 "loop_paths": tuple(p.encode("ascii") for p in loop_paths)})
