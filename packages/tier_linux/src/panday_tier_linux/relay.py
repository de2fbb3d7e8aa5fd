"""The jail's end of the egress bridge. It runs *inside* the jail, before the command.

    python3 -I -S -B relay.py HTTP_PORT SOCKS_PORT SOCKET [REPORT_FD] -- COMMAND [ARG...]

The jail keeps ``--unshare-net``: its network namespace holds only its own loopback. This
program, run by the host's ``/usr/bin/python3`` (standard library only, Python 3.8 or
later; it never imports panday), gives the command its one way out:

1. it listens on ``127.0.0.1:HTTP_PORT`` and ``127.0.0.1:SOCKS_PORT`` (the addresses the
   jail's proxy variables name), then connects to ``SOCKET``, the egress proxy's unix
   socket, the only thing of the host's network the jail can reach;
2. it forks the relay loop away (twice, so the loop is no child of the command: a command
   that reaps every child or signals its own process group neither sees nor kills it) and
   waits until the loop reports through a pipe that it runs;
3. only then does it exec the command. The listeners were bound before the fork, so the
   command's very first connection already finds them: there is no start-up race.

The loop accepts each connection and hands the connected socket itself to the proxy
(``SCM_RIGHTS``, one socket per message): it never copies a byte of traffic, and the
proxy checks every request as it checks any client's. When the proxy cannot be reached
(it could not start, or it died), the loop answers the client itself, with an HTTP 502
carrying ``X-Panday-Refused`` or a SOCKS5 "no acceptable method", and closes: the command
loses the network and learns why, and there is no other route to fall back to.

Setup failures print one ``panday-relay:`` line on stderr and exit 125; a command that
cannot be executed prints ``bwrap: execvp PROGRAM: REASON``, as bwrap does without a relay
(exit 125 here). Those lines are for a person: the session never reads them, because a
command can print the same words and exit 125 itself. It reads ``REPORT_FD`` instead, a
pipe only this program holds (close-on-exec, so the command never has it, and closed in the
loop at once): ``E<errno>`` when the exec failed, ``S<message>`` when setup did, nothing
when the command was exec'd.

Every command of such a session pays this program's start-up, so it imports only C modules
(``_socket``, ``_signal``, ``select``): the ``socket`` module alone (enum, selectors,
collections) would cost more than the interpreter's own start.
"""

from __future__ import annotations

import _signal  # pyright: ignore[reportMissingModuleSource] - CPython's C half of `signal` (typings/_signal.pyi)
import _socket as socket
import os
import select
import sys

SETUP_FAILED = 125
READY = b"R"
READY_TIMEOUT_S = 10.0
HANDOFF = b"C"
SEND_TIMEOUT_S = 10.0
REFUSERS = 64
"""Clients answered at once while the proxy is unreachable (each in a short thread)."""
REFUSE_TIMEOUT_S = 2.0


_REPORT = [-1]
"""The session's report descriptor (`REPORT_FD`), -1 when run without one."""


def _report(data: bytes) -> None:
    if _REPORT[0] >= 0:
        try:  # noqa: SIM105 - contextlib would cost the relay's start-up (C modules only)
            os.write(_REPORT[0], data)
        except OSError:
            pass


def _fail(message: str) -> None:
    _report(b"S" + message.encode(errors="replace") + b"\n")
    os.write(2, f"panday-relay: {message}\n".encode(errors="replace"))
    os._exit(SETUP_FAILED)


def _listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(4096)
    sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
    return sock


