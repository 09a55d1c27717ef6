"""The training settings eval samples and grades with, read from one training config.

With ``--experiment NAME`` that config is the experiment as the launcher composes it
(``rlvr.config.compose.compose``); without one it is the task's overlay
(``configs/task/<name>.yaml``): every experiment of the task starts from it, and a task kept
outside configs/ has one even where its default experiment trains another task. Both are read by
the same keys, the ones verl's trainer reads:

- ``data.max_response_length``: eval's default ``--max_tokens``;
- ``actor_rollout_ref.rollout.temperature`` / ``top_p``: the sampling commands' defaults;
- ``data.apply_chat_template_kwargs``: how prompts are rendered (verl's ``RLHFDataset``);
- ``custom_reward_function.reward_kwargs``: how responses are graded;
- ``actor_rollout_ref.rollout.n``: what ``analyse`` compares its suggested group size with.

Explicit flags win over the config; every kwarg, and every flag's value (its argparse type
here: ``json_flag``, ``temperature_flag``, ``k_list``, the bounds), is checked before the model
loads.

``python -m rlvr.evaluation.settings EXPERIMENT [OVERRIDE ...] [--print FIELD ...]`` prints
them (scripts/quickstart.sh reads its temperature and step count from it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from rlvr.common.cli import OneLineParser, float_in, int_in
from rlvr.evaluation import EvalError
from rlvr.evaluation.records import JSONDict, jsonable
from rlvr.tasks import TaskSpec


@dataclass(frozen=True)
class RunSettings:
    """What a training config says about sampling and grading (None: the config sets none)."""

    origin: str  # where they came from, named in errors: "--experiment X" or the overlay path
    max_response_length: int
    reward_kwargs: JSONDict
    template_kwargs: JSONDict
    temperature: float | None = None
    top_p: float | None = None
    total_training_steps: int | None = None
    rollout_n: int | None = None


def from_config(config: Any, origin: str) -> RunSettings:
    """The settings at verl's keys of a config (an OmegaConf node)."""
    from omegaconf import OmegaConf

    def value(key: str) -> Any:
        found = OmegaConf.select(config, key, default=None)
        return OmegaConf.to_container(found) if OmegaConf.is_config(found) else found

    def number(key: str, kind: type) -> Any:
        found = value(key)
        return None if found is None else kind(found)

    return RunSettings(
        origin=origin,
        max_response_length=int(value("data.max_response_length")),
        reward_kwargs=_json_object(value("custom_reward_function.reward_kwargs")),
        template_kwargs=_json_object(value("data.apply_chat_template_kwargs")),
        temperature=number("actor_rollout_ref.rollout.temperature", float),
        top_p=number("actor_rollout_ref.rollout.top_p", float),
        total_training_steps=number("trainer.total_training_steps", int),
        rollout_n=number("actor_rollout_ref.rollout.n", int),
    )


def _json_object(value: object) -> JSONDict:
    """A config mapping (or None, where the config leaves it out) as a plain JSON object."""
    converted = jsonable(value)
    return converted if isinstance(converted, dict) else {}


def overlay_settings(task: TaskSpec) -> RunSettings:
    """Eval's defaults without ``--experiment``: the response length and reward kwargs of the
    task's overlay, or, where the overlay holds mechanics only (configs/task/: the experiments
    state those knobs), of the task's default experiment; no template kwargs or sampling."""
    from omegaconf import OmegaConf

    raw = OmegaConf.load(task.overlay)
    if OmegaConf.select(raw, "data.max_response_length", default=None) is not None:
        return from_config(raw, str(task.overlay))
    default = experiment_settings(task.default_experiment, task)
    return RunSettings(
        origin=f"--experiment {task.default_experiment} (the task's default)",
        max_response_length=default.max_response_length,
        reward_kwargs=default.reward_kwargs,
        template_kwargs={},
    )


