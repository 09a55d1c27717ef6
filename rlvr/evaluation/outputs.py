"""Where eval results go, written so that a run folder never mixes two runs.

A model command writes into a staging folder beside its ``--output``
(``.<name>.partial-<pid>``) and moves it into place whole once the run has completed. An
existing output is refused (``--force`` replaces it, and only after the new run completed);
an interrupted run leaves the old folder untouched and its partial samples in the staging
folder. Single files (``compare --output``, ``filter --output``) are written atomically under
the same rule.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlvr.common.files import DiskFullError, disk_full_translated, staged, swap_in, tree_size
from rlvr.common.paths import ROOT
from rlvr.common.signals import signals_deferred
from rlvr.evaluation.errors import EvalError


def default_output_dir(task: str, command: str, model_path: str) -> Path:
    """``artifacts/eval/<task>_<command>_<model>``, the model named by its distinctive parts."""
    parts = [p for p in Path(model_path).parts if p not in ("actor", "huggingface", "/")]
    slug = "-".join(parts[-2:]) if parts else "model"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", slug).strip("_.") or "model"
    return ROOT / "artifacts" / "eval" / f"{task}_{command}_{slug}"


RUN_FILES = ("summary.json", "samples.jsonl")  # what makes a folder an eval run folder


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _refusal(flag: str, path: Path) -> EvalError:
    return EvalError(
        f"{flag} {path} already exists; pass --force to replace it once the new results are "
        f"complete, or choose another {flag}"
    )


def _link_refusal(flag: str, path: Path) -> EvalError:
    target = os.readlink(path)
    dangling = "" if path.exists() else ", which does not exist"
    return EvalError(
        f"{flag} {path} is a symbolic link (to {target}{dangling}); pass a real path, not a link"
    )


def check_writable(path: Path, flag: str = "--output") -> None:
    """Refuse, before any work, an output that could never be written: one below a file (or
    a dangling link), or in a folder this process may not write in."""
    path = Path(os.path.abspath(path))
    folder = path.parent
    while not _exists(folder) and folder != folder.parent:
        folder = folder.parent
    if folder.is_symlink() and not folder.exists():
        raise EvalError(
            f"{flag} {path}: {folder} is a dangling symbolic link; choose another {flag}"
        )
    if not folder.is_dir():
        raise EvalError(f"{flag} {path}: {folder} is a file, not a folder; choose another {flag}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise EvalError(
            f"{flag} {path}: cannot write in {folder} (permission denied); choose another {flag}"
        )


def refuse_existing(path: Path, force: bool, flag: str = "--output") -> None:
    """A one-line EvalError when ``path`` exists and ``--force`` was not given, when
    ``--force`` would replace a folder with a file, when ``path`` is a symbolic link, or when
    it could not be written (``check_writable``)."""
    if path.is_symlink():
        raise _link_refusal(flag, path)
    check_writable(path, flag)
    if not _exists(path):
        return
    if not force:
        raise _refusal(flag, path)
    if path.is_dir() and not path.is_symlink():
        raise EvalError(f"{flag} {path} is a folder; --force replaces a file only")


def refuse_existing_run(output: Path, force: bool) -> None:
    """As ``refuse_existing`` for a run folder: ``--force`` replaces an eval run folder (or an
    empty folder), never another folder or a file. A symbolic link is refused, dangling or not:
    the run would be moved onto the link, not into its target."""
    if output.is_symlink():
        raise _link_refusal("--output", output)
    check_writable(output)
    if not _exists(output):
        return
    if not force:
        raise _refusal("--output", output)
    if not output.is_dir():
        raise EvalError(f"--output {output} is a file; --force replaces a run folder only")
    if any(output.iterdir()) and not any((output / name).exists() for name in RUN_FILES):
        raise EvalError(
            f"--output {output} is not an eval run folder (no {' or '.join(RUN_FILES)}); "
            "--force replaces run folders only"
        )


def check_complete_run(path: Path, what: str) -> None:
    """A run folder that a completed run published: its summary and samples (and, for a
    sampling command, its per-prompt records). A staging folder or a folder a user emptied by
    hand is refused, so nothing is compared or filtered on part of a run."""
    if not path.is_dir():
        return  # a summary.json file: load_summary judges it
    missing = [name for name in RUN_FILES if not (path / name).is_file()]
    if missing:
        raise EvalError(
            f"{what} {path}: not a complete eval run folder (no {', '.join(missing)}); pass a "
            "folder written by reward, passk or analyse"
        )


def staging_dir(output: Path) -> Path:
    """The folder a run writes into before it becomes ``output``."""
    return output.with_name(f".{output.name}.partial-{os.getpid()}")


@contextmanager
def staged_run_dir(output: Path, force: bool) -> Iterator[Path]:
    """A fresh staging folder beside ``output``, moved onto it whole when the block finishes.

    Without ``force`` an existing ``output`` is refused, before and after the block. When the
    block fails, ``output`` is untouched; a staging folder holding samples stays for a look
    (its path is printed), an empty one is removed. A full disk removes it in any case and
    raises DiskFullError naming ``output``.
    """
    output = Path(os.path.abspath(output))  # "." and ".." have no name to stage beside
    refuse_existing_run(output, force)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_dir(output)
    if staging.exists():  # left by an earlier process with this pid
        shutil.rmtree(staging)
    try:
        with disk_full_translated(output, written=lambda: tree_size(staging)):
            staging.mkdir()
            yield staging
            _publish(staging, output, force)
    except DiskFullError:
        shutil.rmtree(staging, ignore_errors=True)  # the samples would only hold the disk full
        raise
    except BaseException:
        _keep_or_remove(staging, output)
        raise


def _publish(staging: Path, output: Path, force: bool) -> None:
    refuse_existing_run(output, force)  # again: it may have appeared during the run
    if not _exists(output):
        os.replace(staging, output)
        return
    previous = output.with_name(f".{output.name}.replaced-{os.getpid()}")
    with signals_deferred():  # the old run is removed too, so none is left aside
        swap_in(staging, output, previous)
        if previous.is_dir() and not previous.is_symlink():
            shutil.rmtree(previous, ignore_errors=True)
        else:
            previous.unlink(missing_ok=True)


def _keep_or_remove(staging: Path, output: Path) -> None:
    samples = staging / "samples.jsonl"
    if samples.is_file() and samples.stat().st_size > 0:
        # A signal between the summary's write and the swap: the run was not published, so the
        # folder kept for a look holds samples only, never a summary that reads as complete.
        for name in ("summary.json", "summary.md"):
            (staging / name).unlink(missing_ok=True)
        print(
            f"{output} is unchanged; this unfinished run's samples are in {staging}",
            file=sys.stderr,
        )
    else:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def new_file(
    path: Path, force: bool, flag: str = "--output", needed_bytes: int | None = None
) -> Iterator[Path]:
    """A staging path for ``path``, renamed onto it when the block finishes; an existing
    ``path`` is refused without ``force``. A full disk raises DiskFullError naming ``path``."""
    refuse_existing(path, force, flag)
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged(path, needed_bytes) as staging:
        yield staging


def write_new_text(path: Path, text: str, force: bool, flag: str = "--output") -> None:
    with new_file(path, force, flag, needed_bytes=len(text.encode())) as staging:
        staging.write_text(text)
