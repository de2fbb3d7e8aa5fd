"""panday: run semi-trusted commands under one fail-closed policy.

The session API (`panday.open`) arrives with the SDK issue; today this package carries the
CLI (`panday policy check`, `panday policy schema`) and the tier registry.
"""

__version__ = "0.1.0"
