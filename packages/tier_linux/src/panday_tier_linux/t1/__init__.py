"""T1 Linux: Landlock + seccomp + rlimits, for hosts where bubblewrap cannot run.

No namespaces: the filesystem is ruled by Landlock (`landlock`), everything else a
process could reach by other means is denied by seccomp (no socket(2) at all) or refused
by field at `open_session` (`session`). Each command is spawned by a thread that has
restricted itself (`launch`). The table is `panday_core.declared.t1_linux`.
"""