def _control(path: str) -> tuple[socket.socket | None, str]:
    """A connection to the proxy's socket, or (None, why not)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, 0)
    sock.settimeout(SEND_TIMEOUT_S)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        return None, f"connecting to its socket: {exc.strerror or exc}"
    return sock, ""


def _refusal(first: bytes, reason: str) -> bytes:
    if first[:1] == b"\x05":
        return b"\x05\xff"  # SOCKS5: no acceptable method (SOCKS has no words for why)
    text = f"the egress proxy cannot be reached ({reason}); this jail has no other way out"
    body = text.encode() + b"\n"
    return (
        b"HTTP/1.1 502 Bad Gateway\r\nX-Panday-Refused: "
        + text.encode()
        + b"\r\nContent-Type: text/plain\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n"
        + body
    )


def _refuse(fd: int, reason: str) -> None:
    """Tell the client why (after reading its request, so closing does not reset)."""
    try:
        conn = socket.socket(fileno=fd)
    except OSError:
        os.close(fd)
        return
    try:
        conn.settimeout(REFUSE_TIMEOUT_S)
        try:
            first = conn.recv(65536)
        except OSError:
            first = b""
        conn.sendall(_refusal(first, reason))
        conn.shutdown(socket.SHUT_WR)
        while conn.recv(65536):
            pass
    except OSError:
        pass
    finally:
        conn.close()


class Relay:
    """The loop: accept, hand the socket to the proxy, close our copy."""

    def __init__(self, listeners: list[socket.socket], path: str) -> None:
        self.listeners = listeners
        self.path = path
        self.control: socket.socket | None = None
        self.problem = "not connected"
        self.refusing = 0

    def connect(self) -> None:
        self.control, why = _control(self.path)
        if self.control is None:
            self.problem = why

    def hand(self, fd: int) -> None:
        """Pass the accepted connection `fd` to the proxy, then close our copy."""
        rights = fd.to_bytes(4, sys.byteorder, signed=True)  # one C int
        for _ in range(2):  # once more after reconnecting: the proxy may have been restarted
            if self.control is None:
                self.connect()
            control = self.control
            if control is None:
                break
            try:
                control.sendmsg([HANDOFF], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
            except OSError as exc:
                self.problem = exc.strerror or str(exc)
                control.close()
                self.control = None
                continue
            os.close(fd)
            return
        self.refuse(fd)

    def refuse(self, fd: int) -> None:
        if self.refusing >= REFUSERS:
            os.close(fd)
            return
        import threading

        self.refusing += 1

        def answer() -> None:
            try:
                _refuse(fd, self.problem)
            finally:
                self.refusing -= 1

        threading.Thread(target=answer, daemon=True).start()

    def run(self, ready_fd: int) -> None:
        self.connect()
        os.write(ready_fd, READY)
        os.close(ready_fd)
        poller = select.poll()
        by_fd = {listener.fileno(): listener for listener in self.listeners}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        while True:
            for ready, _ in poller.poll():
                listener = by_fd[ready]
                while True:
                    try:
                        fd = _accepted(listener)
                    except OSError:  # EAGAIN: nothing more to accept
                        break
                    self.hand(fd)


def _accepted(listener: socket.socket) -> int:
    """One accepted connection's descriptor (``_socket``'s own accept; typeshed lacks it)."""
    return int(listener._accept()[0])  # noqa: SLF001  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownArgumentType] - see above


def _default_signals() -> None:
    """Python ignores SIGPIPE and SIGXFSZ; an ignored signal stays ignored across exec, and
    the command must start with the dispositions it would have had without the relay."""
    for name in ("SIGPIPE", "SIGXFSZ"):
        number: int | None = getattr(_signal, name, None)
        if number is not None:
            _signal.signal(number, _signal.SIG_DFL)


def _detach(listeners: list[socket.socket], path: str, ready_fd: int) -> None:
    """In the forked child: fork again, and run the loop in the grandchild."""
    if os.fork() != 0:
        os._exit(0)
    try:
        os.setsid()
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        if null > 2:  # noqa: PLR2004 - the three standard descriptors
            os.close(null)
        Relay(listeners, path).run(ready_fd)
    finally:
        os._exit(0)


def _wait_ready(fd: int) -> bool:
    poller = select.poll()  # not select(2): it cannot watch a descriptor past 1023
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(int(READY_TIMEOUT_S * 1000))) and os.read(fd, 1) == READY


def _take_report_fd(argv: list[str]) -> list[str]:
    """`argv` without REPORT_FD, which is kept (close-on-exec) in `_REPORT`."""
    if len(argv) > 4 and argv[3] != "--" and argv[3].isdigit():  # noqa: PLR2004 - the slot
        fd = int(argv[3])
        try:
            os.set_inheritable(fd, False)  # noqa: FBT003 - the command must never hold it
        except OSError:
            return argv[:3] + argv[4:]
        _REPORT[0] = fd
        return argv[:3] + argv[4:]
    return argv


def main(argv: list[str]) -> None:
    argv = _take_report_fd(argv)
    if len(argv) < 5 or argv[3] != "--":  # noqa: PLR2004 - HTTP SOCKS SOCKET -- COMMAND
        _fail("usage: relay.py HTTP_PORT SOCKS_PORT SOCKET [REPORT_FD] -- COMMAND [ARG...]")
    try:
        ports = [int(argv[0]), int(argv[1])]
        listeners = [_listen(port) for port in ports]
    except (ValueError, OSError) as exc:
        _fail(f"cannot listen on 127.0.0.1 inside the jail: {exc}")
        return
    path, command = argv[2], argv[4:]
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_fd)
        if _REPORT[0] >= 0:  # the loop outlives the exec: it must not hold the report pipe
            os.close(_REPORT[0])
            _REPORT[0] = -1
        _detach(listeners, path, write_fd)
    os.close(write_fd)
    os.waitpid(child, 0)
    ready = _wait_ready(read_fd)
    os.close(read_fd)
    for listener in listeners:
        listener.close()
    if not ready:
        _fail("the relay loop did not start")
    _default_signals()
    try:
        os.execvp(command[0], command)  # noqa: S606 - the user's command, as bwrap would run it
    except OSError as exc:
        _report(b"E" + str(exc.errno or 0).encode() + b"\n")
        os.write(2, f"bwrap: execvp {command[0]}: {exc.strerror}\n".encode(errors="replace"))
        os._exit(SETUP_FAILED)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Exception as exc:  # noqa: BLE001 - a bug here must read as setup, not the command
        _fail(f"{type(exc).__name__}: {exc}")
