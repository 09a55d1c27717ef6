"""An experiment file is the recipe (issue 39): every experiment states its knobs itself, the
overlays hold only mechanics (the owner map below), and a plain text edit of one knob's line in
one experiment changes that experiment's composed config, and no other experiment's."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from rlvr.config.compose import CONFIG_DIR, compose, experiments

# The overlay groups (configs/<group>/); rehearsal/ and attention/ swap hardware keys.
GROUPS = ("task", "base_model", "hardware", "adapter", "objective")

# The mechanic each overlay owns: the longest matching dotted prefix wins. A key no overlay owns
# is the experiment's (grpo.yaml and configs/*.yaml): every tuned knob is. rehearsal/ and
# attention/ swap hardware, so they own nothing new.
OWNERS = {
    "objective": (
        "algorithm.adv_estimator",
        "algorithm.norm_adv_by_std_in_grpo",
        "algorithm.use_kl_in_reward",
        "actor_rollout_ref.actor.use_kl_loss",
        "actor_rollout_ref.actor.kl_loss_type",
        "actor_rollout_ref.actor.entropy_coeff",
        "actor_rollout_ref.actor.clip_ratio_low",
        "actor_rollout_ref.actor.clip_ratio_high",
        "actor_rollout_ref.actor.clip_ratio_c",
        "actor_rollout_ref.actor.policy_loss",
        "actor_rollout_ref.actor.loss_agg_mode",
        "actor_rollout_ref.actor.ppo_epochs",
        "actor_rollout_ref.rollout.temperature",
        "actor_rollout_ref.rollout.top_k",
        "reward_model.reward_manager",
        "reward_model.reward_kwargs",
    ),
    "task": (
        "recipe.task",
        "data.train_files",
        "data.val_files",
        "data.filter_overlong_prompts",
        "data.truncation",
        "custom_reward_function.path",
        "custom_reward_function.name",
    ),
    "adapter": (
        "actor_rollout_ref.model.lora_rank",
        "actor_rollout_ref.model.lora_alpha",
        "actor_rollout_ref.model.target_modules",
        "actor_rollout_ref.actor.checkpoint.save_contents",
        "actor_rollout_ref.rollout.load_format",
        "actor_rollout_ref.rollout.layered_summon",
    ),
    "hardware": (
        "trainer.n_gpus_per_node",
        "trainer.nnodes",
        "actor_rollout_ref.nccl_timeout",
        "hardware_lora",
        "hardware_facts",
        "data.dataloader_num_workers",
        "actor_rollout_ref.model.enable_gradient_checkpointing",
        "actor_rollout_ref.model.use_remove_padding",
        "actor_rollout_ref.model.override_config",
        "actor_rollout_ref.actor.strategy",
        "actor_rollout_ref.actor.use_dynamic_bsz",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.use_torch_compile",
        "actor_rollout_ref.actor.fsdp_config",
        "actor_rollout_ref.ref.strategy",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.fsdp_config",
        "actor_rollout_ref.rollout.name",
        "actor_rollout_ref.rollout.mode",
        "actor_rollout_ref.rollout.dtype",
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        # the HF-generate rollout's own settings (its sampling seed) come with choosing it
        "actor_rollout_ref.rollout.engine_kwargs.hf",
        "ray_kwargs.ray_init.num_gpus",
        "ray_kwargs.ray_init.num_cpus",
        "ray_kwargs.ray_init.include_dashboard",
        "ray_kwargs.ray_init.runtime_env.env_vars.RLVR_CPU_COMPAT",
        "ray_kwargs.ray_init.runtime_env.env_vars.GLIBC_TUNABLES",
        # the CPU path's fixes reach verl's ranks through Ray's setup hook (rlvr/cpu/hook.py)
        "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook",
        # how a Tinker run talks to its server (hardware/tinker.yaml)
        "tinker.request_timeout_s",
        "tinker.max_retries",
        "tinker.backoff_s",
    ),
}
# What a base_model/ preset may set: the model and its chat template, nothing tuned.
BASE_MODEL_KEYS = ("actor_rollout_ref.model.path", "data.apply_chat_template_kwargs")
# The knobs every experiment states as literals in its own file (tests/test_recipe_files.py
# edits some of them and checks that only that experiment moves).
KNOBS = (
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.actor.kl_loss_coef",
    "actor_rollout_ref.rollout.n",
    "data.train_batch_size",
    "data.max_prompt_length",
    "data.max_response_length",
    "custom_reward_function.reward_kwargs",
    "trainer.total_epochs",
    "trainer.total_training_steps",
    "trainer.save_freq",
    "trainer.test_freq",
)


def owner(key: str) -> str:
    """The concern that owns a dotted key."""
    parts = key.split(".")
    for length in range(len(parts), 0, -1):
        prefix = ".".join(parts[:length])
        for group, prefixes in OWNERS.items():
            if prefix in prefixes:
                return group
    return "experiment"


def raw_yaml(path: Path) -> dict[str, Any]:
    """A YAML file as written, interpolations unresolved."""
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert isinstance(raw, dict)
    return {str(key): value for key, value in raw.items()}


def keys_set(path: Path) -> list[str]:
    """The dotted keys a YAML file sets itself (lists are values), its `defaults` left out."""
    raw = raw_yaml(path)
    raw.pop("defaults", None)

    def walk(node: Any, prefix: str) -> list[str]:
        if not isinstance(node, dict):
            return [prefix]
        return [leaf for key, value in node.items() for leaf in walk(value, f"{prefix}{key}.")]

    return [key.rstrip(".") for key in walk(raw, "")]


def test_the_ownership_map_gives_each_key_one_owner() -> None:
    prefixes = [prefix for group in OWNERS.values() for prefix in group]
    assert len(prefixes) == len(set(prefixes))
    assert owner("actor_rollout_ref.actor.fsdp_config.param_offload") == "hardware"
    assert {owner(knob) for knob in KNOBS} == {"experiment"}


def test_overlays_set_only_the_mechanics_of_their_concern() -> None:
    """No overlay sets a tuned knob or another concern's key, so none undoes another (issue 14)
    and none hides a value the experiment file should show (issue 39)."""
    wrong = []
    for group in (*GROUPS, "rehearsal", "attention"):
        for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
            # rehearsal/ and attention/ swap hardware keys (what a CPU, or a node without
            # flash-attn, cannot run)
            allowed = "hardware" if group in ("rehearsal", "attention") else group
            for key in keys_set(path):
                if group == "base_model":
                    ok = key.startswith(BASE_MODEL_KEYS)
                else:
                    ok = owner(key) == allowed
                if not ok:
                    wrong.append(f"{group}/{path.name}: {key} ({owner(key)})")
    assert wrong == []


def test_experiments_state_their_knobs_and_no_overlay_mechanics() -> None:
    """grpo.yaml sets experiment keys only (its objective is objective/grpo.yaml). Each
    experiment states every knob as a literal (an interpolation only for the model folder under
    paths.root) and may pin an objective knob (it then wins over every preset:
    docs/OBJECTIVES.md), never a task, adapter or hardware mechanic."""
    wrong = [
        f"grpo.yaml: {key}"
        for key in keys_set(CONFIG_DIR / "grpo.yaml")
        if owner(key) != "experiment"
    ]
    for experiment in experiments():
        path = CONFIG_DIR / f"{experiment}.yaml"
        keys = keys_set(path)
        wrong += [f"{experiment}: {k}" for k in keys if owner(k) not in ("experiment", "objective")]
        for knob in KNOBS:
            stated = [k for k in keys if k == knob or k.startswith(f"{knob}.")]
            values = [str(_raw_value(path, k)) for k in stated]
            if not stated or any("${" in v and not v.startswith("${paths.root}/") for v in values):
                wrong.append(f"{experiment}: {knob} not a literal of its own")
    assert wrong == []


def _raw_value(path: Path, key: str) -> Any:
    node: Any = raw_yaml(path)
    for part in key.split("."):
        node = node[part]
    return node


def test_precedence_overlays_then_the_experiment_then_base_model_then_the_command_line() -> None:
    """docs/TRAINING.md, "Precedence": each group picked on the command line still sets the keys
    it owns, the experiment's knobs stay its own, and base_model=NAME swaps only the model."""
    lora = compose("countdown_qwen3_4b", ["adapter=lora32"])
    assert lora.actor_rollout_ref.model.lora_rank == 32  # the adapter's mechanics...
    assert lora.actor_rollout_ref.actor.optim.lr == 2e-6  # ...at the experiment's lr
    dapo = compose("countdown_qwen3_4b", ["objective=dapo"]).actor_rollout_ref.actor
    assert (dapo.clip_ratio_high, dapo.use_kl_loss, dapo.kl_loss_coef) == (0.28, False, 0.001)
    assert compose("countdown_qwen3_4b", ["hardware=h100x1"]).trainer.n_gpus_per_node == 1
    tiny = compose("countdown_smollm2_cpu", ["base_model=tiny"])
    assert str(tiny.actor_rollout_ref.model.path).endswith("artifacts/models/tiny")
    assert tiny.actor_rollout_ref.actor.optim.lr == 3e-5  # the experiment's, not tiny's
    small = compose("countdown_qwen3_4b", ["base_model=qwen2_5_0_5b_instruct"])
    assert small.actor_rollout_ref.model.path == "Qwen/Qwen2.5-0.5B-Instruct"
    assert small.data.train_batch_size == 64
    # the command line wins over the preset and the experiment alike
    both = ["base_model=tiny", "actor_rollout_ref.model.path=/m", "data.max_response_length=7"]
    last = compose("countdown_smollm2_cpu", both)
    assert (last.actor_rollout_ref.model.path, last.data.max_response_length) == ("/m", 7)
    # control: without the preset the experiment's own model stays
    own = compose("countdown_smollm2_cpu").actor_rollout_ref.model.path
    assert str(own).endswith("artifacts/models/smollm2-135m-instruct")


