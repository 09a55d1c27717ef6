"""Pre-flight refuses, one class of mistake per test, what verl or transformers would fail on
only after Ray starts (or never, training silently wrong); each with a passing control."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from rlvr.config.compose import ConfigError, compose, compose_checked
from rlvr.models.hub import model_path_problem
from rlvr.preflight import checks as preflight
from rlvr.preflight.checks import numeric_problems, verl_problems
from rlvr.preflight.data import data_problems
from rlvr.preflight.run_identity import write_identity
from rlvr.tasks import TaskError, TaskSpec

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("preflight_env")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "models" / "good"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    (folder / "pytorch_model.bin").write_bytes(b"")
    return folder


# --- model path -----------------------------------------------------------------------------


def test_model_folders_and_hub_ids(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert model_path_problem(str(model_dir)) is None  # control: a complete folder
    assert model_path_problem("models/good") is None  # relative to where the launcher runs
    assert model_path_problem("Qwen/Qwen3-4B-Instruct-2507") is None  # online hub id
    (tmp_path / "models/empty").mkdir()
    (tmp_path / "models/noweights").mkdir()
    (tmp_path / "models/noweights/config.json").write_text('{"model_type": "qwen2"}')
    (tmp_path / "models/notype").mkdir()
    (tmp_path / "models/notype/config.json").write_text("{}")
    (tmp_path / "models/notype/model.safetensors").write_bytes(b"")
    cases = {
        "models/tny": "no such folder",  # one slash, but its parent exists: a typo, not a hub id
        "./tiny": "no such folder",
        "/no/such/model": "no such folder",
        "~/models/tiny": "starts with ~",
        "models/empty": "no config.json",
        "models/noweights": "no weights",
        "models/notype": "no model_type",
        "not a hub id": "neither a local folder nor a hub id",
        "": "is empty",
    }
    for path, message in cases.items():
        problem = model_path_problem(path)
        assert problem is not None and message in problem, (path, problem)
        assert "\n" not in problem


def test_offline_hub_id_must_be_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("rlvr.models.hub._in_hub_cache", lambda repo: repo == "me/cached")
    problem = model_path_problem("Qwen/Qwen3-4B-Instruct-2507")
    assert problem is not None and "HF_HUB_OFFLINE" in problem
    assert model_path_problem("me/cached") is None  # control


# --- numbers verl rejects inside its workers -------------------------------------------------


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor_rollout_ref.rollout.n=0", "actor_rollout_ref.rollout.n=0: must be"),
        ("actor_rollout_ref.rollout.n=-2", "actor_rollout_ref.rollout.n=-2"),
        ("actor_rollout_ref.rollout.n=1", "GRPO compares a group"),
        ("data.train_batch_size=0", "data.train_batch_size=0: must be a whole number > 0"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size=0", "ppo_mini_batch_size=0"),
        ("actor_rollout_ref.actor.optim.lr=0", "optim.lr=0: must be a finite number > 0"),
        ("actor_rollout_ref.actor.optim.lr=-1e-5", "optim.lr=-1e-05"),
        ("data.max_response_length=0", "data.max_response_length=0"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3", "must divide the per-rank"),
        # verl's default mini batch under a batch of 2: verl itself would only shrink the gradient
        ("actor_rollout_ref.actor.ppo_mini_batch_size=256", "sum to 0.00781, not 1"),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=0", "log_prob_micro"),
    ],
)
def test_numeric_settings_verl_would_reject(override: str, message: str) -> None:
    problems = numeric_problems(compose("countdown_cpu", [override]))
    assert problems and message in problems[0], problems


def test_numeric_controls_and_verls_own_checks() -> None:
    assert numeric_problems(compose("countdown_cpu")) == []
    assert numeric_problems(compose("countdown_qwen3_4b")) == []
    assert verl_problems(compose("countdown_cpu")) == []
    small = compose(
        "countdown_cpu",
        [
            "data.train_batch_size=1",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.use_dynamic_bsz=false",
        ],
    )
    (problem,) = verl_problems(small)
    assert "verl refuses this config" in problem and "train_batch_size (1)" in problem


# --- reward kwargs --------------------------------------------------------------------------


def test_reward_kwargs_are_checked_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The task's check_reward_kwargs runs first (a stand-in here, so this holds whether or
    not the task's own check exists yet); its one line becomes the problem."""

    def check(self: TaskSpec, kwargs: dict) -> None:
        unknown = sorted(set(kwargs) - {"format_score", "shaping"})
        if unknown:
            raise TaskError(f"unknown reward kwarg {unknown[0]!r}; valid: format_score, shaping")

    monkeypatch.setattr(TaskSpec, "check_reward_kwargs", check, raising=False)
    typo = compose("countdown_cpu", ["+custom_reward_function.reward_kwargs.formt_score=0.1"])
    problems = preflight._reward_problems(typo, preflight.tasks.for_config(typo))
    assert problems == [
        "custom_reward_function.reward_kwargs: unknown reward kwarg 'formt_score'; valid: "
        "format_score, shaping"
    ]
    good = compose("countdown_cpu")
    assert preflight._reward_problems(good, preflight.tasks.for_config(good)) == []


