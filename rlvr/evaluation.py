"""Greedy evaluation of a model folder on a data-prep Parquet, graded by the task's reward.

Prompts are rendered as verl renders them in training: the tokenizer's chat template over the
Parquet ``prompt`` messages with ``add_generation_prompt=True``, tokenized without extra special
tokens. Used by the quickstart's before/after report.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REWARD_MODULES = {"countdown": "rewards.countdown", "openai/gsm8k": "rewards.gsm8k"}


@dataclass
class EvalSummary:
    model: str
    prompts: int
    mean_score: float
    pass_at_1: float
    format_rate: float
    mean_response_tokens: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def render_prompt(
    tokenizer: Any, messages: list[dict[str, str]], **template_kwargs: Any
) -> list[int]:
    """Token ids of a prompt exactly as verl's RLHFDataset builds them."""
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, **template_kwargs
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def evaluate_greedy(
    model_path: str | Path,
    data_path: str | Path,
    *,
    limit: int | None = None,
    max_new_tokens: int = 64,
    batch_size: int = 16,
    reward_kwargs: dict[str, Any] | None = None,
) -> EvalSummary:
    """Mean reward, pass@1 (score == 1.0) and format rate of greedy responses."""
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    frame = pd.read_parquet(data_path)
    if limit is not None:
        frame = frame.head(limit)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.eval()
    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    )

    scores, formats, lengths = [], [], []
    rows = frame.to_dict("records")
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        encoded = [render_prompt(tokenizer, [dict(m) for m in row["prompt"]]) for row in batch]
        width = max(len(ids) for ids in encoded)
        input_ids = torch.tensor([[pad_id] * (width - len(ids)) + ids for ids in encoded])
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
        with torch.no_grad():
            output = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=pad_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        for row, sequence in zip(batch, output[:, width:], strict=True):
            tokens = sequence.tolist()
            if tokenizer.eos_token_id in tokens:
                tokens = tokens[: tokens.index(tokenizer.eos_token_id) + 1]
            text = tokenizer.decode(tokens, skip_special_tokens=True)
            reward = importlib.import_module(REWARD_MODULES[row["data_source"]])
            result = reward.compute_score(
                row["data_source"],
                text,
                row["reward_model"]["ground_truth"],
                **(reward_kwargs or {}),
            )
            scores.append(result["score"])
            formats.append(result["format"])
            lengths.append(len(tokens))
    count = max(len(scores), 1)
    return EvalSummary(
        model=str(model_path),
        prompts=len(scores),
        mean_score=sum(scores) / count,
        pass_at_1=sum(s == 1.0 for s in scores) / count,
        format_rate=sum(formats) / count,
        mean_response_tokens=sum(lengths) / count,
    )


def comparison_table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """A Markdown "Base -> Trained" table of two summaries, with deltas."""
    lines = ["| metric | before | after | delta |", "|---|---|---|---|"]
    for key, label, percent in (
        ("mean_score", "mean score", True),
        ("pass_at_1", "pass@1", True),
        ("format_rate", "format rate", True),
        ("mean_response_tokens", "mean response tokens", False),
    ):
        b, a = float(before[key]), float(after[key])
        if percent:
            lines.append(f"| {label} | {b:.2%} | {a:.2%} | {a - b:+.2%} |")
        else:
            lines.append(f"| {label} | {b:.1f} | {a:.1f} | {a - b:+.1f} |")
    return "\n".join(lines)