def experiment_settings(
    experiment: str, task: TaskSpec | None = None, overrides: Sequence[str] = ()
) -> RunSettings:
    """The settings of a composed training experiment (of ``task``, when given: another task's
    kwargs would grade with the wrong settings)."""
    from rlvr import tasks
    from rlvr.config.compose import ConfigError, compose_checked, experiments

    if experiment not in experiments():
        raise EvalError(
            f"--experiment {experiment!r}: no such experiment; choose one of {experiments()}"
        )
    try:
        config = compose_checked(experiment, list(overrides))
    except ConfigError as exc:
        raise EvalError(f"--experiment {exc}") from None
    trained = tasks.for_config(config)
    if task is not None and trained is not None and trained.name != task.name:
        raise EvalError(
            f"--experiment {experiment}: trains {trained.name}, not {task.name}; pass a "
            f"{task.name} experiment or use scripts/eval_{trained.name}.py"
        )
    return from_config(config, f"--experiment {experiment}")


def check_reward_kwargs(task: TaskSpec, kwargs: JSONDict, origin: str) -> None:
    """Reward kwargs by name and value, as the reward will read them: a typo (``formt_score``)
    is refused here rather than ignored by the reward and recorded in the summary."""
    from rlvr.tasks import TaskError

    try:
        task.check_reward_kwargs(kwargs)
    except TaskError as exc:
        raise EvalError(f"{origin}: {exc}") from None


# apply_chat_template's own arguments: eval (like verl's RLHFDataset) sets the first three
# itself, and the rest change what it returns or conflict with add_generation_prompt.
RESERVED_TEMPLATE_KWARGS = (
    "conversation",
    "add_generation_prompt",
    "tokenize",
    "continue_final_message",
    "padding",
    "truncation",
    "max_length",
    "return_tensors",
    "return_dict",
    "return_assistant_tokens_mask",
    "tokenizer_kwargs",
)


def check_template_kwargs(kwargs: JSONDict, origin: str) -> None:
    """Chat-template kwargs that apply_chat_template reserves (``tokenize``...) are refused:
    passed on, they would fail (or change the prompt) only after the model has loaded."""
    reserved = [key for key in kwargs if key in RESERVED_TEMPLATE_KWARGS]
    if reserved:
        raise EvalError(
            f"{origin}: {', '.join(reserved)}: apply_chat_template's own argument(s), which eval "
            "sets itself (add_generation_prompt=True, tokenize=False, as verl renders prompts) "
            "or which change what it returns; pass template variables only, e.g. enable_thinking"
        )


def eval_settings(
    task: TaskSpec,
    experiment: str | None,
    reward_kwargs: JSONDict | None = None,
    template_kwargs: JSONDict | None = None,
) -> RunSettings:
    """The experiment's settings (the overlay's without one) with the ``--reward_kwargs`` /
    ``--template_kwargs`` flags on top; each kwarg checked and blamed on where it came from."""
    settings = experiment_settings(experiment, task) if experiment else overlay_settings(task)
    check_reward_kwargs(task, settings.reward_kwargs, f"reward_kwargs of {settings.origin}")
    check_template_kwargs(
        settings.template_kwargs, f"apply_chat_template_kwargs of {settings.origin}"
    )
    check_template_kwargs(template_kwargs or {}, "--template_kwargs")
    merged_reward = {**settings.reward_kwargs, **(reward_kwargs or {})}
    if reward_kwargs:
        check_reward_kwargs(task, merged_reward, "--reward_kwargs")
    return RunSettings(
        **{
            **asdict(settings),
            "reward_kwargs": merged_reward,
            "template_kwargs": {**settings.template_kwargs, **(template_kwargs or {})},
        }
    )


@dataclass
class SamplingSettings:
    n: int = 1
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int = 0
    ignore_eos: bool = False  # decode exactly max_tokens (throughput benchmarks, like vLLM's)


def command_settings(
    task: TaskSpec, args: argparse.Namespace
) -> tuple[RunSettings, SamplingSettings, list[int]]:
    """A model command's settings: the experiment's, the flags on top, the k values; all checked."""
    found = eval_settings(task, args.experiment, args.reward_kwargs, args.template_kwargs)
    sampling = sampling_settings(args, found)
    return found, sampling, checked_ks(args.command, getattr(args, "k", None), sampling)


def greedy(sampling: SamplingSettings) -> SamplingSettings:
    """How ``reward`` decodes: one greedy response per prompt, at ``sampling``'s length and seed."""
    return replace(sampling, n=1, temperature=0.0, top_p=1.0)


