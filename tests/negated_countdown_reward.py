"""Test-only verl reward for tests/test_learning_countdown_e2e.py: Countdown's real reward, negated.

GRPO's advantage is the reward's z-score inside its group, so negating every reward flips the
sign of every advantage and nothing else (the same groups disagree, the same groups are dropped
as constant): GRPO then pushes toward what the real reward ranks lowest, wrong answers and,
through the negated format credit, unformatted ones. A sign check of the learning signal, not a
null control. Standard library only; not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

_SPEC = importlib.util.spec_from_file_location(
    "_countdown_reward", Path(__file__).resolve().parents[1] / "rewards/countdown.py"
)
assert _SPEC is not None and _SPEC.loader is not None
_countdown = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_countdown)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    **kwargs: Any,
) -> dict[str, float]:
    result = _countdown.compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    return {**result, "score": -result["score"]}
