"""A stand-in reward for the rehearsal's topology check (verl custom reward function).

The tiny random model never earns a task reward, so every group scores alike, every advantage is
0 and step 1 has no gradient to compare between topologies. This scores any text, deterministically,
in [0, 1], so the responses of a group disagree and the update is a real one.
"""

from __future__ import annotations

import zlib
from typing import Any


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **_: Any
) -> dict[str, float]:
    return {"score": (zlib.crc32(solution_str.encode("utf-8", "replace")) % 101) / 100}
