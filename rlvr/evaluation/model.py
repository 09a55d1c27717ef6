"""The model stage: what ``--model_path`` names (a folder, a LoRA adapter, a hub id), checked
before any weights load; and the checks of its chat template and end-of-sequence handling that
``analyse`` prints, ok or a warning ending with its fix (docs/EVALUATION_DESIGN.md)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.common.messages import first_line
from rlvr.evaluation import EvalError
from rlvr.evaluation.metrics import CAP_HIT_RAISE_ABOVE
from rlvr.evaluation.records import CheckLine, GradedSample, JSONDict
from rlvr.models.hub import HUB_ID, config_problem, index_problem, looks_local, read_json
from rlvr.train.lora_merge import ADAPTER_DIR, MergeError, adapter_rank, weight_state

TOKENIZER_JSON = ("tokenizer.json", "tokenizer_config.json")  # what an adapter folder may save
TOKENIZER_FILES = (*TOKENIZER_JSON, "tokenizer.model", "vocab.json")


@dataclass(frozen=True)
class ModelSource:
    kind: str  # "folder" | "lora" | "hub"
    path: str
    base: str | None = None  # the base model of a LoRA adapter
    tokenizer: str | None = None  # where the tokenizer is, when not next to the weights
    lora_rank: int | None = None  # a LoRA adapter's largest rank (r, rank_pattern)

    @property
    def weights_path(self) -> str:  # a LoRA adapter's base, else the model itself
        return self.base if self.kind == "lora" and self.base else self.path

    @property
    def tokenizer_path(self) -> str:
        """Where it was given; else the adapter's own, if saved; else beside the weights."""
        if self.tokenizer is not None:
            return self.tokenizer
        saved = any((Path(self.path) / name).exists() for name in TOKENIZER_JSON)
        return self.path if saved else self.weights_path


