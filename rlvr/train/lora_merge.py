"""Merge the LoRA adapters of verl checkpoints into plain Hugging Face models.

verl 0.6.1 saves a LoRA run's adapter correctly under ``global_step_N/actor/lora_adapter/``
(``adapter_model.safetensors`` keyed ``base_model.model.model.layers.I.<module>.lora_A.weight``,
plus ``adapter_config.json`` whose ``base_model_name_or_path`` is the path verl loaded the base
from). Its ``hf_model`` save, by contrast, writes the FSDP *PEFT* model's state dict in fp32
(``...base_layer.weight``, ``...lora_A.default.weight``), which ``from_pretrained`` loads with
random layers. LoRA runs therefore skip ``hf_model`` (configs/adapter/lora32.yaml) and this
module writes ``actor/huggingface`` itself: the base with the adapter merged by PEFT, in the
base's own dtype, loadable with no missing or unexpected keys.

    python -m rlvr.train.lora_merge artifacts/checkpoints/countdown_qwen3_4b_lora   # every step
    python -m rlvr.train.lora_merge .../global_step_100/actor \
        --base_model Qwen/Qwen3-4B-Instruct-2507

A folder is replaced whole or not at all: the merge is built in a temporary sibling folder,
checked by loading it back, and moved into place with ``os.replace``; verl's own
``huggingface/`` is moved aside to ``huggingface.verl/``, never deleted. Finding nothing to do
needs no torch.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.common.checkpoints import TRACKER_FILE
from rlvr.common.cli import OneLineParser
from rlvr.common.files import (
    disk_full_translated,
    new_mode,
    read_safetensors_header,
    report_disk_full,
    swap_in,
    widen_to_umask,
)
from rlvr.common.messages import first_line
from rlvr.models.hub import HUB_ID, WeightsError, index_files, weight_files
from rlvr.models.hub import weight_state as hub_weight_state

ADAPTER_DIR = "lora_adapter"
HF_DIR = "huggingface"
SET_ASIDE = "huggingface.verl"  # where verl's own huggingface/ goes when a merge replaces it
TEMP_PREFIX = ".huggingface.merging-"

Log = Callable[[str], None]


class MergeError(Exception):
    """A checkpoint that cannot be merged (no adapter, base not found...): the CLI exits 2."""


def safetensors_keys(path: Path) -> list[str]:
    """Tensor names from a safetensors header: no torch needed."""
    try:
        header = read_safetensors_header(path)
    except (OSError, ValueError) as exc:
        raise MergeError(f"{path}: unreadable safetensors header ({exc})") from exc
    return [key for key in header if key != "__metadata__"]


def weight_state(folder: Path) -> str:
    """``rlvr.models.hub.weight_state`` (the rule pre-flight applies too): ``missing``,
    ``empty``, ``peft`` or ``plain``; MergeError for weights that cannot be read."""
    try:
        return hub_weight_state(folder)
    except WeightsError as exc:
        raise MergeError(str(exc)) from exc


def recorded_base(adapter_dir: Path) -> str:
    """The base model verl recorded in the adapter's config (the path it loaded the base from)."""
    config_file = adapter_dir / "adapter_config.json"
    try:
        base = json.loads(config_file.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError) as exc:
        raise MergeError(f"{config_file}: unreadable ({exc})") from exc
    if not base:
        raise MergeError(f"{config_file}: no base_model_name_or_path; pass --base_model")
    return str(base)


def adapter_rank(config: dict[str, Any]) -> int | None:
    """An adapter_config.json's rank: r, or a larger one in PEFT's per-module ``rank_pattern``;
    None where none is an int."""
    pattern = config.get("rank_pattern")
    ranks = [config.get("r"), *(pattern.values() if isinstance(pattern, dict) else ())]
    return max((r for r in ranks if isinstance(r, int) and not isinstance(r, bool)), default=None)


def pending(actor_dir: Path) -> bool:
    """A LoRA actor folder whose huggingface/ has no usable weights yet. An adapter folder
    without its files (verl logs a failed adapter save and goes on) counts, so that the merge
    reports it."""
    return (actor_dir / ADAPTER_DIR).is_dir() and weight_state(actor_dir / HF_DIR) != "plain"


def lora_actor_dirs(checkpoint_root: Path) -> list[Path]:
    """Every ``global_step_N/actor`` with a LoRA adapter, in step order."""

    def step(actor: Path) -> int:
        number = actor.parent.name.removeprefix("global_step_")
        return int(number) if number.isdigit() else -1

    actors = checkpoint_root.glob("global_step_*/actor")
    return sorted((a for a in actors if (a / ADAPTER_DIR).is_dir()), key=step)


