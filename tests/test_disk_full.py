"""Disk full anywhere the project writes: every command below runs against a real full disk (a
tiny tmpfs, tests/full_disk.py) and must exit 1 with one last line on stderr that names the
path and the bytes, print no traceback, and leave the disk as it found it: no staging file or
folder, and an earlier output whole and unchanged.

Before the fix each row failed on its message: a pyarrow, safetensors or json traceback (the
eval row also left its staging folder, samples and all, on the full disk).
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from full_disk import listing, run_on_full_disk

from rlvr.common.files import (
    DiskFullError,
    disk_full_message,
    disk_full_of,
    disk_full_translated,
    is_disk_full,
)

PY = sys.executable
MESSAGE = re.compile(
    r"error: disk full writing (?P<path>\S+): needs (?P<need>about|more than the) [0-9.]+ [kMGT]?B"
    r".* [0-9.]+ [kMGT]?B free on that filesystem \(free space, then rerun\)"
)

# What the writers stage in: .NAME.XXXX.tmp files, .NAME.partial-*, .NAME.replaced-PID and
# .huggingface.merging-* folders.
STAGING = re.compile(r"/\.[^/]+\.(partial-|replaced-|merging-)[^/]*/?$|/\.[^/]+\.tmp$")


@dataclass(frozen=True)
class Case:
    name: str
    size: str  # the tmpfs, e.g. "64k"
    argv: tuple[str, ...]  # "{disk}", "{py}" and the fixtures' places are filled in
    names: str  # the path the message must name
    need: str = "about"  # "about": the write's size is known; "more than the": a lower bound
    seed: str = ""  # a place whose contents the disk starts with (and must end with)
    env: tuple[tuple[str, str], ...] = ()
    pending: str = ""  # expected to fail until that area's fix lands
    not_ours: str = ""  # a pattern of files a library leaves in its own cache, as it always does


COUNTDOWN = ("{py}", "scripts/data_prep_countdown.py", "--source", "generate")
GSM8K = ("{py}", "scripts/data_prep_gsm8k.py", "--source", "{gsm8k_source}", "--test_size", "20")
EVAL = ("{py}", "scripts/eval_countdown.py", "--model_path", "{model}", "--data", "{cd_test}")
EVAL_RUN = (*EVAL, "--limit", "2", "--max_tokens", "8", "--backend", "hf", "--quiet")
WRITE = (  # a writer called as the commands call them
    "from rlvr.common.files import *; import sys\n"
    "try:\n    {}\nexcept Exception as e:\n    sys.exit(report_disk_full(e))"
)

# fmt: off
CASES = [
    # ---- data prep: every split is encoded first, so the message has the bytes needed
    Case("countdown", "64k", (*COUNTDOWN, "--train_size", "2000", "--test_size", "50",
                              "--local_dir", "{disk}/countdown"), "{disk}/countdown"),
    Case("countdown over an earlier output", "64k",
         (*COUNTDOWN, "--train_size", "2000", "--test_size", "50", "--local_dir",
          "{disk}/countdown"), "{disk}/countdown", seed="{countdown_output}"),
    Case("gsm8k", "4k", (*GSM8K, "--local_dir", "{disk}/gsm8k"), "{disk}/gsm8k"),
    Case("gsm8k: datasets' cache is full", "4k", (*GSM8K, "--local_dir", "{tmp}/gsm8k"),
         "{disk}/datasets", need="more than the", env=(("HF_DATASETS_CACHE", "{disk}/datasets"),),
         not_ours=r"\.lock$"),  # datasets' empty lock files, left after every load
    # ---- eval: the run folder is staged whole; a full disk removes the staging folder
    Case("eval reward", "4k", (*EVAL_RUN, "--output", "{disk}/run", "reward"), "{disk}/run",
         need="more than the"),
    Case("eval compare --output", "4k", ("{py}", "scripts/eval_countdown.py", "compare",
                                          "{eval_run}", "{eval_run}", "--output", "{disk}/cmp.md"),
         "{disk}/cmp.md", seed="{filled}"),
    # ---- the staging writers every report, table and summary goes through
    Case("write_text_atomic", "64k",
         ("{py}", "-c", WRITE.format("write_text_atomic(Path('{disk}/report.md'), 'x' * 100_000)")),
         "{disk}/report.md"),
    Case("write_json_atomic over an earlier file", "4k",
         ("{py}", "-c", WRITE.format("write_json_atomic(Path('{disk}/filler'), ['x'] * 9_000)")),
         "{disk}/filler", seed="{filled}"),
    Case("report.py", "4k", ("{py}", "scripts/report.py", "tests/data/report/countdown_run",
                             "--out", "{disk}/report"), "{disk}/report/", need="more than the"),
    # ---- models: written in a staging folder beside --out, swapped in whole
    Case("build_model tiny", "64k", ("{py}", "scripts/build_model.py", "tiny", "--out",
                                     "{disk}/model"), "{disk}/model", need="more than the"),
    Case("build_model --force over a model", "{model_size}",
         ("{py}", "scripts/build_model.py", "tiny", "--force", "--out", "{disk}/model"),
         "{disk}/model", need="more than the", seed="{model_seed}"),
    Case("merge_lora", "{lora_size}", ("{py}", "scripts/merge_lora.py", "{disk}/actor",
                                       "--base_model", "{model}"),
         "{disk}/actor/huggingface", seed="{lora_seed}"),
]
# fmt: on


class Places(dict):
    """The ``{name}`` places of the table: each built on first use by its builder, or looked up
    in ``shared`` (the module's places, built once)."""

    def __init__(
        self, builders: dict[str, Callable[[], str]], shared: Places | None = None
    ) -> None:
        super().__init__()
        self.builders = builders
        self.shared = shared

    def __missing__(self, key: str) -> str:
        self[key] = self.shared[key] if self.shared is not None else self.builders[key]()
        return self[key]


def _page_rounded_size(folder: Path, spare: int) -> str:
    """A tmpfs size that holds ``folder`` (every file rounded up to 4 KiB pages) plus ``spare``."""
    pages = sum(-(-p.stat().st_size // 4096) for p in folder.rglob("*") if p.is_file())
    return f"{pages * 4 + spare // 1024}k"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Places:
    """What the cases read or start from, built once for the module and only when used."""
    base = tmp_path_factory.mktemp("disk_full_inputs")

    def countdown_output() -> str:
        from rlvr.tasks.countdown import prepare

        prepare("generate", str(base / "seed_countdown/countdown"), train_size=20, test_size=5)
        return str(base / "seed_countdown")

    def cd_test() -> str:
        from rlvr.tasks.countdown import prepare

        prepare("generate", str(base / "cd"), train_size=10, test_size=4, seed=0)
        return str(base / "cd/test.parquet")

    def gsm8k_source() -> str:
        rows = [
            {"question": f"Q{i}: what is {i} + {i * 7 % 13}?", "answer": f"#### {i + i * 7 % 13}"}
            for i in range(300)
        ]
        path = base / "gsm8k.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return str(path)

    def eval_run() -> str:
        from rlvr.evaluation.cli import main

        output = base / "eval_run"
        argv = ["--model_path", str(tiny_model_dir), "--data", places["cd_test"], "--limit", "2"]
        argv += ["--max_tokens", "8", "--backend", "hf", "--quiet", "--output", str(output)]
        assert main("countdown", "eval", argv) == 0
        return str(output)

    def filled() -> str:  # a 4 KiB file: a 4k tmpfs holding it takes no other byte
        (base / "filled").mkdir()
        (base / "filled/filler").write_bytes(b"f" * 4096)
        return str(base / "filled")

    def model_seed() -> str:
        shutil.copytree(tiny_model_dir, base / "model_seed/model")
        return str(base / "model_seed")

    def lora_seed() -> str:
        from test_lora_merge import _peft_model, _write_verl_checkpoint

        _write_verl_checkpoint(base / "lora_seed/actor", _peft_model(tiny_model_dir, seed=0))
        return str(base / "lora_seed")

    places = Places(
        {
            "countdown_output": countdown_output,
            "cd_test": cd_test,
            "gsm8k_source": gsm8k_source,
            "eval_run": eval_run,
            "filled": filled,
            "model_seed": model_seed,
            "model_size": lambda: _page_rounded_size(Path(places["model_seed"]), 64 * 1024),
            "lora_seed": lora_seed,
            "lora_size": lambda: _page_rounded_size(Path(places["lora_seed"]), 64 * 1024),
        }
    )
    places.update(py=PY, model=str(tiny_model_dir))
    return places


MODEL_ROWS = {"eval reward", "merge_lora", "build_model tiny", "build_model --force over a model"}


def _marks(case: Case) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.xfail(reason=case.pending, strict=True)] if case.pending else []
    if case.name in MODEL_ROWS:  # rows that load a model take 3-5 s each: the slow tier (in CI)
        marks.append(pytest.mark.slow)
    return marks


def _params() -> list[object]:
    return [pytest.param(case, id=case.name, marks=_marks(case)) for case in CASES]


@pytest.mark.parametrize("case", _params())
def test_a_full_disk_is_one_line_naming_the_path_and_bytes(
    case: Case, shared: Places, tmp_path: Path
) -> None:
    places = Places({}, shared)
    places.update(disk=str(tmp_path / "disk"), tmp=str(tmp_path))
    seed = Path(case.seed.format_map(places)) if case.seed else None
    env = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "datasets"), "HF_HUB_OFFLINE": "1"}
    env |= {key: value.format_map(places) for key, value in case.env}
    argv = [arg.format_map(places) for arg in case.argv]
    done = run_on_full_disk(
        tmp_path / "disk", case.size.format_map(places), argv, seed=seed, env=env
    )

    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    match = MESSAGE.fullmatch(done.last_line)
    assert match, f"last line of stderr: {done.last_line!r}"
    assert match["path"].rstrip(":").startswith(case.names.format_map(places).rstrip("/"))
    assert match["need"] == case.need
    assert done.returncode == 1
    files = [
        e for e in done.left if not e.endswith("/") and not re.search(case.not_ours or "^$", e)
    ]
    assert files == [entry for entry in listing(seed) if not entry.endswith("/")]
    assert not [entry for entry in done.left if STAGING.search(entry)]


