"""Credentials the egress proxy issues: a random token per command (or the session).

A client presents them as ``Proxy-Authorization`` (HTTP) or the SOCKS5 username/password;
the username is the command id (or ``session``), the password its token.
"""

from __future__ import annotations

import hmac
import itertools
import secrets
import threading

SESSION_USER = "session"
"""The username of session-level credentials (no particular command)."""
USER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_USER = 64
_TOKEN_BYTES = 20
"""160 random bits per issued token, shown as 40 hex digits."""


def valid_user(user: str) -> bool:
    """Whether `user` can be a username the proxy issues credentials for."""
    return 0 < len(user) <= MAX_USER and set(user) <= USER_CHARS


class _Grant:
    __slots__ = ("id", "refs", "token")

    def __init__(self, token: str, grant_id: int) -> None:
        self.token = token
        self.id = grant_id
        self.refs = 0


class Credentials:
    """Issued credentials: a random token per user (a command id, or ``session``).

    A command's credentials are issued when it starts and revoked when it ends; issuing
    an id that is still live adds a reference instead (two running commands may share a
    caller's command id), and the token dies with the last reference. A revoked id that is
    issued again gets a new token, so a process that kept the old one gets nothing. The
    session's credentials live as long as the proxy. Thread-safe: the caller issues and
    revokes from its own thread while the proxy's loop checks.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._grants: dict[str, _Grant] = {SESSION_USER: _Grant(secrets.token_hex(_TOKEN_BYTES), 0)}
        self._dummy = secrets.token_hex(_TOKEN_BYTES).encode("ascii")

    def issue(self, user: str) -> str:
        with self._lock:
            grant = self._grants.get(user)
            if grant is None:
                grant = self._grants[user] = _Grant(
                    secrets.token_hex(_TOKEN_BYTES), next(self._ids)
                )
            grant.refs += 1
            return grant.token

    def revoke(self, user: str) -> int | None:
        """Drop one reference to `user`'s credentials; the grant id when that was the last
        (its tunnels must be cut), else None."""
        if user == SESSION_USER:
            return None
        with self._lock:
            grant = self._grants.get(user)
            if grant is None:
                return None
            grant.refs -= 1
            if grant.refs > 0:
                return None
            del self._grants[user]
            return grant.id

    def check(self, user: str, password: str) -> int | None:
        """The grant id when (user, password) are live credentials, else None
        (constant-time in the token)."""
        grant = self._grants.get(user)
        token = grant.token.encode("ascii") if grant is not None else self._dummy
        ok = hmac.compare_digest(token, password.encode("utf-8", "replace"))
        return grant.id if ok and grant is not None else None
