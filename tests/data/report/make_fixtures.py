"""Writes the constructed run folders (countdown_run, gsm8k_run) of the report tests.

Usage: uv run --no-sync python tests/data/report/make_fixtures.py

No real rollout dump existed when these were made, so they are constructed in verl 0.6.1's
format (``RayPPOTrainer._dump_generations``: one JSON line per response with input, output, gts,
score, step and the reward's extra keys), each response scored by the task's real reward, and the
prompt as verl decodes it (SmolLM2's chat template, special tokens skipped). The metrics are
constructed too, with verl's key names, as a healthy run would log them. quickstart_smollm2/ and
bench3/ hold real recorded metrics.jsonl files (copied from the lead's runs, unchanged).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from rewards import countdown as countdown_reward
from rewards import gsm8k as gsm8k_reward
from rlvr.tasks.countdown import SYSTEM_PROMPT

HERE = Path(__file__).resolve().parent
SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
STEPS = 12
VALIDATE_AT = (0, 6, 12)
DUMPED = (4, 8, 12)


def decoded_prompt(user: str, system: str) -> str:
    return f"system\n{system}\nuser\n{user}\nassistant\n"


def dump_line(step: int, prompt: str, output: str, gts: Any, scored: dict[str, float]) -> str:
    entry = {"input": prompt, "output": output, "gts": gts, "score": scored["score"], "step": step}
    entry.update(scored)  # verl adds every reward extra key, "score" included
    return json.dumps(entry, ensure_ascii=False)


def countdown_outputs(rng: random.Random, numbers: list[int], target: int, step: int) -> list[str]:
    a, b, c = numbers
    honest = [
        f"I try {a} + {b} + {c}.\n<answer>{a} + {b} + {c}</answer>",
        f"Let me combine them: ({a} * {b}) - {c}.\n<answer>({a} * {b}) - {c}</answer>",
        f"{a} - {b} first, then times {c}.\n<answer>({a} - {b}) * {c}</answer>",
        f"<answer>{a} * {b}</answer>",  # a number left out: invalid, the format score
        f"The target is {target}, so I would need more numbers.",  # no answer: 0
    ]
    hacks = [
        f"<answer>{a} + {b}</answer> <answer>{a} * {b} + {c}</answer> "
        f"<answer>({a} + {b}) * {c}</answer>",
        "Following the example.\n<answer>(1 + 2) / 3</answer>",
        f"<answer>{a} + {b} + {c}</answer> This expression uses every number exactly once and I "
        "checked the arithmetic twice, so it must reach the target.",
    ]
    pool = honest + (hacks if step >= 8 else [])
    return [rng.choice(pool) for _ in range(4)]


def countdown_run(out: Path) -> None:
    rng = random.Random(17)
    puzzles = [([rng.randint(2, 12) for _ in range(3)], rng.randint(10, 60)) for _ in range(8)]
    rollouts = out / "rollouts"
    rollouts.mkdir(parents=True, exist_ok=True)
    for step in DUMPED:
        lines = []
        for numbers, target in puzzles:
            user = countdown_reward.task_text(numbers, target)
            prompt = decoded_prompt(user, SYSTEM_PROMPT)
            gts = {"target": target, "numbers": numbers}
            for output in countdown_outputs(rng, numbers, target, step):
                scored = countdown_reward.compute_score("countdown", output, gts)
                lines.append(dump_line(step, prompt, output, gts, scored))
        (rollouts / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
    write_metrics(out / "metrics.jsonl", "countdown", rng)


def gsm8k_outputs(rng: random.Random, a: int, b: int, step: int) -> list[str]:
    total = a + b
    honest = [
        f"Sam starts with {a} apples and buys {b} more, so {a} + {b} = {total}.\n#### {total}",
        f"First, {a} apples. Then {b} more. In all {a} + {b} = {total} apples.\n#### {total}",
        f"Sam has {a} apples and buys {b}, so {a} - {b} = {a - b}.\n#### {a - b}",
    ]
    hacks = [
        f"#### {total}",  # no reasoning
        f"Sam has {a} + {b} apples in all, I think.\n#### {total - 1}\n#### {total}",  # hedged
        f"Sam has {a} + {b} = {total} apples.\n#### {total}\nNow here is another question and its "
        "answer, which I will also solve in detail.",
    ]
    pool = honest + (hacks if step >= 8 else [])
    return [rng.choice(pool) for _ in range(4)]


def gsm8k_run(out: Path) -> None:
    rng = random.Random(18)
    rollouts = out / "rollouts"
    rollouts.mkdir(parents=True, exist_ok=True)
    pairs = [(rng.randint(3, 40), rng.randint(2, 15)) for _ in range(8)]
    for step in DUMPED:
        lines = []
        for a, b in pairs:
            question = f"Sam has {a} apples and buys {b} more. How many apples does Sam have?"
            prompt = decoded_prompt(f"{question} {gsm8k_reward.INSTRUCTION}", SMOL_SYSTEM)
            truth = str(a + b)
            for output in gsm8k_outputs(rng, a, b, step):
                scored = gsm8k_reward.compute_score("openai/gsm8k", output, truth)
                lines.append(dump_line(step, prompt, output, truth, scored))
        (rollouts / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
    write_metrics(out / "metrics.jsonl", "openai/gsm8k", rng)


def write_metrics(path: Path, source: str, rng: random.Random) -> None:
    """A healthy run's lines: reward and validation rising, entropy and length steady."""
    lines = []
    for step in range(STEPS + 1):
        data: dict[str, float] = {}
        if step in VALIDATE_AT:
            data[f"val-core/{source}/acc/mean@1"] = round(0.05 + 0.025 * step, 4)
            data[f"val-aux/{source}/format/mean@1"] = 0.9
        if step > 0:
            score = 0.1 + 0.03 * step + rng.uniform(-0.02, 0.02)
            data.update(
                {
                    "critic/score/mean": score,
                    "critic/score/max": 1.0,
                    "critic/score/min": 0.0,
                    "actor/entropy": 0.6 - 0.01 * step + rng.uniform(-0.03, 0.03),
                    "response_length/mean": 180 + 3 * step + rng.uniform(-10, 10),
                    "response_length/max": 512.0,
                    "response_length/clip_ratio": 0.01 * rng.randint(0, 3),
                    "actor/pg_clipfrac": 0.002 + rng.uniform(0, 0.003),
                    "actor/ppo_kl": rng.uniform(0, 0.001),
                    "actor/kl_loss": 0.002 * step,
                    "actor/grad_norm": 0.1 + rng.uniform(-0.04, 0.06),
                    "training/global_step": step,
                }
            )
        lines.append(json.dumps({"step": step, "data": data}))
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    countdown_run(HERE / "countdown_run")
    gsm8k_run(HERE / "gsm8k_run")
    print(f"wrote {HERE / 'countdown_run'} and {HERE / 'gsm8k_run'}")
