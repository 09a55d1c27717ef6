"""The one error type of the eval layer: bad eval input, printed in one line and exit code 2."""


class EvalError(Exception):
    """Bad eval input (missing model, unreadable data...): scripts print it and exit 2."""
