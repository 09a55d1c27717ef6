"""When two eval runs compare: the same prompts, generated and graded the same way.

``compare`` reports the trained model minus the base model. That difference is the model's only
when everything else was the same, so two runs are refused, in one line naming the difference,
when they differ in:

- the prompts: the (index, ground truth) pairs of their samples (``paired.check_pairable``) and
  the content hash of the data's prompts (``prompts_sha256``);
- how the prompts were rendered: the hash of the token ids the model saw (``rendered_sha256``:
  the chat template and its kwargs applied), and the template kwargs;
- generation: n, temperature, top_p, max_tokens, ignore_eos, and the seed where sampling (at
  temperature 0 the seed cannot change a response, so it is not checked);
- grading: the reward kwargs.

Each run writes the two hashes into its header (``fingerprints``). A run written before they
were recorded is refused with the field it lacks: its prompts cannot be checked. A setting an
old run lacks where it cannot matter (the seed of a greedy run) is a warning.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from rlvr.evaluation.errors import EvalError
from rlvr.evaluation.paired import SAMPLING_KEYS, EvalRunSamples, check_pairable
from rlvr.evaluation.records import FINGERPRINT_KEYS, RunHeader, jsonable

#: Generation settings that must be recorded, and equal, in both runs (beyond ``paired``'s).
GENERATION_KEYS = (*SAMPLING_KEYS, "ignore_eos", "seed")


def _sha256(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def fingerprints(
    rows: Sequence[dict[str, Any]], rendered: Sequence[Sequence[int]]
) -> dict[str, str]:
    """The header's hashes: the rows' prompt messages and ground truths, in order, and the
    token ids each prompt was rendered to."""
    data = [[jsonable(r["prompt"]), jsonable(r["reward_model"]["ground_truth"])] for r in rows]
    return {
        "prompts_sha256": _sha256(data),
        "rendered_sha256": _sha256([list(ids) for ids in rendered]),
    }


def check_comparable(base: EvalRunSamples, trained: EvalRunSamples) -> list[str]:
    """Raise ``EvalError`` naming the first difference that would make the delta not the
    model's; return the warnings about what cannot matter."""
    runs = (("BASE", base), ("TRAINED", trained))
    heads = base.summary.header, trained.summary.header
    greedy = all(head.sampling.get("temperature") == 0 for head in heads)
    warnings = []
    for key in GENERATION_KEYS:
        for name, run in runs:
            if key not in run.summary.header.sampling:
                if key == "seed" and greedy:
                    warnings.append(f"warning: {name} records no seed (greedy: it cannot matter)")
                    continue
                raise _missing(name, run, f"sampling.{key}")
    for name, run in runs:
        for key in FINGERPRINT_KEYS:
            if getattr(run.summary.header, key) is None:
                raise _missing(name, run, key)
    check_pairable(base, trained)  # prompts by (index, ground truth), sampling, reward kwargs
    _check_same(heads, "prompts_sha256", "different prompts (the data's prompt content)")
    if heads[0].template_kwargs != heads[1].template_kwargs:  # before the hash: names more
        kwargs = [head.template_kwargs for head in heads]
        raise EvalError(_differ(f"chat template kwargs {kwargs[0]} vs {kwargs[1]}"))
    _check_same(heads, "rendered_sha256", "prompts rendered differently (chat template/tokenizer)")
    for key in GENERATION_KEYS:
        if key == "seed" and greedy:
            continue
        values = [head.sampling.get(key) for head in heads]
        if values[0] != values[1]:
            raise EvalError(_differ(f"{key} {values[0]!r} vs {values[1]!r}"))
    if heads[0].backend != heads[1].backend:
        warnings.append(
            f"warning: backends differ ({heads[0].backend} vs {heads[1].backend}): the same "
            "settings decode with different numerics"
        )
    return warnings


def _missing(name: str, run: EvalRunSamples, field: str) -> EvalError:
    return EvalError(
        f"{name} {run.path} records no {field} (written by an earlier version), so it "
        "cannot be checked to match the other run; re-run its eval to compare"
    )


def _differ(what: str) -> str:
    return f"BASE and TRAINED differ in {what}: the delta would not be the model's alone"


def _check_same(heads: tuple[RunHeader, RunHeader], key: str, what: str) -> None:
    values = [getattr(head, key) for head in heads]
    if values[0] != values[1]:
        raise EvalError(
            f"BASE and TRAINED differ in {what}: {key} {str(values[0])[:12]} vs "
            f"{str(values[1])[:12]}; compare runs of the same prompts"
        )
