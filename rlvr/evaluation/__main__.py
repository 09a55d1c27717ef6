"""Eval for any registered task, including one with no scripts/eval_<task>.py of its own.

Usage: python -m rlvr.evaluation TASK [options] [COMMAND [options]]   (TASK --help for the rest)
"""

from __future__ import annotations

import sys

from rlvr import tasks
from rlvr.evaluation.cli import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__, file=sys.stderr if args[:1] != ["--help"] else sys.stdout)
        raise SystemExit(0 if args[:1] == ["--help"] else 2)
    try:
        spec = tasks.get(args[0])
    except tasks.TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(main(spec.name, f"Evaluate and probe a model on {spec.summary}", args[1:]))