# The knob's line (its key, at any indent) and the new value written there; each experiment
# gets its own values (its index added), so an edit that reached another experiment would show.
EDITS = {
    "actor_rollout_ref.actor.optim.lr": ("lr", "3.{}e-7"),
    "actor_rollout_ref.rollout.n": ("n", "5{}"),
    "data.max_response_length": ("max_response_length", "33{}"),
    "custom_reward_function.reward_kwargs.format_score": ("format_score", "0.05{}"),
}


def edit_line(path: Path, key: str, value: str) -> None:
    """Replace the value on the one line that sets ``key`` (a test failure if it is not one)."""
    lines = path.read_text().splitlines(keepends=True)
    pattern = re.compile(rf"^(\s+{re.escape(key)}:)\s*[^\s#]+(.*)$", re.DOTALL)
    hits = [i for i, line in enumerate(lines) if pattern.match(line)]
    assert len(hits) == 1, f"{path.name}: {len(hits)} lines set {key}"
    lines[hits[0]] = pattern.sub(rf"\g<1> {value}\g<2>", lines[hits[0]])
    path.write_text("".join(lines))


def edit_experiment(config_dir: Path, experiment: str) -> dict[str, float]:
    """The one-line edits of ``experiment``'s file; the values written, by dotted key."""
    index = experiments().index(experiment)
    written = {}
    for dotted, (key, template) in EDITS.items():
        value = template.format(index)
        edit_line(config_dir / f"{experiment}.yaml", key, value)
        written[dotted] = float(value)
    return written