# --- the API other writers use (checkpoints: rlvr/train) ---------------------------------------


@pytest.mark.parametrize(
    ("exc", "full"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (OSError(errno.EACCES, "Permission denied"), False),
        (
            RuntimeError(
                "Error while serializing: I/O error: No space left on device (os error 28)"
            ),
            True,
        ),
        (ValueError("bad value"), False),
    ],
)
def test_is_disk_full_reads_errno_or_the_wrapped_message(exc: Exception, full: bool) -> None:
    assert is_disk_full(exc) is full
    try:  # the same error wrapped, as torch and pyarrow wrap it
        raise RuntimeError("save failed") from exc
    except RuntimeError as wrapped:
        assert is_disk_full(wrapped) is full


def test_a_context_hidden_with_from_none_is_not_read() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise ValueError("handled: another problem") from None
    except ValueError as exc:
        assert not is_disk_full(exc)


TORCH_SAVE = (  # what a checkpoint save raises on a full disk, judged without and with its path
    "import sys, torch\nfrom rlvr.common.files import is_disk_full\n"
    "try:\n    torch.save(torch.zeros(100_000), sys.argv[1])\n"
    "except RuntimeError as e:\n    print(is_disk_full(e), is_disk_full(e, sys.argv[1]))"
)


def test_torch_saves_errno_less_failure_counts_only_on_a_nearly_full_filesystem(
    tmp_path: Path,
) -> None:
    exc = RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
    assert not is_disk_full(exc)
    assert not is_disk_full(exc, tmp_path)  # this filesystem has room
    target = tmp_path / "disk/model.pt"
    done = run_on_full_disk(tmp_path / "disk", "64k", [PY, "-c", TORCH_SAVE, str(target)])
    assert done.stdout.split() == ["False", "True"], done.stderr[-2000:]