def sampling_settings(args: argparse.Namespace, settings: RunSettings) -> SamplingSettings:
    """The command's sampling options, where not given the training rollout's (temperature,
    top_p) and response length; ``reward`` has none and decodes greedily."""
    given = {"n": args.n} if "n" in args else {}
    for key in ("temperature", "top_p"):
        if key in args:
            flag, trained = getattr(args, key), getattr(settings, key)
            given[key] = flag if flag is not None else (1.0 if trained is None else trained)
    return SamplingSettings(
        max_tokens=args.max_tokens or settings.max_response_length, seed=args.seed, **given
    )


def default_ks(n: int) -> list[int]:
    """1, 4, 8, 16 up to n, and n."""
    return sorted({k for k in (1, 4, 8, 16) if k <= n} | {n})


def check_group(command: str, n: int, ks: Sequence[int] = ()) -> list[int]:
    """passk's k values (default: ``default_ks(n)``), returned checked against n, [] for the
    other commands; analyse's group size."""
    ks = (list(ks) or default_ks(n)) if command == "passk" else []
    bad = [k for k in ks if not 1 <= k <= n]
    if command == "passk" and bad:
        raise EvalError(f"--k {bad}: every k must be between 1 and --n {n}")
    if command == "analyse" and n < 2:
        raise EvalError("--n (or --rollout_n) must be at least 2: variance needs a group")
    return ks


def checked_ks(command: str, k_flag: list[int] | None, sampling: SamplingSettings) -> list[int]:
    """The passk command's k values (checked against n); analyse's group size checked; both
    need sampling (at temperature 0 every sample of a prompt is the same)."""
    n = sampling.n
    if command in ("passk", "analyse") and n > 1 and sampling.temperature <= 0.0:
        raise EvalError(
            f"--temperature 0 with --n {n}: greedy samples are all the same, so {command} would "
            "measure nothing; pass training's rollout temperature (e.g. --temperature 1.0)"
        )
    return check_group(command, n, k_flag or ())


# Upper bounds far beyond any real run: a typo'd value fails here, not after the model loads.
MAX_PROMPTS = 10_000_000
MAX_SAMPLES = 1024  # --n: GRPO groups are 4-64
MAX_TOKENS = 1_048_576  # above every model's context; the model's own limit is checked later
MAX_BATCH = 4096
MAX_TEMPERATURE = 10.0
# Below this, logits / temperature overflow: torch.multinomial then fails on inf/nan after the
# model has loaded. 0 (greedy) is allowed, and refused where it would measure nothing.
MIN_TEMPERATURE = 1e-3


def json_flag(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}): {text!r}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"format_score\": 0.1}'")
    return value


positive_int = int_in(1, MAX_PROMPTS)


def temperature_flag(text: str) -> float:
    """An argparse type: 0 (greedy) or a sampling temperature in [MIN_TEMPERATURE, MAX]."""
    value = float_in(0.0, MAX_TEMPERATURE)(text)
    if 0.0 < value < MIN_TEMPERATURE:
        raise argparse.ArgumentTypeError(
            f"{text} is too small to sample with: use 0 (greedy) or at least {MIN_TEMPERATURE}"
        )
    return value


temperature_flag.__name__ = f"0 or a number in [{MIN_TEMPERATURE}, {MAX_TEMPERATURE}]"


def k_list(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers") from None
    if not ks or ks[0] < 1 or ks[-1] > MAX_SAMPLES:
        raise argparse.ArgumentTypeError(f"{text!r}: k values must be between 1 and --n")
    return ks


def main(argv: Sequence[str] | None = None) -> int:
    fields = [name for name in RunSettings.__dataclass_fields__ if name != "origin"]
    parser = OneLineParser(description="Print a training experiment's eval settings.")
    parser.add_argument("experiment", help="a training experiment (configs/NAME.yaml)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as the launcher takes them")
    parser.add_argument(
        "--print",
        nargs="+",
        choices=fields,
        dest="fields",
        help="print these values on one line, space-separated (default: all, as JSON)",
    )
    args = parser.parse_args(argv)
    try:
        settings = asdict(experiment_settings(args.experiment, overrides=args.overrides))
    except EvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.fields:
        print(" ".join(json.dumps(settings[name], separators=(",", ":")) for name in args.fields))
    else:
        print(json.dumps(settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