def test_a_misspelled_reward_kwarg_with_the_real_check() -> None:
    typo = compose("countdown_cpu", ["+custom_reward_function.reward_kwargs.formt_score=0.1"])
    problems = preflight._reward_problems(typo, preflight.tasks.for_config(typo))
    assert len(problems) == 1 and "formt_score" in problems[0] and "format_score" in problems[0]


# (a running Ray cluster: tests/test_ray_cluster.py)


# --- Hydra errors, one line -----------------------------------------------------------------


@pytest.mark.parametrize(
    "experiment, overrides, message",
    [
        ("countdown_cpuu", [], "unknown experiment 'countdown_cpuu' (did you mean countdown_cpu?)"),
        (
            "countdown_cpu",
            ["actor_rollout_ref.rollout.nn=2"],
            "override actor_rollout_ref.rollout.nn: countdown_cpu has no such key (did you mean "
            "actor_rollout_ref.rollout.n?)",
        ),
        ("countdown_cpu", ["base_model=tinyy"], "base_model=tinyy: no such option (did you mean"),
        ("countdown_cpu", ["base_modle=tiny"], "(did you mean base_model?)"),
        ("countdown_cpu", ["+data.train_batch_size=3"], "already exists; write"),
        ("countdown_cpu", ["data.train_batch_size=[1,"], "not valid Hydra syntax"),
    ],
)
def test_composition_errors_are_one_line(
    experiment: str, overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        compose_checked(experiment, overrides)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_main_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert preflight.main(["nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "countdown_cpu" in err  # lists the valid names
    assert preflight.main(["countdown_cpu", "trainer.total_training_stepz=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean trainer.total_training_steps?" in err
    assert compose_checked("countdown_cpu", ["trainer.total_training_steps=3"])  # control


def test_data_that_is_not_parquet(tmp_path: Path, model_dir: Path) -> None:
    fake = tmp_path / "train.parquet"
    fake.write_text("question,answer\n1,2\n")
    (tmp_path / "folder.parquet").mkdir()
    config = compose(
        "countdown_cpu",
        [f"data.train_files={fake}", f"data.val_files={tmp_path / 'folder.parquet'}"],
    )
    problems = data_problems(config, preflight.tasks.for_config(config))
    assert problems[0].startswith(f"data.train_files: {fake} is not a Parquet file")
    assert problems[1].startswith(f"data.val_files: {tmp_path / 'folder.parquet'} is a folder")


def test_launcher_stops_at_an_unknown_experiment(tmp_path: Path) -> None:
    """The real launcher: one line, exit 2, before wandb, logs or Ray."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/train.sh"), "countdown_cpuu", "trainer.x=1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "unknown experiment 'countdown_cpuu' (did you mean countdown_cpu?)" in done.stderr
    assert "wandb:" not in done.stdout and "log:" not in done.stdout


# --- the launcher's pre-flight, end to end: one bad input, one line, exit 2 ------------------


def _safetensors(path: Path, keys: tuple[str, ...] = ("model.embed_tokens.weight",)) -> None:
    """A safetensors file whose header names ``keys`` (no tensor data: pre-flight never loads)."""
    header = json.dumps({k: {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for k in keys})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode())


def _model(folder: Path, *weights: str) -> Path:
    """A model folder with config.json, a tokenizer file and these files (empty, or a
    header-only safetensors)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    (folder / "tokenizer_config.json").write_text("{}")
    for name in weights:
        if name.endswith(".safetensors"):
            _safetensors(folder / name)
        else:
            (folder / name).write_bytes(b"")
    return folder


def _index(folder: Path, *shards: str) -> None:
    weight_map = {f"layer.{i}.weight": shard for i, shard in enumerate(shards)}
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Good Countdown data and model, and one bad file or folder per way of being wrong."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlvr.tasks.countdown import prepare

    root = tmp_path_factory.mktemp("inputs")
    prepare("generate", str(root / "data"), train_size=8, test_size=4)
    table = pq.read_table(root / "data/train.parquet")
    pq.write_table(table.drop_columns(["data_source"]), root / "no_data_source.parquet")
    pq.write_table(table.slice(0, 0), root / "no_rows.parquet")
    text = pa.array([m[0]["content"] for m in table.column("prompt").to_pylist()])
    prompt = table.schema.get_field_index("prompt")
    pq.write_table(table.set_column(prompt, "prompt", text), root / "prompt_str.parquet")
    gt = pa.array([str(r) for r in table.column("reward_model").to_pylist()])
    reward = table.schema.get_field_index("reward_model")
    pq.write_table(table.set_column(reward, "reward_model", gt), root / "reward_str.parquet")
    pq.write_table(
        table.set_column(prompt, "prompt", pa.array([[]] * 8, table.schema.field("prompt").type)),
        root / "prompt_empty.parquet",
    )
    _model(root / "model", "model.safetensors")
    _model(root / "model_pt", "optimizer.pt")
    _index(_model(root / "model_index"), "model-00001-of-00002.safetensors")
    sharded = _model(root / "model_shard", "model-00001-of-00002.safetensors")
    _index(sharded, "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    _index(
        _model(root / "model_sharded", "model-00001-of-00001.safetensors"),
        "model-00001-of-00001.safetensors",
    )
    nometa = _model(root / "model_nometa", "model-00001-of-00001.safetensors")
    (nometa / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors"}})
    )
    (_model(root / "model_notype", "model.safetensors") / "config.json").write_text("{}")
    peft = _model(root / "model_peft")
    _safetensors(peft / "model.safetensors", ("base_model.model.lm_head.base_layer.weight",))
    return {"root": root}


def _good(root: Path) -> list[str]:
    return [
        f"data.train_files={root / 'data/train.parquet'}",
        f"data.val_files={root / 'data/test.parquet'}",
        f"actor_rollout_ref.model.path={root / 'model'}",
    ]


BAD = [
    # (override, with {root} for the inputs folder; what the one line must say)
    ("trainer.n_gpus_per_node=abc", "trainer.n_gpus_per_node=abc: must be a whole number > 0"),
    ("trainer.nnodes=0.5", "trainer.nnodes=0.5: must be a whole number > 0"),
    ("trainer.nnodes=inf", "trainer.nnodes=inf: must be a whole number > 0"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=inf", "ppo_mini_batch_size=inf: must be"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=2.5", "ppo_mini_batch_size=2.5: must be"),
    ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=abc", "ulysses_sequence_parallel"),
    ("data.max_prompt_length=1e30", "data.max_prompt_length=1e+30: must be a whole number"),
    ("data.max_prompt_length=4294967296", "data.max_prompt_length=4294967296: must be at most"),
    ("actor_rollout_ref.actor.optim.lr=inf", "optim.lr=inf: must be a finite number > 0"),
    ("actor_rollout_ref.actor.optim.lr=nan", "optim.lr=nan: must be a finite number > 0"),
    ("actor_rollout_ref.actor.optim.lr=abc", "optim.lr=abc: must be a finite number > 0"),
    ("actor_rollout_ref.rollout.n=inf", "actor_rollout_ref.rollout.n=inf: must be a whole"),
    ("data.val_files=null", "data.val_files=None: names no file"),
    ("data.val_files=[]", "data.val_files=[]: names no file"),
    ("data.train_files=[]", "data.train_files=[]: names no file"),
    ("data.train_files=''", "data.train_files=: names no file"),
    ("data.train_files={root}/no_data_source.parquet", "lacks column(s) ['data_source']"),
    ("data.train_files={root}/no_rows.parquet", "no_rows.parquet has no rows"),
    ("data.val_files={root}/no_rows.parquet", "data.val_files: {root}/no_rows.parquet has no"),
    ("data.train_files={root}/prompt_str.parquet", "column prompt is string, not verl's chat"),
    ("data.train_files={root}/prompt_empty.parquet", "row 0: prompt [] is not a non-empty list"),
    ("data.train_files={root}/reward_str.parquet", "column reward_model is string, not a struct"),
    ("actor_rollout_ref.model.path={root}/model_pt", "model_pt has config.json but no weights"),
    ("actor_rollout_ref.model.path={root}/model_index", "model_index has config.json but no w"),
    ("actor_rollout_ref.model.path={root}/model_shard", "lists shard file(s) not in the f"),
    ("actor_rollout_ref.model.path={root}/model_nometa", "index.json: no metadata object"),
    ("actor_rollout_ref.model.path={root}/model_notype", "config.json: no model_type"),
    ("actor_rollout_ref.model.path={root}/model_peft", "model_peft holds PEFT-keyed LoRA"),
    # objective/dapo.yaml's 204-token buffer is for 1024 tokens; countdown_cpu answers in 48
    ("objective=dapo", "overlong_buffer_cfg.len=204 must be below"),
]


@pytest.mark.parametrize("override, message", BAD, ids=[case[0] for case in BAD])
def test_bad_input_is_one_line_exit_2(
    inputs: dict[str, Path], override: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``scripts/train.sh`` runs before Ray: never a traceback, never "ok"."""
    root = inputs["root"]
    assert preflight.main(["countdown_cpu", *_good(root), override.format(root=root)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith("pre-flight: ") and message.format(root=root) in captured.err
    assert " ok (" not in captured.out


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["data.train_files=[{root}/data/train.parquet,{root}/data/train.parquet]"],
        ["actor_rollout_ref.model.path={root}/model_sharded"],
        ["actor_rollout_ref.actor.optim.lr=1", "trainer.n_gpus_per_node=1", "trainer.nnodes=1"],
        ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=1"],
        ["objective=dapo", "reward_model.reward_kwargs.overlong_buffer_cfg.len=9"],
    ],
)
def test_good_input_passes(
    inputs: dict[str, Path], overrides: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Negative controls for the table above: the same inputs, sound, say ok."""
    root = inputs["root"]
    extra = [o.format(root=root) for o in overrides]
    assert preflight.main(["countdown_cpu", *_good(root), *extra]) == 0, capsys.readouterr().err
    assert " ok (task countdown" in capsys.readouterr().out


@pytest.mark.parametrize(
    "folder, refused",
    [
        ("model", False),
        ("model_sharded", False),
        ("model_pt", True),
        ("model_index", True),
        ("model_shard", True),
        ("model_peft", True),
    ],
)
def test_preflight_and_eval_share_one_weight_rule(
    inputs: dict[str, Path], folder: str, refused: bool
) -> None:
    """A folder pre-flight passes, eval loads too, and the other way round (rlvr.models.hub)."""
    from rlvr.evaluation import EvalError
    from rlvr.evaluation.model import resolve_model

    path = str(inputs["root"] / folder)
    assert (model_path_problem(path) is not None) is refused
    assert _raises(EvalError, resolve_model, path) is refused


def _raises(kind: type[Exception], function: Callable[..., object], *args: object) -> bool:
    try:
        function(*args)
    except kind:
        return True
    return False


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data.max_response_length=abc"], "data.max_response_length=abc: must be a whole number"),
        (["reward_model.reward_kwargs.overlong_buffer_cfg.len=abc"], "len=abc: must be a whole"),
        (["reward_model.reward_kwargs.overlong_buffer_cfg.len=48"], "len=48 must be below"),
    ],
)
def test_dapo_buffer_refusals_are_one_line(
    inputs: dict[str, Path], overrides: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = inputs["root"]
    assert preflight.main(["countdown_cpu", *_good(root), "objective=dapo", *overrides]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_a_dapo_buffer_that_fits_but_is_not_a_fifth_is_pointed_out(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = inputs["root"]
    buffer = "reward_model.reward_kwargs.overlong_buffer_cfg.len=5"
    assert preflight.main(["countdown_cpu", *_good(root), "objective=dapo", buffer]) == 0
    assert "len=5, not the last fifth of data.max_response_length=48 (9)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "tracker, steps, message",
    [
        ("", [2, 4], "write 4 into it to resume from global_step_4, the newest checkpoint"),
        ("4\x00", [2], "write 2 into it to resume from global_step_2"),
        ("", [], "(a crash while verl wrote it); delete it to start fresh"),
        ("4", [4], None),  # negative control: a tracker verl can read passes
    ],
)
def test_an_unreadable_checkpoint_tracker_is_refused_with_the_fix(
    inputs: dict[str, Path],
    tmp_path: Path,
    tracker: str,
    steps: list[int],
    message: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """verl's resume runs int() on latest_checkpointed_iteration.txt inside Ray; a crash between
    its open and write leaves it empty while complete checkpoints sit beside it."""
    run = tmp_path / "run"
    run.mkdir()
    for step in steps:
        (run / f"global_step_{step}" / "actor").mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text(tracker)
    argv = ["countdown_cpu", *_good(inputs["root"]), f"trainer.default_local_dir={run}"]
    write_identity(compose(argv[0], argv[1:]))  # this run's own checkpoints
    code = preflight.main(argv)
    err = capsys.readouterr().err
    if message is None:
        assert code == 0, err
    else:
        assert code == 2 and err.count("\n") == 1 and message in err, err
