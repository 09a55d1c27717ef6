"""Launcher pre-flight: each problem is caught with a message that says what to do."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
from fake_hub import download, use_cache

from rlvr.config.compose import compose
from rlvr.models.architectures import (
    ARCHITECTURES,
    Architecture,
    by_hf_id,
    config_json,
    miniature,
)
from rlvr.preflight.checks import check
from rlvr.tasks.countdown import prepare

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def ready_root(tmp_path: Path) -> Path:
    """A project root with Countdown data (64 rows: one batch of the GPU recipes, which
    pre-flight refuses to train 0 steps), a (placeholder) local model folder and the rewards."""
    prepare("generate", str(tmp_path / "artifacts/data/countdown"), train_size=64, test_size=4)
    model = tmp_path / "artifacts/models/tiny"
    model.mkdir(parents=True)
    # a placeholder: pre-flight looks, never loads
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    (model / "pytorch_model.bin").write_bytes(b"")  # not opened; no safetensors to count
    (tmp_path / "rewards").symlink_to(ROOT / "rewards")
    return tmp_path


@pytest.fixture(autouse=True)
def no_ray_or_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Ray cluster recorded, hub access allowed and an empty HF cache, whatever this
    machine has."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray"))
    for name in ("RAY_ADDRESS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    use_cache(monkeypatch, tmp_path / "hf-cache")


def _cached(root: Path, repo_id: str = "Qwen/Qwen3-4B-Instruct-2507") -> None:
    """``hf download repo_id`` from a fake Hub (tests/fake_hub.py) serving the placeholder."""
    download(repo_id, root / "artifacts/models/tiny")


def test_ready_config_passes(ready_root: Path) -> None:
    assert check(compose("countdown_cpu", root=ready_root)) == []
    gpu = compose("countdown_qwen3_4b", root=ready_root)
    # the workers read the hub model offline: refused until it is in the cache, in one line
    assert [p for p in check(gpu, visible_gpus=8) if "hf download" in p] == [
        "actor_rollout_ref.model.path: Qwen/Qwen3-4B-Instruct-2507 is not in the Hugging Face "
        f"cache ({ready_root / 'hf-cache'}), which the workers read offline (HF_HUB_OFFLINE=1); "
        "download it first: uv run hf download Qwen/Qwen3-4B-Instruct-2507"
    ]
    _cached(ready_root)
    assert check(gpu, visible_gpus=8) == []


def test_missing_data_names_the_prep_command(tmp_path: Path) -> None:
    problems = check(compose("countdown_cpu", root=tmp_path))
    assert any(
        "train.parquet does not exist" in p and "data_prep_countdown.py" in p for p in problems
    )
    gsm = check(compose("gsm8k_qwen2_5_3b", root=tmp_path), visible_gpus=8)
    assert any("data_prep_gsm8k.py --val_size" in p for p in gsm)


def test_model_path_must_exist_or_be_a_hub_id(ready_root: Path) -> None:
    bad = compose("countdown_cpu", ["actor_rollout_ref.model.path=/no/such/model"], root=ready_root)
    assert any("/no/such/model no such folder" in p for p in check(bad))
    # No checkpoints: the model's size is now its own (4B), and whether its 64 GB of checkpoints
    # fit depends on this machine's free disk, not on what this test checks.
    hub = compose(
        "countdown_cpu",
        ["actor_rollout_ref.model.path=Qwen/Qwen3-4B-Instruct-2507", "trainer.save_freq=-1"],
        root=ready_root,
    )
    assert any("is not in the Hugging Face cache" in p for p in check(hub))
    _cached(ready_root)
    assert check(hub) == []


def test_gpu_count_must_fit(ready_root: Path) -> None:
    problems = check(compose("countdown_qwen3_4b", root=ready_root), visible_gpus=4)
    refusal = [p for p in problems if "n_gpus_per_node=8 but this node sees 4" in p]
    # the single-GPU recipe of the same task is named, no GSM8K one
    assert len(refusal) == 1 and refusal[0].endswith(
        "or an experiment for that many: countdown_qwen2_5_3b_lora_1gpu"
    )
    zero = check(compose("countdown_qwen3_4b", root=ready_root), visible_gpus=0)
    assert any(p.endswith("(hardware=cpu without GPUs)") for p in zero)


def test_broken_reward_is_reported(ready_root: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken_reward.py"
    broken.write_text("raise RuntimeError('boom')\n")
    config = compose("countdown_cpu", [f"custom_reward_function.path={broken}"], root=ready_root)
    assert any("RuntimeError: boom" in p for p in check(config))
    bad_kwargs = compose(
        "countdown_cpu", ["custom_reward_function.reward_kwargs.format_score=3"], root=ready_root
    )
    assert any("format_score must be in [0, 1]" in p for p in check(bad_kwargs))


@pytest.mark.slow  # a fresh interpreter with verl; the fast tier's launcher smoke test is
# tests/test_cli_adversarial.py's negative control
def test_launcher_stops_before_ray_on_problems(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts/train.sh"),
            "countdown_cpu",
            "data.train_files=/nonexistent/train.parquet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "pre-flight: data.train_files: /nonexistent/train.parquet does not exist" in done.stderr
    assert "ray init" not in done.stdout


class _Statvfs:
    """What os.statvfs returns, for a filesystem with ``free`` bytes available."""

    def __init__(self, free: int) -> None:
        self.f_bavail, self.f_frsize = free, 1


def _fake_disk(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    monkeypatch.setattr("rlvr.common.disk_full.os.statvfs", lambda _path: _Statvfs(free))


# countdown_cpu (8 train rows, batch 2) saving every step of 4 with 2 kept, and a Qwen3-4B-sized
# model (the placeholder folder has no weights: its config.json gives the shape).
QWEN_SIZED = [
    "trainer.total_training_steps=4",
    "trainer.save_freq=1",
    "trainer.max_actor_ckpt_to_keep=2",
]


def _shaped(root: Path, arch: Architecture) -> Path:
    """The placeholder model folder, its config.json declaring ``arch``'s shape."""
    (root / "artifacts/models/tiny/config.json").write_text(json.dumps(config_json(arch)))
    return root


