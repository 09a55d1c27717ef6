"""The README's main job, run as a user runs it: its flags, refusals, dry runs and Ctrl-C (the
whole run's outputs are checked on the learning test's run, tests/test_learning_countdown_e2e.py:
one quickstart feeds every test that reads one)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from script_loading import run_quickstart

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.no_cuda
def test_ctrl_c_stops_the_quickstart_during_training(tmp_path: Path) -> None:
    """A terminal's Ctrl-C (SIGINT to the foreground process group) once GRPO has logged a
    step: the quickstart stops within seconds, exits 130 and leaves no process. Before, the
    training ran under `timeout` in a process group of its own, out of Ctrl-C's reach: it
    trained on, and the evals and the report ran after it (exit 0 after 145 s)."""
    from run_watch import Watched

    env = {**os.environ, "RLVR_LOG_DIR": str(tmp_path / "logs"), "WANDB_MODE": "offline"}
    out = tmp_path / "qs"
    cmd = ["bash", "scripts/quickstart.sh", "--model", "tiny", "--steps", "300", "--out", str(out)]
    run = Watched(cmd, env, tmp_path / "quickstart.log")
    metrics = out / "checkpoints/quickstart_tiny/metrics.jsonl"
    run.wait_for(
        lambda: metrics.is_file() and '"step": 1' in metrics.read_text(), 900, "GRPO step 1"
    )
    run.signal_group(signal.SIGINT)
    code, seconds = run.ended(timeout_s=60)
    left = run.left(within_s=15)
    assert left == [], f"left behind: {left}"
    assert (code, seconds < 30) == (130, True), run.output()[-3000:]
    last = run.output().strip().splitlines()[-1]
    assert last.startswith("quickstart: SIGINT: stopped the running stage"), last
    assert not (out / "eval_grpo").exists()  # nothing after the training stage ran


_quickstart = run_quickstart


def test_quickstart_rejects_bad_flags() -> None:
    for args in (["--model", "gpt5"], ["--steps", "0"], ["--bogus"], ["--grpo_precision", "fp16"]):
        done = _quickstart(*args)
        assert done.returncode == 2, (args, done.stderr)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--steps", v) for v in ("99999999999999999999", "10001", "1e3", "-5")]
    + [("--seed", v) for v in ("-1", "1.5", "abc", "01", "1000000000")],
)
def test_quickstart_bounds_numbers_and_creates_nothing_first(
    tmp_path: Path, flag: str, value: str
) -> None:
    """A huge --steps used to pass (and overflow); --out is created only after every check."""
    out = tmp_path / "new" / "qs"
    done = _quickstart("--model", "tiny", flag, value, "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and flag in done.stderr
    assert not (tmp_path / "new").exists()


def test_a_seed_moves_every_stream_from_its_own_base(tmp_path: Path) -> None:
    """--seed 3: data prep, GRPO's data order, the rollout and the evals each draw another stream
    (seed 0's are the defaults the README's figures were measured with)."""
    done = _quickstart("--gpus", "0", "--seed", "3", "--dry_run", "--out", str(tmp_path / "qs"))
    assert done.returncode == 0, done.stderr
    assert "seed 3: data prep --seed 45, data.seed=3, rollout seed 1003, eval --seed 3" in (
        done.stdout
    )


def test_the_seed_is_for_the_cpu_path() -> None:
    """With GPUs the quickstart runs a GPU recipe (its own seeds): --seed is refused there."""
    done = _quickstart("--gpus", "8", "--seed", "3", "--dry_run")
    assert done.returncode == 2 and "--seed is for the CPU path" in done.stderr, done.stderr


def test_bf16_grpo_is_verls_gpu_precision_in_plain_verl_keys(tmp_path: Path) -> None:
    """--grpo_precision bf16: the overrides the dry run prints compose over hardware/cpu.yaml's
    fp32 into bf16 compute for the actor and the reference and a bf16 rollout; fp32 (the
    default) adds none. With GPUs the flag is refused, as every CPU-path flag."""
    from rlvr.config.compose import compose

    out = str(tmp_path / "qs")
    done = _quickstart("--gpus", "0", "--grpo_precision", "bf16", "--dry_run", "--out", out)
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in done.stdout.splitlines() if "GRPO precision" in ln)
    overrides = line.split("GRPO precision bf16: ")[1].split()
    config = compose("countdown_smollm2_cpu", overrides).actor_rollout_ref
    assert config.rollout.dtype == "bfloat16"
    for role in (config.actor, config.ref):
        precision = role.fsdp_config.mixed_precision
        assert (precision.param_dtype, precision.reduce_dtype) == ("bf16", "fp32")
    assert compose("countdown_smollm2_cpu").actor_rollout_ref.rollout.dtype == "float32"
    # auto, the default: bf16 compute for the update only where this CPU has native bf16
    from rlvr.cpu.precision import native_bf16

    default = _quickstart("--gpus", "0", "--dry_run", "--out", out)
    auto = next(ln for ln in default.stdout.splitlines() if "GRPO precision" in ln)
    if native_bf16():
        overrides = auto.split("GRPO precision bf16_update: ")[1].split()
        config = compose("countdown_smollm2_cpu", overrides).actor_rollout_ref
        assert config.rollout.dtype == "float32"
        assert config.actor.fsdp_config.mixed_precision.param_dtype == "bf16"
    else:
        assert auto == "  GRPO precision fp32", auto
    fp32 = _quickstart("--gpus", "0", "--grpo_precision", "fp32", "--dry_run", "--out", out)
    assert "  GRPO precision fp32\n" in fp32.stdout, fp32.stdout
    gpus = _quickstart("--gpus", "8", "--grpo_precision", "bf16", "--dry_run")
    assert gpus.returncode == 2 and "--grpo_precision is for the CPU path" in gpus.stderr


def test_bf16_grpo_is_refused_where_the_cpu_emulates_bf16(tmp_path: Path) -> None:
    from rlvr.cpu.precision import native_bf16

    if native_bf16():
        pytest.skip("this CPU computes bf16 natively: the quickstart would run")
    out = tmp_path / "qs"
    done = _quickstart("--gpus", "0", "--grpo_precision", "bf16", "--out", str(out))
    assert done.returncode == 2 and "no native bf16" in done.stderr, done.stderr
    assert not out.exists()


def test_quickstart_refuses_an_out_it_cannot_create(tmp_path: Path) -> None:
    from test_files import unwritable_folder

    (tmp_path / "file").write_text("mine")
    for out, message in (
        (tmp_path / "file", "is a file"),
        (tmp_path / "file" / "qs", "is not a folder"),
        (unwritable_folder(tmp_path) / "qs", "cannot write in"),
    ):
        done = _quickstart("--model", "tiny", "--out", str(out))
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"--out {out}: ")
        assert message in done.stderr and done.stderr.count("\n") == 1
    assert (tmp_path / "file").read_text() == "mine"


@pytest.mark.parametrize(
    ("gpus", "steps", "experiment"),
    [("1", "4", "countdown_qwen2_5_3b_lora_1gpu"), ("8", "7", "countdown_qwen3_4b")],
)
def test_quickstart_dry_run_plans_the_gpu_recipe_that_fits(
    gpus: str, steps: str, experiment: str
) -> None:
    """--gpus N --dry_run: the recipe rlvr.planning.gpu_recipes picks and the commands, run by
    nothing; the recipe's own checkpoint folder is named (the GPU path refuses --out)."""
    steps_flag = [] if steps == "4" else ["--steps", steps]
    done = _quickstart("--gpus", gpus, "--dry_run", *steps_flag)
    assert done.returncode == 0, done.stderr
    assert f"== {gpus} GPU(s) (--gpus)" in done.stdout
    assert f"== dry run: would run {experiment} (nothing runs" in done.stdout
    grpo = f"bash scripts/train.sh {experiment}"
    # the hub model is downloaded before the run, whose workers read it offline
    download = f"uv run --no-sync python -m rlvr.preflight.hub_cache {experiment}"
    assert f"\n  {download}\n  {grpo} trainer.total_training_steps={steps}\n" in done.stdout
    assert f"GPU{'s' * (gpus != '1')}: {experiment} uses " in done.stderr  # the chooser's why
    folder = ROOT / "artifacts/checkpoints" / experiment / f"global_step_{steps}"
    assert f"  checkpoints: {folder} (auto-resume on" in done.stdout