def test_the_message_and_the_error(tmp_path: Path) -> None:
    line = disk_full_message(tmp_path / "x", 1_500_000_000)
    assert re.fullmatch(
        rf"disk full writing {tmp_path}/x: needs about 1\.5 GB, [0-9.]+ [kMGT]?B free on that "
        r"filesystem \(free space, then rerun\)",
        line,
    )
    assert "needs more than the 4.1 kB written" in disk_full_message(tmp_path, None, 4096)
    error = DiskFullError(tmp_path / "x", written_bytes=10, code=errno.EDQUOT)
    assert isinstance(error, OSError) and error.errno == errno.EDQUOT
    assert str(error).startswith(f"disk quota exceeded writing {tmp_path}/x: needs more than")
    assert str(pickle.loads(pickle.dumps(error))) == str(error)  # crosses Ray's boundary


def test_translation_names_the_outer_path_and_passes_other_errors(tmp_path: Path) -> None:
    with pytest.raises(DiskFullError) as caught, disk_full_translated(tmp_path / "out", 123):
        raise DiskFullError(tmp_path / ".out.partial-1/x")
    assert caught.value.path == tmp_path / "out" and caught.value.needed_bytes == 123
    with pytest.raises(ValueError), disk_full_translated(tmp_path / "out"):
        raise ValueError("not a disk problem")
    assert disk_full_of(ValueError("x")) is None
    named = disk_full_of(OSError(errno.ENOSPC, "No space left on device", "/data/f"))
    assert named is not None and str(named.path) == "/data/f"