def _qwen_sized(root: Path) -> Path:
    arch = by_hf_id("Qwen/Qwen3-4B-Instruct-2507")
    assert arch is not None
    return _shaped(root, arch)


def test_checkpoint_budget_line(
    ready_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_disk(monkeypatch, 900 * 10**9)
    assert check(compose("countdown_cpu", QWEN_SIZED, root=_qwen_sized(ready_root))) == []
    directory = ready_root.resolve() / "artifacts/checkpoints/countdown_cpu"
    assert (
        f"pre-flight: checkpoints: 2 kept x 64.4 GB = 128.7 GB under {directory} (free 900.0 GB)\n"
        in capsys.readouterr().out
    )


def test_checkpoints_that_do_not_fit_stop_the_launch(
    ready_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_disk(monkeypatch, 100 * 10**9)
    problems = check(compose("countdown_cpu", QWEN_SIZED, root=_qwen_sized(ready_root)))
    assert len(problems) == 1
    assert "2 checkpoint(s) need 128.7 GB" in problems[0] and "100.0 GB free" in problems[0]
    assert "trainer.max_actor_ckpt_to_keep (now 2)" in problems[0]
    assert "paths.checkpoints=" in problems[0]
    # One kept checkpoint fits the same disk.
    one = [*QWEN_SIZED, "trainer.max_actor_ckpt_to_keep=1"]
    assert check(compose("countdown_cpu", one, root=ready_root)) == []


def test_a_huge_model_overflows_the_real_filesystem(ready_root: Path) -> None:
    tiny = miniature(ARCHITECTURES["qwen2.5-0.5b-instruct"])
    huge = dataclasses.replace(
        tiny, num_hidden_layers=10**4, hidden_size=10**5, intermediate_size=10**6
    )
    assert any(
        "checkpoint(s) need" in p
        for p in check(compose("countdown_cpu", root=_shaped(ready_root, huge)))
    )
    assert check(compose("countdown_cpu", root=_shaped(ready_root, tiny))) == []


def test_unknown_parameter_count_only_warns(
    ready_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check(compose("countdown_cpu", root=ready_root)) == []
    captured = capsys.readouterr()
    assert "checkpoints: 1 kept x ? B = ?" in captured.out
    assert "pre-flight: warning: parameter count unknown" in captured.err


@pytest.mark.parametrize(("lr", "warned"), [("1e-6", True), ("1e-4", False)])
def test_lora_at_a_full_fine_tuning_lr_only_warns(
    ready_root: Path, capsys: pytest.CaptureFixture[str], lr: str, warned: bool
) -> None:
    """adapter=lora32 keeps the experiment's lr (the adapter owns none): below 1e-5 pre-flight
    names the override, and still lets the run start."""
    overrides = ["adapter=lora32", f"actor_rollout_ref.actor.optim.lr={lr}"]
    assert check(compose("countdown_cpu", overrides, root=ready_root)) == []
    err = capsys.readouterr().err
    assert ("warning: LoRA at lr 1e-06" in err and "optim.lr=1e-4" in err) == warned
    assert ("LoRA at lr" in err) == warned


@pytest.mark.parametrize(("native", "warned"), [(False, True), (True, False)])
def test_bf16_on_a_cpu_that_emulates_it_only_warns(
    ready_root: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    native: bool,
    warned: bool,
) -> None:
    """A train.sh run that asks the CPU path for bf16 where the CPU only emulates it (slower
    than fp32) hears it before Ray starts, and still starts; on a native-bf16 CPU, nothing."""
    from rlvr.cpu import precision

    monkeypatch.setattr(precision, "native_bf16", lambda: native)
    overrides = ["actor_rollout_ref.rollout.dtype=bfloat16"]
    assert check(compose("countdown_cpu", overrides, root=ready_root)) == []
    err = capsys.readouterr().err
    assert ("warning: actor_rollout_ref.rollout.dtype=bfloat16: this CPU" in err) == warned
