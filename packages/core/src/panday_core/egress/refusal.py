"""`Refusal`: a request the egress proxy does not serve, in neutral terms (a leaf module).

Every layer raises it (admission, the relay core, name checks, the fronts) and each front
answers it in its own protocol's words (`tunnel.FrontEnd.answer`). It imports nothing of
the proxy's, so nothing that raises it pulls in the relay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from panday_core.egress.audit import Verdict

RefusalKind = Literal[
    "malformed",
    "credentials",
    "policy",
    "busy",
    "too-slow",
    "unresolvable",
    "unreachable",
    "connection-refused",
    "timeout",
    "internal",
]
_FAILED: frozenset[str] = frozenset(
    {"unresolvable", "unreachable", "connection-refused", "timeout", "internal"}
)


class Refusal(Exception):  # noqa: N818 - a refusal, not a failure of the proxy
    """A request the proxy does not serve, in neutral terms.

    `kind` says what went wrong, and each front-end maps it to its protocol's answer (HTTP
    status, SOCKS reply code). `status` overrides the HTTP status for parse errors that
    have their own (414, 431). The audit verdict is ``failed`` when the request was
    admitted but could not be carried out, ``refused`` otherwise.
    """

    def __init__(
        self,
        kind: RefusalKind,
        reason: str,
        *,
        address: str | None = None,
        status: int | None = None,
    ) -> None:
        self.kind: RefusalKind = kind
        self.reason = reason
        self.address = address
        self.status = status
        self.verdict: Verdict = "failed" if kind in _FAILED else "refused"
        super().__init__(reason)

    def copy(self) -> Refusal:
        """A fresh exception with the same content (one outcome, raised by many waiters)."""
        return Refusal(self.kind, self.reason, address=self.address, status=self.status)
