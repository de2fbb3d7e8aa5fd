"""The CLI's own exit codes (documented in docs/cli.md).

panday's own failures use the sysexits range so they are told apart from a jailed
command's usual 0-2 and the shell's 126/127.
"""

OK = 0
FAILED = 1
"""The check ran and its answer is no (e.g. a valid policy this host cannot enforce)."""
USAGE = 64
"""Bad command line: unknown option, malformed value, missing argument."""
INVALID_POLICY = 65
"""A policy or manifest document is malformed (wrong type, unknown key, bad value)."""
TIER_UNAVAILABLE = 69
"""No tier that could run this is available on this host."""
INTERNAL = 70
"""panday itself failed."""
NO_INPUT = 66
"""An input file does not exist or cannot be read."""
POLICY_REFUSED = 77
"""A valid policy asks for something the tier cannot enforce (refused before spawning)."""
