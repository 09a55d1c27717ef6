"""The rehearsal's plan and command line (fast; tests/test_rehearsal_e2e.py runs it for real)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.rehearsal.cpu import main
from rlvr.rehearsal.plan import make_plan


def test_plan_keeps_the_experiment_and_lists_what_it_replaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the real world size when memory allows it (the plan shrinks on a busy machine)
    import psutil

    roomy = type("Memory", (), {"available": 64 * 2**30})()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: roomy)
    plan = make_plan("countdown_qwen3_4b_lora", tmp_path, None)
    assert (plan.nnodes, plan.gpus_per_node, plan.world_size) == (1, 8, 8)
    assert plan.lora and "hf_model" not in plan.save_contents
    assert plan.overrides[0] == "+rehearsal=cpu"
    assert f"actor_rollout_ref.model.path={tmp_path}/models/tiny" in plan.overrides
    assert not any(
        o.startswith(("data.train_batch_size", "actor_rollout_ref.rollout.n="))
        for o in plan.overrides
    )


def test_fewer_ranks_per_node_keep_sharding_within_a_node(tmp_path: Path) -> None:
    plan = make_plan("countdown_qwen3_4b_2nodes", tmp_path, 4)
    assert (plan.nnodes, plan.world_size) == (2, 8)
    assert "trainer.n_gpus_per_node=4" in plan.overrides
    assert "actor_rollout_ref.actor.fsdp_config.fsdp_size=4" in plan.overrides


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope"], "unknown experiment 'nope'"),
        (["countdown_cpu"], "already runs on CPU"),
        (["countdown_qwen3_4b", "--gpus_per_node", "0"], "--gpus_per_node must be at least 1"),
        (["countdown_qwen3_4b", "--objective", "dapoo"], "unknown objective 'dapoo'"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--out", str(out)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_refuses_a_folder_it_did_not_make(tmp_path: Path, capsys) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(SystemExit):
        main(["countdown_qwen3_4b", "--out", str(tmp_path)])
    assert "not a rehearsal folder" in capsys.readouterr().err
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_ranks_that_fit_memory_and_divide_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    from rlvr.rehearsal.plan import ranks_that_fit

    def available(gib: float):
        return type("Memory", (), {"available": gib * 2**30})()

    monkeypatch.setattr(psutil, "virtual_memory", lambda: available(64))
    assert ranks_that_fit(8, 2, 128) == 8  # fits: the real world size
    monkeypatch.setattr(psutil, "virtual_memory", lambda: available(20))
    assert ranks_that_fit(8, 2, 128) == 4  # 2 x 6 would fit but 12 ranks do not divide 128
    monkeypatch.setattr(psutil, "virtual_memory", lambda: available(1))
    assert ranks_that_fit(8, 1, 64) == 1


def test_plan_runs_the_chosen_objective(tmp_path: Path) -> None:
    plan = make_plan("countdown_qwen3_4b", tmp_path, 2, "dapo")
    assert plan.objective == "dapo"
    assert plan.overrides[:2] == ["+rehearsal=cpu", "objective=dapo"]
    assert make_plan("countdown_qwen3_4b", tmp_path, 2).overrides[1] == "objective=grpo"


def test_default_out_folder_names_the_objective(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Rehearsing another preset never wipes the last one's folder."""
    import rlvr.rehearsal.cpu as rehearsal

    seen: list[Path] = []
    monkeypatch.setattr(rehearsal, "ROOT", tmp_path)
    monkeypatch.setattr(rehearsal, "rehearse", lambda plan, timeout_s: seen.append(plan.out) or 0)
    assert main(["countdown_qwen3_4b", "--gpus_per_node", "2", "--objective", "tuft_is"]) == 0
    assert main(["countdown_qwen3_4b", "--gpus_per_node", "2"]) == 0
    assert seen == [
        tmp_path / "artifacts/rehearsal/countdown_qwen3_4b-tuft_is",
        tmp_path / "artifacts/rehearsal/countdown_qwen3_4b-grpo",
    ]
