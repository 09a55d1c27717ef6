"""The rewards loaded the way verl loads them: by file path, through its reward manager."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


class _CharTokenizer:
    """Decodes ids as characters; enough for verl's naive reward manager."""

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(int(i)) for i in ids if int(i) > 0)


def _batch(responses: list[str], ground_truths: list, data_source: str):
    from verl import DataProto

    width = max(len(r) for r in responses)
    prompts = torch.full((len(responses), 2), ord("q"), dtype=torch.long)
    resp = torch.zeros((len(responses), width), dtype=torch.long)
    mask = torch.zeros((len(responses), 2 + width), dtype=torch.long)
    mask[:, :2] = 1
    for i, text in enumerate(responses):
        resp[i, : len(text)] = torch.tensor([ord(c) for c in text])
        mask[i, 2 : 2 + len(text)] = 1
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": resp, "attention_mask": mask},
        non_tensors={
            "data_source": np.array([data_source] * len(responses), dtype=object),
            "reward_model": np.array([{"ground_truth": gt} for gt in ground_truths], dtype=object),
            "extra_info": np.array([{} for _ in responses], dtype=object),
        },
    )


def _manager(path: str, reward_kwargs: dict):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import load_reward_manager

    sys.modules.pop("custom_module", None)  # verl caches one custom module per process
    config = OmegaConf.create(
        {
            "custom_reward_function": {
                "path": path,
                "name": "compute_score",
                "reward_kwargs": reward_kwargs,
            },
            "reward_model": {"reward_manager": "naive"},
            "data": {"reward_fn_key": "data_source"},
        }
    )
    return load_reward_manager(config, _CharTokenizer(), num_examine=0)


def test_countdown_through_verl_reward_manager() -> None:
    manager = _manager(str(ROOT / "rewards/countdown.py"), {"format_score": 0.1, "shaping": False})
    # ground truth as it comes back from Parquet: numpy arrays and numpy ints
    gt = {"target": np.int64(13), "numbers": np.array([2, 3, 7])}
    responses = [
        "<answer>2*3+7</answer>",
        "<answer>2*3*7</answer>",
        "no answer",
        "<answer>2**3</answer>",
    ]
    out = manager(_batch(responses, [gt] * 4, "countdown"), return_dict=True)
    scores = out["reward_tensor"].sum(dim=-1).tolist()
    assert scores == pytest.approx([1.0, 0.1, 0.0, 0.1])
    assert out["reward_extra_info"]["acc"] == [1.0, 0.0, 0.0, 0.0]
    assert out["reward_extra_info"]["valid"] == [1.0, 1.0, 0.0, 0.0]


def test_gsm8k_through_verl_reward_manager() -> None:
    manager = _manager(str(ROOT / "rewards/gsm8k.py"), {"method": "flexible", "format_score": 0.0})
    responses = ["#### 72", "\\boxed{72}", "#### 71", "nothing"]
    out = manager(_batch(responses, ["72"] * 4, "openai/gsm8k"), return_dict=True)
    assert out["reward_tensor"].sum(dim=-1).tolist() == [1.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("name", "good", "typo"),
    [
        ("countdown", {"format_score": 0.1}, {"formt_score": 0.1}),
        ("gsm8k", {"method": "strict"}, {"mehtod": "strict"}),
    ],
)
def test_a_misspelled_reward_kwarg_fails_the_first_verl_call(
    name: str, good: dict, typo: dict
) -> None:
    """verl merges ``reward_kwargs`` into every call; a typo used to be swallowed by
    ``**_unused`` and training ran on the defaults. Now the first batch fails, naming it."""
    batch = _batch(["#### 72"], ["72"], name)
    manager = _manager(str(ROOT / f"rewards/{name}.py"), good)
    manager(batch, return_dict=True)  # negative control: the valid spelling grades
    manager = _manager(str(ROOT / f"rewards/{name}.py"), typo)
    with pytest.raises(ValueError, match=rf"unknown reward kwarg '{next(iter(typo))}' for {name}"):
        manager(batch, return_dict=True)


def _load_by_path(path: Path, cwd: Path, python: list[str], env: dict[str, str]):
    """Load ``path`` as verl's get_custom_reward_fn does, in a fresh process, and grade one
    correct answer."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('custom_module', {str(path)!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['custom_module'] = m\n"
        "spec.loader.exec_module(m)\n"
        "print(m.compute_score('x', '<answer>2*3+7</answer> #### 72', "
        "{'target': 13, 'numbers': [2, 3, 7]} if 'count' in m.__file__ else '72')['score'])\n"
    )
    return subprocess.run(
        [*python, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("name", ["countdown", "gsm8k"])
def test_loads_by_path_from_any_folder_of_the_environment(tmp_path: Path, name: str) -> None:
    """A Ray worker loads the file by path from its own cwd, with no PYTHONPATH: the installed
    ``rewards`` package (uv sync) is what lets the reward import its shared helpers."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = _load_by_path(ROOT / "rewards" / f"{name}.py", tmp_path, [sys.executable], env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1.0"


@pytest.mark.parametrize("name", ["countdown", "gsm8k"])
def test_outside_the_environment_the_rewards_folder_goes_on_pythonpath(
    tmp_path: Path, name: str
) -> None:
    """Without the install (``-S``: no site-packages), a copy of the ``rewards/`` folder on
    PYTHONPATH loads. Negative control: the reward file copied alone names the missing
    package."""
    folder = tmp_path / "elsewhere" / "rewards"
    folder.mkdir(parents=True)
    for file in (f"{name}.py", "_text.py", "__init__.py"):
        (folder / file).write_text((ROOT / "rewards" / file).read_text())
    bare = [sys.executable, "-S"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = _load_by_path(
        folder / f"{name}.py", tmp_path, bare, {**env, "PYTHONPATH": str(folder.parent)}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1.0"
    alone = tmp_path / f"{name}.py"
    alone.write_text((ROOT / "rewards" / f"{name}.py").read_text())
    result = _load_by_path(alone, tmp_path, bare, env)
    assert result.returncode != 0 and "No module named 'rewards'" in result.stderr


@pytest.mark.parametrize("name", ["countdown", "gsm8k", "_text"])
def test_rewards_use_only_the_standard_library(name: str) -> None:
    spec = importlib.util.spec_from_file_location(name, ROOT / "rewards" / f"{name}.py")
    source = Path(spec.origin).read_text()
    imported = {
        line.split()[1].split(".")[0]
        for line in source.splitlines()
        if line.startswith(("import ", "from ")) or line.startswith(("    import ", "    from "))
        for line in [line.strip()]
    }
    allowed = set(sys.stdlib_module_names) | {"rewards", "__future__"}
    assert imported <= allowed, imported - allowed
    assert "eval(" not in source.replace("evaluate(", "") and "exec(" not in source.replace(
        ".exec_module(", ""
    )
