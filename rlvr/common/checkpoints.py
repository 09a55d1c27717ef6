"""verl's checkpoint folder layout, read in one place: ``global_step_N/`` folders and the tracker
``latest_checkpointed_iteration.txt`` that names the newest complete one (written by
``RayPPOTrainer._save_checkpoint`` and verl's SFT trainer after each save)."""

from __future__ import annotations

from pathlib import Path

TRACKER_FILE = "latest_checkpointed_iteration.txt"
STEP_PREFIX = "global_step_"


class UnreadableTracker(ValueError):
    """A tracker without a step number: a crash between verl's open and write leaves it empty."""


def tracked_step(folder: Path) -> int | None:
    """The step the tracker in ``folder`` names; None without a tracker. Raises
    UnreadableTracker when it is empty, not a number, not UTF-8 or unreadable."""
    path = folder / TRACKER_FILE
    try:
        return int(path.read_bytes().decode())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UnreadableTracker(f"{path}: holds no step number") from exc


def saved_steps(folder: Path, holding: str | None = None) -> list[int]:
    """The N of every ``global_step_N`` folder in ``folder``, ascending; with ``holding``, only
    those with that subfolder (``actor``: a policy checkpoint)."""
    return sorted(
        int(path.name.removeprefix(STEP_PREFIX))
        for path in folder.glob(f"{STEP_PREFIX}*")
        if path.name.removeprefix(STEP_PREFIX).isdigit()
        and path.is_dir()
        and (holding is None or (path / holding).is_dir())
    )