def merge_checkpoint(
    actor_dir: str | Path, base_model: str | None = None, log: Log | None = None
) -> Path:
    """Write ``actor_dir/huggingface`` as the base with ``actor_dir/lora_adapter`` merged.

    Returns the huggingface folder. One that already holds ordinary weights is left alone.
    """
    actor = Path(actor_dir).expanduser()
    adapter, hf = actor / ADAPTER_DIR, actor / HF_DIR
    if (
        not (adapter / "adapter_config.json").is_file()
        or not (adapter / "adapter_model.safetensors").is_file()
    ):
        raise MergeError(
            f"{actor}: no {ADAPTER_DIR}/adapter_config.json and adapter_model.safetensors; "
            "pass a LoRA run's global_step_N/actor folder"
        )
    for stale in sorted(actor.glob(f"{TEMP_PREFIX}*")):  # a merge killed before its clean-up
        shutil.rmtree(stale, ignore_errors=True)
        _say(log, f"removed {stale.name}, left by a merge that was stopped")
    state = weight_state(hf)
    if state == "plain":
        _say(log, f"already merged: {hf}")
        return hf
    base = base_model or recorded_base(adapter)
    if not Path(base).expanduser().exists() and not HUB_ID.match(base):
        raise MergeError(
            f"base model {base} (from {adapter / 'adapter_config.json'}) does not exist; pass "
            "--base_model"
        )
    # verl's config/tokenizer files to carry over: huggingface/, or a folder set aside by a
    # merge that stopped between its two renames.
    carry = hf if hf.is_dir() else next(iter(sorted(actor.glob(f"{SET_ASIDE}*"))), None)
    temp = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=actor))
    aside: Path | None = None
    try:
        os.chmod(temp, new_mode(hf, folder=True))  # not mkdtemp's 0700: others load it too
        dtype = _write_merged(adapter, base, temp, carry, hf)
        widen_to_umask(*temp.iterdir())  # safetensors saves the weights 0600
        load_strictly(temp, dtype="auto")
        aside = swap_in(temp, hf, _free_name(actor / SET_ASIDE))
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    _say(log, f"merged {adapter} onto {base} -> {hf} ({dtype})")
    if aside is not None:
        what = "PEFT-keyed fp32 weights, unusable" if state == "peft" else "config and tokenizer"
        _say(log, f"  verl's original folder ({what}) kept as {aside}")
    return hf


def merge_all(
    checkpoint_root: str | Path, base_model: str | None = None, log: Log | None = None
) -> list[Path]:
    """Merge every LoRA ``global_step_*/actor`` under the root that has no usable weights yet.

    A root without LoRA checkpoints is a no-op that imports no torch.
    """
    root = Path(checkpoint_root).expanduser()
    return [
        merge_checkpoint(actor, base_model, log)
        for actor in lora_actor_dirs(root)
        if pending(actor)
    ]


def _say(log: Log | None, message: str) -> None:
    if log is not None:
        log(message)


def _free_name(path: Path) -> Path:
    """``path``, or ``path.1``, ``path.2``...: never move onto something that exists."""
    candidate, index = path, 0
    while candidate.exists():
        index += 1
        candidate = path.with_name(f"{path.name}.{index}")
    return candidate


def _write_merged(
    adapter: Path, base: str, out: Path, carry: Path | None, destination: Path
) -> str:
    """Save base + adapter, merged by PEFT in fp32 and rounded once to the base's dtype, into
    ``out``; a full disk raises DiskFullError naming ``destination``, where it goes next."""
    import torch
    from peft import PeftModel
    from peft.utils.save_and_load import get_peft_model_state_dict
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(base)
        dtype = config.dtype if config.dtype is not None else torch.float32
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        model: Any = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise MergeError(f"could not load the base model {base}: {first_line(exc)}") from exc
    try:
        with warnings.catch_warnings():  # verl's adapter_config.json has it (asdict): harmless
            warnings.filterwarnings("ignore", message=".*contains a `runtime_config` key")
            peft_model = PeftModel.from_pretrained(model, str(adapter))
    except (RuntimeError, ValueError, KeyError) as exc:  # shapes of another base model
        raise MergeError(f"{adapter} does not fit the base {base}: {first_line(exc)}") from exc
    # PEFT loads adapters non-strictly, and lora_B starts at zero: a key that does not match
    # would silently leave that layer unadapted.
    with safe_open(str(adapter / "adapter_model.safetensors"), framework="pt") as handle:
        saved = set(handle.keys())
    expected = set(get_peft_model_state_dict(peft_model))
    if saved != expected:
        raise MergeError(
            f"{adapter} does not match the base {base}: missing "
            f"{sorted(expected - saved)[:3]}, unexpected {sorted(saved - expected)[:3]}"
        )
    merged = peft_model.merge_and_unload().to(dtype)
    weight_bytes = sum(t.numel() * t.element_size() for t in merged.state_dict().values())
    with disk_full_translated(destination, needed_bytes=weight_bytes):
        merged.save_pretrained(out, safe_serialization=True)
        if carry is not None:
            skip = set(weight_files(carry)) | set(index_files(carry))
            for file in carry.iterdir():
                if file.is_file() and file not in skip and not (out / file.name).exists():
                    shutil.copy2(file, out / file.name)
        if not (out / "tokenizer_config.json").exists():
            AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return str(dtype).removeprefix("torch.")