def every_experiment_edited(folder: Path) -> Path:
    """A copy of configs/ in ``folder`` with every experiment's file edited; its path."""
    copy = folder / "configs"
    shutil.copytree(CONFIG_DIR, copy)
    for experiment in experiments():
        edit_experiment(copy, experiment)
    return copy


def compose_all(
    config_dir: Path, root: Path, names: list[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Experiments (default: all) composed from ``config_dir`` as Hydra composes them, resolved."""
    from hydra import compose, initialize_config_dir

    composed = {}
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        for experiment in names or experiments():
            config = compose(config_name=experiment, overrides=[f"paths.root={root}"])
            container = OmegaConf.to_container(config, resolve=True)
            assert isinstance(container, dict)
            composed[experiment] = {str(k): v for k, v in container.items()}
    return composed


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The paths.root every compose of this module gets."""
    return tmp_path_factory.mktemp("root")


@pytest.fixture(scope="module")
def originals(root: Path) -> dict[str, dict[str, Any]]:
    return compose_all(CONFIG_DIR, root)


@pytest.fixture(scope="module")
def all_edited(root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every experiment composed from one copy in which every experiment's file is edited."""
    return compose_all(every_experiment_edited(tmp_path_factory.mktemp("all_edited")), root)


# One xdist worker runs the tests that share the module's composes of every experiment (about
# 4 s a set), so each set is composed once, not once per worker that gets one of them.
SHARED_COMPOSES = pytest.mark.xdist_group("recipe_files")


@SHARED_COMPOSES
@pytest.mark.parametrize("experiment", experiments())
def test_one_line_edits_move_only_that_experiment(
    experiment: str,
    root: Path,
    originals: dict[str, dict[str, Any]],
    all_edited: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    """The experiment's own edits move its knobs, and the other experiments' edits leave it
    as its own edits alone make it: composed with every file edited, it equals its compose with
    only its own file edited. An edit of another file that reached it (an experiment or overlay
    it reads) would show there, with that file's own values; the control test below shows one."""
    copy = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, copy)
    written = edit_experiment(copy, experiment)
    edited = compose_all(copy, root, [experiment])[experiment]
    for dotted, value in written.items():
        new = OmegaConf.select(OmegaConf.create(edited), dotted)
        old = OmegaConf.select(OmegaConf.create(originals[experiment]), dotted)
        assert new == value != old, (experiment, dotted)
    assert all_edited[experiment] == edited, f"another experiment's edit changed {experiment}"


@SHARED_COMPOSES
def test_an_edit_that_reaches_another_experiment_is_caught(
    root: Path, all_edited: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """The control: beside every experiment's edits, one edit in a file two experiments share
    (hardware/a100x8.yaml) makes their composes differ from their every-file-edited ones, which
    equal their own-edits-only ones above; so the check above fails for both."""
    copy = every_experiment_edited(tmp_path)
    edit_line(copy / "hardware/a100x8.yaml", "gpu_memory_utilization", "0.55")
    shared = ["countdown_qwen3_4b", "countdown_qwen3_4b_lora"]
    leaked = compose_all(copy, root, shared)
    assert [leaked[e] != all_edited[e] for e in shared] == [True, True]