# Train on the tiny model with the run folder on the tmpfs; once step 1 is logged, fill the disk
# (leaving 100 kB) so that the next checkpoint cannot be written. $1: the mount, $2...: launcher.
FILL_AFTER_STEP_1 = """
mount=$1; shift
"$@" &
launcher=$!
until grep -qs '"step": 1' "$mount"/run/metrics.jsonl; do
    kill -0 "$launcher" 2>/dev/null || break; sleep 0.2
done
free=$(df --output=avail -B1 "$mount" | tail -1)
dd if=/dev/zero of="$mount/filler" bs=4096 count=$(( (free - 100000) / 4096 )) 2>/dev/null
wait "$launcher"
"""


@pytest.mark.slow
@pytest.mark.no_cuda
def test_a_disk_that_fills_during_training_is_one_line(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A checkpoint shard a Ray worker cannot write reaches the driver wrapped in Ray's errors:
    the run ends with one line naming the checkpoint folder and one checkpoint's size, exit 1
    (before: Ray's RayTaskError traceback, exit 1)."""
    from conftest import cpu_launch

    from rlvr.tasks.countdown import prepare

    prepare("generate", str(tmp_path / "data/countdown"), train_size=32, test_size=8, seed=0)
    mount = tmp_path / "disk"
    cmd, env = cpu_launch(tmp_path, "run")
    cmd = [
        arg for arg in cmd if not arg.startswith(("paths.checkpoints=", "actor_rollout_ref.model"))
    ]
    cmd += [
        f"paths.checkpoints={mount}",
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        "trainer.total_training_steps=4",
        "trainer.save_freq=2",
        "trainer.test_freq=10",
    ]
    done = run_on_full_disk(
        mount, "16m", ["bash", "-c", FILL_AFTER_STEP_1, "bash", str(mount), *cmd], env=env,
        timeout=900,
    )  # fmt: skip
    output = done.stdout + done.stderr  # the launcher tees the driver's two streams as one
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert done.returncode == 1, output[-3000:]
    assert len(errors) == 1, output[-3000:]
    assert re.fullmatch(
        rf"error: disk full writing {mount}/run: needs about [0-9.]+ [kMG]B, [0-9.]+ k?B free"
        r" on that filesystem \(free space, then rerun\)",
        errors[0],
    ), errors[0]
    assert "Traceback" not in output.split(errors[0])[1]  # nothing after the line but the merge
