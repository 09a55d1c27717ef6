"""The task registry from the shell.

Usage: python -m rlvr.tasks list                       the registered tasks
       python -m rlvr.tasks prep NAME [prep flags]     NAME's data prep (see prep NAME --help)
"""

from __future__ import annotations

import sys

from rlvr import tasks
from rlvr.tasks import prep_cli


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    try:
        if command == "list":
            for spec in tasks.all_specs():
                print(f"{spec.name}: {spec.summary} (default experiment {spec.default_experiment})")
            return 0
        if command == "prep" and rest:
            return prep_cli.main(rest[0], rest[1:])
    except tasks.TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"error: unknown or incomplete command {' '.join(args)!r}; see --help", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
