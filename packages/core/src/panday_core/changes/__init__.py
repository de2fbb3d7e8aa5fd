"""Writes as proposals: what a command wrote in ``checked`` or ``review`` mode (``fs.writes``).

Such a command writes into an overlay over the workspace, never into it: its writes land
in the overlay's upper directory, a *change set* kept in panday's per-user state. When
the command ends, `read.read_upper` turns that directory into a list of changes (created,
modified, deleted, mode, symlinks), `hazards.judge` holds back each change that could run
outside the jail later (at any depth, created or modified alike), and `apply.apply`
moves the rest into the workspace, one ``rename(2)`` per file, after a journal that the
next panday finishes if this one dies. A held change stays in its change set, reviewable
and appliable by an explicit ``panday changes apply``; it is never dropped or applied
silently. See docs/workspace.md.
"""
