"""A Tinker run's folder, laid out as a verl run's so that the report, the sweep and eval read it
unchanged (``trainer.default_local_dir``):

    metrics.jsonl                    {"step": N, "data": {...}} per step, verl's metric names,
                                     written by verl's file logger (rlvr.tinker.tracking)
    wandb_run_id.txt                 the run's WandB id, which a resumed run continues
    rollouts/<step>.jsonl            one line per sampled response, as verl's rollout dumps
    run_plan.json                    the planned steps, model and task (rlvr.report.run_plan)
    checkpoints.jsonl                one line per Tinker checkpoint: step, tinker:// paths
    latest_checkpointed_iteration.txt  the newest checkpoint's step (verl's tracker file)
    adapter/                         the last checkpoint's LoRA adapter, downloaded (PEFT files)
    adapter.json                     which step adapter/ holds, and its tinker:// source: a rerun
                                     of a finished run exports and downloads nothing again

Every line is written whole with its newline in one append, and a line a killed run left torn
is cut before the next append (``drop_torn_tail``); files are written staged and renamed.
"""

from __future__ import annotations

import json
import math
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlvr.common.checkpoints import TRACKER_FILE
from rlvr.common.files import staged_dir, write_text_atomic

LEDGER_FILE = "checkpoints.jsonl"
ADAPTER_DIR = "adapter"
ADAPTER_RECORD = "adapter.json"
PEFT_CONFIG = "adapter_config.json"


@dataclass(frozen=True)
class Checkpoint:
    """One ``save_state`` of a run: where the server keeps it, and what it was trained as."""

    step: int
    state_path: str  # tinker://... of save_state: weights and optimizer, what a resume loads
    model: str
    lora_rank: int


def append_line(path: Path, record: Mapping[str, Any]) -> None:
    """One JSON line appended whole (non-finite numbers as null, which readers skip)."""
    from rlvr.report.metrics_log import drop_torn_tail  # (rlvr.report's import pulls in scipy)

    path.parent.mkdir(parents=True, exist_ok=True)
    drop_torn_tail(path)
    clean = {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()
    }
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(clean, default=_plain) + "\n")


def _plain(value: Any) -> Any:
    """numpy arrays and scalars (a task's ground truth) as JSON."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def dump_rollouts(folder: Path, step: int, rows: list[dict[str, Any]]) -> None:
    """The step's responses as ``rollouts/<step>.jsonl``, whole (a resumed step replaces it)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps({**row, "step": step}, default=_plain) + "\n" for row in rows)
    write_text_atomic(folder / f"{step}.jsonl", text)


def checkpoints(run_dir: Path) -> list[Checkpoint]:
    """The run's checkpoints, oldest first (a torn last line, from a kill, is not one)."""
    path = run_dir / LEDGER_FILE
    if not path.is_file():
        return []
    found = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        try:
            found.append(Checkpoint(**json.loads(line)))
        except (TypeError, ValueError):
            raise ValueError(f"{path}: not a checkpoint record: {line[:200]!r}") from None
    return found


def record_checkpoint(run_dir: Path, checkpoint: Checkpoint) -> None:
    """Append the checkpoint, then point verl's tracker file at its step (the report's status)."""
    append_line(run_dir / LEDGER_FILE, asdict(checkpoint))
    write_text_atomic(run_dir / TRACKER_FILE, str(checkpoint.step))


def identity_problem(run_dir: Path, model: str, lora_rank: int) -> str | None:
    """A run folder whose checkpoints were trained as another model or rank: resuming from them
    would continue another run."""
    saved = checkpoints(run_dir)
    if not saved or (saved[-1].model, saved[-1].lora_rank) == (model, lora_rank):
        return None
    last = saved[-1]
    return (
        f"{run_dir} holds checkpoints of {last.model} at LoRA rank {last.lora_rank}, not "
        f"{model} at rank {lora_rank}; set trainer.default_local_dir to a new folder"
    )


def store_adapter(url: str, run_dir: Path, timeout_s: float) -> Path:
    """The checkpoint behind ``url`` as ``run_dir/adapter``, written whole (staged, then swapped
    in). Tinker's service gives an https address of a tar archive; a TuFT server gives a
    ``file://`` path on its own machine (``build_archive_url``), copied when it is this one."""
    from urllib.parse import unquote, urlparse

    destination = run_dir / ADAPTER_DIR
    parsed = urlparse(url)
    with staged_dir(destination) as staging:
        if parsed.scheme == "file":
            source = Path(unquote(parsed.path))
            if not source.is_dir():
                raise FileNotFoundError(
                    f"{source}: the server's checkpoint folder is not on this machine; copy it "
                    f"from the server into {destination}"
                )
            shutil.copytree(source, staging, dirs_exist_ok=True)
        else:
            archive = _download(url, timeout_s)
            try:
                with tarfile.open(archive) as tar:
                    tar.extractall(staging, filter="data")
            finally:
                archive.unlink(missing_ok=True)
        _hoist_adapter(staging)
    return destination


def record_adapter(run_dir: Path, step: int, source: str) -> None:
    """Written once ``adapter/`` holds the adapter of ``step`` (after the swap: a kill between
    the two leaves the old record, which makes the next run fetch it again, never skip it)."""
    write_text_atomic(run_dir / ADAPTER_RECORD, json.dumps({"step": step, "source": source}) + "\n")


def adapter_step(run_dir: Path) -> int | None:
    """The step whose adapter ``adapter/`` holds, by its record; None without one (or without
    the folder, or a record that does not read)."""
    if not (run_dir / ADAPTER_DIR).is_dir():
        return None
    try:
        step = json.loads((run_dir / ADAPTER_RECORD).read_text(encoding="utf-8"))["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _hoist_adapter(folder: Path) -> None:
    """PEFT's files (``adapter_config.json``) into ``folder`` itself when the checkpoint keeps
    them one folder down, so that eval loads ``adapter/`` as it is."""
    if (folder / PEFT_CONFIG).is_file():
        return
    inner = [p.parent for p in folder.glob(f"*/{PEFT_CONFIG}")]
    if len(inner) == 1:
        for item in inner[0].iterdir():
            if not (folder / item.name).exists():
                item.rename(folder / item.name)


def _download(url: str, timeout_s: float) -> Path:
    """``url`` into a temporary file (the caller removes it)."""
    import httpx

    fd, name = tempfile.mkstemp(prefix="rlvr-adapter-", suffix=".tar")
    try:
        with (
            open(fd, "wb") as handle,
            httpx.stream("GET", url, timeout=timeout_s, follow_redirects=True) as response,
        ):
            response.raise_for_status()
            for chunk in response.iter_bytes():
                handle.write(chunk)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)
