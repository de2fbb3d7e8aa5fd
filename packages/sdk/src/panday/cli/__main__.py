"""``python -m panday.cli``: the CLI as the console script runs it (without the cache)."""

from panday.cli import main

raise SystemExit(main())