def test_quickstart_dry_run_with_no_gpus_plans_the_cpu_path(tmp_path: Path) -> None:
    out = tmp_path / "qs"
    done = _quickstart("--gpus", "0", "--model", "tiny", "--dry_run", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("== dry run: 0 GPUs (--gpus), the CPU path")
    assert "countdown_cpu (model tiny), 2 GRPO step(s), seed 0" in done.stdout
    assert "data prep --seed 42, verl default data order, rollout seed 1000, eval --seed 0" in (
        done.stdout
    )
    assert "scripts/train.sh countdown_cpu base_model=tiny," in done.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("gpus", ["x", "-1", "1.5", "01", "10000"])
def test_quickstart_refuses_a_bad_gpu_count(tmp_path: Path, gpus: str) -> None:
    done = _quickstart("--gpus", gpus, "--dry_run", "--out", str(tmp_path / "qs"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "--gpus" in done.stderr and done.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_quickstart_refuses_more_gpus_than_the_machine_has(tmp_path: Path) -> None:
    done = _quickstart("--gpus", "9999", "--out", str(tmp_path / "qs"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("--gpus 9999: this machine has ") and done.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_quickstart_help_prints_the_whole_header() -> None:
    """--help prints the header comment (every line up to the first command), no more: the
    header grew with --gpus, and a fixed line range printed only part of it before."""
    lines = (ROOT / "scripts/quickstart.sh").read_text().splitlines()[1:]
    header = lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]
    done = _quickstart("--help")
    assert done.returncode == 0 and done.stdout.splitlines() == header
