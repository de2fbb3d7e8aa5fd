"""`Refusal`: one policy field a tier cannot enforce, and why.

A leaf of its own so that `errors.PolicyViolation` can name it without importing the
capability tables (which import the policy model, which raises those errors).
`panday_core.capabilities` hands it on, and is where callers usually take it from.
"""

from __future__ import annotations

import msgspec


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """A policy field the tier cannot enforce, with the reason shown to the user."""

    field: str
    reason: str