def load_strictly(folder: Path, **kwargs: Any) -> Any:
    """The model in ``folder``; MergeError if loading reports any missing, unexpected or
    mismatched key (transformers would random-initialise them). OSError/ValueError pass through
    for a folder that does not load at all."""
    from transformers import AutoModelForCausalLM

    loaded: Any = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True, **kwargs)
    model, info = loaded
    problems = {name: keys for name, keys in info.items() if keys}
    if problems:
        raise MergeError(f"the model in {folder} does not load cleanly: {problems}")
    return model


def _actor_dir(path: Path) -> Path | None:
    """The actor folder ``path`` names (actor/, actor/huggingface/ or global_step_N/), if any."""
    if (path / ADAPTER_DIR).is_dir():
        return path
    if path.name == HF_DIR and (path.parent / ADAPTER_DIR).is_dir():
        return path.parent
    if (path / "actor" / ADAPTER_DIR).is_dir():
        return path / "actor"
    return None


def _is_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a verl checkpoint of any kind (a root, a step, an actor folder), LoRA
    or not: a folder that is none of these is a wrong argument, not "nothing to merge"."""
    return (
        any(step.is_dir() for step in path.glob("global_step_*"))
        or (path / TRACKER_FILE).is_file()
        or (path / "actor").is_dir()
        or path.name.startswith("global_step_")
        or path.name == "actor"
        or (path.name == HF_DIR and path.parent.name == "actor")
    )


def _experiment_root(experiment: str, overrides: list[str]) -> Path:
    """``trainer.default_local_dir`` of a composed experiment, as the launcher ran it."""
    from rlvr.config.compose import compose

    try:
        return Path(str(compose(experiment, overrides).trainer.default_local_dir))
    except Exception as exc:  # Hydra's errors: unknown experiment, bad override
        raise MergeError(f"--experiment {experiment}: {first_line(exc)}") from exc


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m rlvr.train.lora_merge",
        description="Merge verl LoRA checkpoints' lora_adapter/ into actor/huggingface/ (full "
        "model in the base's dtype). Checkpoints that already hold weights are left alone.",
    )
    parser.add_argument(
        "target",
        nargs="*",
        help="a checkpoint root (trainer.default_local_dir: merges every global_step_N), or one "
        "global_step_N, its actor/ or actor/huggingface/ folder; with --experiment, the "
        "experiment's Hydra overrides instead",
    )
    parser.add_argument(
        "--experiment",
        default=None,
        help="merge under this experiment's trainer.default_local_dir, as composed with the "
        "given overrides (what the launcher runs after training; no checkpoints is fine)",
    )
    parser.add_argument(
        "--base_model",
        default=None,
        help="base model folder or hub id (default: base_model_name_or_path of the adapter)",
    )
    args = parser.parse_args(argv)
    if args.experiment is None and len(args.target) != 1:
        parser.error("pass one checkpoint folder, or --experiment NAME [overrides...]")
    try:
        if args.experiment is not None:
            path = _experiment_root(args.experiment, args.target)
            if not path.is_dir():
                print(f"nothing to merge: {path} does not exist (no checkpoint saved)")
                return 0
        else:
            path = Path(args.target[0]).expanduser()
            if not path.is_dir():
                raise MergeError(f"{args.target[0]}: no such folder")
        actor = _actor_dir(path)
        if actor is not None:
            merge_checkpoint(actor, args.base_model, log=print)
            return 0
        if args.experiment is None and not _is_checkpoint(path):
            raise MergeError(
                f"{args.target[0]}: not a verl checkpoint (no global_step_N/ or actor/ in it); "
                "pass a checkpoint root (trainer.default_local_dir), a global_step_N folder or "
                "its actor/"
            )
        if not merge_all(path, args.base_model, log=print):
            count = len(lora_actor_dirs(path))
            print(
                f"nothing to merge under {path}: "
                + (f"{count} LoRA checkpoint(s), all merged" if count else "no LoRA checkpoints")
            )
    except MergeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a full disk is one line, exit 1; anything else is a bug
        return report_disk_full(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