def resolve_model(
    name: str,
    base_model: str | None = None,
    label: str = "--model_path",
    base_of: Path | None = None,
) -> ModelSource:
    """Classify ``name`` and fail at once, with the reason, when it cannot be a model; ``label``
    (the flag or file it came from) starts every refusal. ``base_of`` is the adapter whose base
    this is: a base is a complete model, never another adapter, so a chain of adapters (or one
    naming itself) is refused, not followed."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise EvalError(f"{label} {name}: is a file; pass the model's folder")
        if (path / "adapter_config.json").is_file():
            if base_of is not None:
                raise EvalError(_adapter_as_base(label, name, path, base_of))
            return _lora_source(path, base_model)
        if (path / "config.json").is_file():
            return _folder_source(path, name, label, base_model, base_of)
        raise EvalError(
            f"{label} {name}: no config.json or adapter_config.json inside; for a "
            "verl checkpoint pass .../global_step_N/actor/huggingface"
        )
    if looks_local(name):  # the same rule pre-flight applies (rlvr.models.hub)
        where = f" in {path.parent}/" if path.parent.is_dir() else ""
        raise EvalError(
            f"{label} {name}: no such folder{where} (taken as a local path); check "
            "the name, or pass the model's folder"
        )
    if HUB_ID.match(name):
        return ModelSource("hub", name)
    raise EvalError(f"{label} {name}: no such folder, and not a hub id (org/name)")


def _folder_source(
    path: Path, name: str, label: str, base_model: str | None, base_of: Path | None
) -> ModelSource:
    """A folder with a config.json: its config, index and weights checked as transformers
    will read them."""
    problem = config_problem(path / "config.json") or index_problem(path)
    if problem:
        raise EvalError(f"{label} {name}: {problem}")
    try:
        weights = weight_state(path)
    except MergeError as exc:
        raise EvalError(f"{label} {name}: {exc}") from exc
    adapter = path.parent / ADAPTER_DIR
    if weights == "peft":  # verl 0.6.1's hf_model of a LoRA run: random layers on load
        raise EvalError(
            f"{label} {name}: PEFT-keyed LoRA weights (verl's hf_model save of "
            "a LoRA run), which load as random layers; merge the adapter first: uv run "
            f"scripts/merge_lora.py {path.parent}"
        )
    if weights == "empty" and (adapter / "adapter_config.json").is_file():
        if base_of is not None:
            raise EvalError(_adapter_as_base(label, name, adapter, base_of))
        # A LoRA checkpoint not merged yet: verl wrote config + tokenizer only here.
        source = _lora_source(adapter, base_model, tokenizer=str(path))
        print(
            f"{label} {name}: no weights; loading the LoRA adapter {adapter} "
            f"on its base {source.base}",
            file=sys.stderr,
        )
        return source
    if weights == "empty":
        raise EvalError(
            f"{label} {name}: config.json but no weight files "
            "(*.safetensors or pytorch_model*.bin); pass a complete model folder"
        )
    if not any((path / file).is_file() for file in TOKENIZER_FILES):
        raise EvalError(
            f"{label} {name}: no tokenizer ({' or '.join(TOKENIZER_FILES)}); "
            "pass a folder saved with its tokenizer"
        )
    return ModelSource("folder", str(path))


def _adapter_as_base(label: str, name: str, found: Path, adapter: Path) -> str:
    itself = found.resolve() == adapter.resolve()
    what = "the adapter itself" if itself else f"another LoRA adapter ({found})"
    return (
        f"{label} {name}: is {what}, not a base model; pass --base_model with the complete "
        "model the adapter was trained on"
    )


def check_context(source: ModelSource, max_tokens: int) -> None:
    """``--max_tokens`` within a local model's context (``max_position_embeddings``): beyond it
    HF generates garbage and vLLM refuses, both only after the model has loaded."""
    config_file = Path(source.weights_path) / "config.json"
    config, _ = read_json(config_file)  # None: a hub id, or a config the loader will judge
    context = config.get("max_position_embeddings") if isinstance(config, dict) else None
    if isinstance(context, int) and max_tokens >= context:
        raise EvalError(
            f"--max_tokens {max_tokens}: the model's context is {context} tokens "
            f"(max_position_embeddings in {config_file}), prompt included; "
            "lower --max_tokens"
        )


def _lora_source(
    adapter: Path, base_model: str | None, tokenizer: str | None = None
) -> ModelSource:
    adapter_config = adapter / "adapter_config.json"
    config, problem = read_json(adapter_config)
    if problem:
        raise EvalError(f"{problem}; pass a LoRA adapter folder saved by PEFT")
    if not isinstance(config, dict):
        raise EvalError(f"{adapter_config}: a JSON {type(config).__name__}, not an object")
    recorded: object = config.get("base_model_name_or_path")
    if base_model:
        base, label = base_model, "--base_model"
    elif recorded is None or recorded == "":
        raise EvalError(f"{adapter_config}: no base_model_name_or_path; pass --base_model")
    elif not isinstance(recorded, str):
        raise EvalError(
            f"{adapter_config}: base_model_name_or_path is {json.dumps(recorded)}, not a model "
            "folder or hub id (a string); fix it or pass --base_model"
        )
    else:
        base, label = recorded, f"{adapter_config}: base_model_name_or_path"
    try:
        base_source = resolve_model(base, label=label, base_of=adapter)  # the base must itself load
    except EvalError as exc:
        if base_model or "--base_model" in str(exc):
            raise
        raise EvalError(f"{exc}; or pass --base_model") from exc
    return ModelSource("lora", str(adapter), base_source.path, tokenizer, adapter_rank(config))


_MARKER = "Final answer: 42."  # an assistant turn's text, found again in the rendered turn
_PROBE = [{"role": "user", "content": "What is 6 x 7?"}]
_NO_TEMPLATE_FIX = (
    "verl's RLHFDataset renders every prompt with apply_chat_template "
    "(verl/utils/dataset/rl_dataset.py) and fails without one; fix: copy the instruct model's "
    "chat_template into tokenizer_config.json, or set data.apply_chat_template_kwargs.chat_template"
)


def _ok(name: str, message: str) -> CheckLine:
    return CheckLine(name=name, status="ok", message=message)


def _warning(name: str, message: str) -> CheckLine:
    return CheckLine(name=name, status="warning", message=message)


def has_chat_template(tokenizer: Any, template_kwargs: JSONDict) -> bool:
    return bool(template_kwargs.get("chat_template") or getattr(tokenizer, "chat_template", None))


def require_chat_template(tokenizer: Any, template_kwargs: JSONDict) -> None:
    """Refuse, in one line, a tokenizer no prompt can be rendered with."""
    if not has_chat_template(tokenizer, template_kwargs):
        raise EvalError(f"the tokenizer has no chat template: {_NO_TEMPLATE_FIX}")


def _render(tokenizer: Any, messages: list[dict[str, str]], **kwargs: Any) -> str:
    return str(tokenizer.apply_chat_template(messages, tokenize=False, **kwargs))


def _name(tokenizer: Any, token_id: int) -> str:
    return f"{tokenizer.convert_ids_to_tokens(token_id)} (id {token_id})"


def end_of_turn_id(tokenizer: Any, template_kwargs: JSONDict) -> int | None:
    """The special token the template closes an assistant turn with (ChatML's ``<|im_end|>``),
    or None when it closes turns with text only."""
    turn = [*_PROBE, {"role": "assistant", "content": _MARKER}]
    text = _render(tokenizer, turn, **template_kwargs)
    if _MARKER not in text:
        return None
    after = tokenizer(text.split(_MARKER, 1)[1], add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids) | {
        token_id for token_id, added in tokenizer.added_tokens_decoder.items() if added.special
    }
    return next((token_id for token_id in after if token_id in special), None)


def generation_config_eos(model_folder: str | Path) -> list[int] | None:
    """``eos_token_id`` of the model's ``generation_config.json`` (None: no such file)."""
    from transformers import GenerationConfig

    try:
        configured = GenerationConfig.from_pretrained(str(model_folder)).eos_token_id
    except (OSError, ValueError):
        return None
    if configured is None:
        return []
    return [int(t) for t in configured] if isinstance(configured, list) else [int(configured)]


def stop_ids(tokenizer: Any, generation_eos: Sequence[int | None] | None) -> list[int]:
    """What generation stops on, as vLLM does (vllm/sampling_params.py,
    ``update_from_generation_config``) and the HF backend: the tokenizer's eos plus the
    generation config's ``eos_token_id`` (Qwen lists two)."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    for token in generation_eos or ():
        if token is not None and token not in ids:
            ids.append(int(token))
    return ids


def chat_template_check(tokenizer: Any, template_kwargs: JSONDict) -> CheckLine:
    """Base or instruct: an instruct model's tokenizer ends a turn with its eos."""
    if not has_chat_template(tokenizer, template_kwargs):
        return _warning("chat template", f"none; {_NO_TEMPLATE_FIX}")
    turn_end, eos = end_of_turn_id(tokenizer, template_kwargs), tokenizer.eos_token_id
    rendered = "prompts render through the tokenizer's chat template, as verl renders them"
    if turn_end is None or turn_end == eos:
        ends = "" if turn_end is None else f"; turns end with its eos {_name(tokenizer, eos)}"
        return _ok("chat template", f"{rendered}{ends}")
    return _warning(
        "chat template",
        f"{rendered}, but turns end with {_name(tokenizer, turn_end)} and its eos is "
        f"{'none' if eos is None else _name(tokenizer, eos)}: the tokenizer of a base model, "
        "not tuned to this template or to end its turn; fix: the instruct model, or few-shot "
        "prompts (data prep --template fewshot) or SFT first; watch the format rate",
    )


def thinking_check(tokenizer: Any, template_kwargs: JSONDict) -> CheckLine:
    """Qwen3's switch: a template whose prompt changes with ``enable_thinking`` thinks unless
    it is false (huggingface.co/Qwen/Qwen3-4B, "Switching Between Thinking and Non-Thinking").
    Needs a chat template."""
    kwargs = {k: v for k, v in template_kwargs.items() if k != "enable_thinking"}
    on = _render(tokenizer, _PROBE, add_generation_prompt=True, enable_thinking=True, **kwargs)
    off = _render(tokenizer, _PROBE, add_generation_prompt=True, enable_thinking=False, **kwargs)
    if on == off:
        return _ok("thinking", "the template has no thinking switch")
    if template_kwargs.get("enable_thinking") is False:
        return _ok("thinking", "thinking off (enable_thinking: false)")
    return _warning(
        "thinking",
        "the template has a thinking switch and thinking is on (enable_thinking "
        f"{'unset: on by default' if 'enable_thinking' not in template_kwargs else 'true'}): "
        "the model spends the response budget in <think> before answering; fix: "
        "data.apply_chat_template_kwargs.enable_thinking=false (eval: --template_kwargs "
        "'{\"enable_thinking\": false}'), or budget data.max_response_length for thinking",
    )


def end_of_turn_check(
    tokenizer: Any, template_kwargs: JSONDict, generation_eos: Sequence[int] | None
) -> CheckLine:
    """The token that ends a turn must stop generation, or a finished answer runs on."""
    turn_end = end_of_turn_id(tokenizer, template_kwargs)
    stops = stop_ids(tokenizer, generation_eos)
    named = ", ".join(_name(tokenizer, t) for t in stops) or "none"
    if turn_end is None:
        return _ok("end of turn", f"turns end with text; stop tokens: {named}")
    if turn_end in stops:
        return _ok("end of turn", f"{_name(tokenizer, turn_end)} ends a turn and stops generation")
    return _warning(
        "end of turn",
        f"{_name(tokenizer, turn_end)} ends a turn but is no stop token (stop tokens: "
        f"{named}): an answer runs on past its turn to the cap; fix: add {turn_end} to "
        "eos_token_id in the model's generation_config.json",
    )


def eos_ids_check(tokenizer: Any, generation_eos: Sequence[int] | None) -> CheckLine:
    """The tokenizer's eos and the generation config's must agree: vLLM stops on both, while
    verl's rollout masks each response after the generation config's ids when the model has one
    (verl/workers/fsdp_workers.py, ``generate_sequences``; ``get_response_mask``)."""
    eos = tokenizer.eos_token_id
    if generation_eos is None or eos is None:
        source = "no generation_config.json" if generation_eos is None else "no tokenizer eos"
        return _ok("eos ids", f"{source}: one set of stop ids")
    listed = ", ".join(_name(tokenizer, t) for t in generation_eos) or "none"
    if eos in generation_eos:
        return _ok(
            "eos ids", f"generation_config.json's eos_token_id ({listed}) holds the tokenizer's eos"
        )
    return _warning(
        "eos ids",
        f"the tokenizer's eos {_name(tokenizer, eos)} is not in generation_config.json's "
        f"eos_token_id ({listed}): vLLM stops on both, verl masks responses at the latter "
        f"only; fix: add {eos} to eos_token_id in generation_config.json",
    )


def responses_end_check(
    tokenizer: Any,
    samples: Sequence[GradedSample],
    cap: int,
    turn_end: int | None,
    stops: Sequence[int],
) -> CheckLine:
    """How many samples ended with a stop token, and how many ran to the cap; a turn's end
    among the capped tokens is an end-of-sequence token generation did not stop on."""
    capped = [s for s in samples if s.finish_reason == "length"]
    share = len(capped) / len(samples) if samples else 0.0
    found = f"{1 - share:.0%} ended with a stop token, {share:.0%} hit the {cap}-token cap"
    if share <= CAP_HIT_RAISE_ABOVE:
        return _ok("responses end", found)
    if turn_end is not None and turn_end not in stops:
        ran_on = sum(turn_end in s.token_ids for s in capped)
        if ran_on:
            return _warning(
                "responses end",
                f"{found}; {ran_on} of those emitted {_name(tokenizer, turn_end)} and ran on; "
                f"fix: add {turn_end} to eos_token_id in generation_config.json",
            )
    if len(capped) == len(samples):
        why = (
            "none ended: the model may never emit a stop token (see end of turn and eos ids), "
            "or the cap is far too short"
        )
    else:
        why = "cut answers score as wrong"
    return _warning(
        "responses end", f"{found}; {why}; fix: data.max_response_length as suggested above"
    )


def model_checks(
    tokenizer: Any,
    template_kwargs: JSONDict,
    generation_eos: Sequence[int] | None,
    graded: Sequence[Sequence[GradedSample]],
    cap: int,
) -> list[CheckLine]:
    """Every check, in the order a reader follows: template, thinking, stop tokens, samples."""
    samples = [s for group in graded for s in group]
    templated = has_chat_template(tokenizer, template_kwargs)
    try:
        turn_end = end_of_turn_id(tokenizer, template_kwargs) if templated else None
    except Exception:  # the end-of-turn check below says why
        turn_end = None
    stops = stop_ids(tokenizer, generation_eos)
    checks = [_checked("chat template", lambda: chat_template_check(tokenizer, template_kwargs))]
    if templated:
        checks += [
            _checked("thinking", lambda: thinking_check(tokenizer, template_kwargs)),
            _checked(
                "end of turn", lambda: end_of_turn_check(tokenizer, template_kwargs, generation_eos)
            ),
        ]
    return [
        *checks,
        eos_ids_check(tokenizer, generation_eos),
        responses_end_check(tokenizer, samples, cap, turn_end, stops),
    ]


def _checked(name: str, check: Callable[[], CheckLine]) -> CheckLine:
    """The check, or a warning where the model's own template fails on it: a third-party Jinja
    template can raise anything, and the probe's samples must not be lost to it."""
    try:
        return check()
    except Exception as exc:
        return _warning(name, f"could not check: the chat template failed ({first_line(exc)})")
