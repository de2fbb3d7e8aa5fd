"""Each command tier's declared capability table, as data, in core.

A tier's package holds how it enforces (and probes this host); the table saying *what* it
enforces lives here, so that `panday` installed on one OS can still judge a policy for the
other OS's tier, whose package is not installed there (`panday policy check`), and so the
docs can be generated anywhere. T0's table is in `panday_core.t0.capabilities`: T0 itself
is part of core.
"""
