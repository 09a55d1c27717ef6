"""Test-only verl reward for tests/test_learning_e2e.py: the share of a response's characters
that are ASCII digits, whatever the prompt asks.

The tiny random model (rlvr/models/tiny.py) samples digit-bearing tokens often (about a third of
its tokenizer's vocabulary holds digits), so 16-token responses score about 0.3 with a spread
of about 0.1 inside a group: GRPO has a signal from step one, and a few steps of training push
the share up. Standard library only; not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

from typing import Any


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    **kwargs: Any,
) -> dict[str, float]:
    digits = sum("0" <= char <= "9" for char in solution_str)
    return {"score": digits / len(solution_str) if solution_str else 0.0}
