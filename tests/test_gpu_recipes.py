"""The quickstart's GPU recipe chooser: the recipe needing the most GPUs that fit, each recipe's
count read from its composed config."""

from __future__ import annotations

from typing import Any

import pytest

from rlvr.config.compose import ConfigError, compose_checked
from rlvr.planning import gpu_recipes
from rlvr.planning.gpu_recipes import NoRecipeFits, choose, recipe_for

EIGHT_GPU = "countdown_qwen3_4b"
ONE_GPU = "countdown_qwen2_5_3b_lora_1gpu"


@pytest.mark.parametrize(
    ("gpus", "experiment"), [(1, ONE_GPU), (3, ONE_GPU), (8, EIGHT_GPU), (16, EIGHT_GPU)]
)
def test_the_largest_recipe_that_fits(gpus: int, experiment: str) -> None:
    assert recipe_for(gpus) == experiment


def test_the_counts_are_the_composed_configs() -> None:
    assert gpu_recipes.gpus_needed(EIGHT_GPU) == 8
    assert gpu_recipes.gpus_needed(ONE_GPU) == 1


@pytest.mark.parametrize(
    ("gpus", "explanation"),
    [
        (1, f"1 GPU: {ONE_GPU} uses it"),
        (3, f"3 GPUs: {ONE_GPU} uses 1 of 3 ({EIGHT_GPU} needs 8)"),
        (8, f"8 GPUs: {EIGHT_GPU} uses all 8"),
        (16, f"16 GPUs: {EIGHT_GPU} uses 8 of 16 (no GPU recipe needs more)"),
    ],
)
def test_the_explanation_says_how_many_gpus_are_used_and_why(gpus: int, explanation: str) -> None:
    choice = choose(gpus)
    assert choice.explanation == explanation
    assert (choice.gpus_found, choice.gpus_used) == (gpus, 1 if choice.experiment == ONE_GPU else 8)


def test_no_gpus_is_an_error_that_points_at_the_cpu_path() -> None:
    with pytest.raises(
        NoRecipeFits, match=rf"^0 GPUs: every GPU recipe needs at least 1 \({ONE_GPU}\).*--gpus 0"
    ):
        recipe_for(0)


def _with_gpus(counts: dict[str, tuple[int, int]]) -> Any:
    """compose_checked, with (n_gpus_per_node, nnodes) changed for the named experiments."""

    def compose(experiment: str) -> Any:
        config = compose_checked(experiment)
        if experiment in counts:
            config.trainer.n_gpus_per_node, config.trainer.nnodes = counts[experiment]
        return config

    return compose


def test_negative_control_the_count_is_read_not_hard_coded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same 3 and 8 GPUs choose otherwise once the composed configs say otherwise: the
    8-GPU recipe said to need 2 runs on 3; said to need 2 nodes of 8, it no longer fits 8."""
    assert (recipe_for(3), recipe_for(8)) == (ONE_GPU, EIGHT_GPU)
    monkeypatch.setattr(gpu_recipes, "compose_checked", _with_gpus({EIGHT_GPU: (2, 1)}))
    assert recipe_for(3) == EIGHT_GPU
    monkeypatch.setattr(gpu_recipes, "compose_checked", _with_gpus({EIGHT_GPU: (8, 2)}))
    assert recipe_for(8) == ONE_GPU
    assert choose(8).explanation == f"8 GPUs: {ONE_GPU} uses 1 of 8 ({EIGHT_GPU} needs 16)"


def test_a_missing_candidate_config_fails_clearly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gpu_recipes, "GPU_RECIPES", (*gpu_recipes.GPU_RECIPES, "countdown_nowhere"))
    with pytest.raises(ConfigError, match=r"configs/countdown_nowhere\.yaml is missing"):
        recipe_for(8)
    assert gpu_recipes.main(["--gpus", "8"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "countdown_nowhere" in err


@pytest.mark.parametrize(("faked", "experiment"), [(1, ONE_GPU), (8, EIGHT_GPU)])
def test_the_cli_counts_the_machines_gpus(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], faked: int, experiment: str
) -> None:
    """Faking the GPU count: torch.cuda.device_count says 1 or 8, and the CLI chooses by it."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: faked)
    assert gpu_recipes.detected_gpus() == faked
    assert gpu_recipes.main([]) == 0
    out, err = capsys.readouterr()
    assert out == f"{experiment}\n"
    assert err == f"{choose(faked).explanation}\n"


def test_the_cli_refuses_what_is_not_a_gpu_count(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("x", "-1", "1.5"):
        with pytest.raises(SystemExit) as exited:
            gpu_recipes.main(["--gpus", bad])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--gpus" in err
    assert gpu_recipes.main(["--gpus", "0"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: 0 GPUs: ") and err.count("\n") == 1
