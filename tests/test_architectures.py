"""The base-model shape table (rlvr/models/architectures.py) against published sizes and
against the models transformers builds from it."""

from __future__ import annotations

import dataclasses

import pytest

from rlvr.models.architectures import (
    ARCHITECTURES,
    TABLE,
    by_hf_id,
    for_model_path,
    lora_parameters_per_rank,
    miniature,
    parameter_count,
    transformers_config,
)

# The sizes the hub's model cards and safetensors totals publish.
PUBLISHED_BILLIONS = {
    "Qwen/Qwen2.5-0.5B-Instruct": 0.49,
    "Qwen/Qwen2.5-1.5B-Instruct": 1.54,
    "Qwen/Qwen2.5-3B-Instruct": 3.09,
    "Qwen/Qwen3-4B-Instruct-2507": 4.02,
}


@pytest.mark.parametrize("hf_id", sorted(PUBLISHED_BILLIONS))
def test_parameter_count_matches_the_published_size(hf_id: str) -> None:
    arch = by_hf_id(hf_id)
    assert arch is not None
    billions = parameter_count(arch) / 1e9
    assert billions == pytest.approx(PUBLISHED_BILLIONS[hf_id], rel=0.01)


def test_the_table_agrees_with_the_hand_derived_sizes() -> None:
    """The figures the base_model overlays used to carry (model_facts), derived by hand from the
    published config.json: 151936*2560 + 36*(2560*(4096+1024+1024) + 4096*2560 + 3*2560*9728
    + 2*2560 + 2*128) + 2560 for Qwen3-4B, and 36*((2560+4096) + 2*(2560+1024) + (4096+2560)
    + 3*(2560+9728)) LoRA parameters per rank."""
    sizes = {
        "Qwen/Qwen3-4B-Instruct-2507": (4_022_468_096, 2_064_384),
        "Qwen/Qwen2.5-3B-Instruct": (3_085_938_688, 1_870_848),
        "Qwen/Qwen2.5-0.5B-Instruct": (494_032_768, 549_888),
    }
    for hf_id, (parameters, per_rank) in sizes.items():
        arch = by_hf_id(hf_id)
        assert arch is not None
        assert (parameter_count(arch), lora_parameters_per_rank(arch)) == (parameters, per_rank)


def test_every_hub_model_of_an_experiment_has_a_row() -> None:
    """Pre-flight sizes disk and memory from the table: a hub model without a row is unplanned."""
    from rlvr.config.compose import compose, experiments

    for experiment in experiments():
        path = str(compose(experiment).actor_rollout_ref.model.path)
        if not path.startswith("/"):
            assert for_model_path(path) is not None, f"{experiment}: add {path} to {TABLE}"


def test_an_untied_head_counts_the_embedding_twice() -> None:
    arch = ARCHITECTURES["qwen2.5-0.5b-instruct"]
    untied = dataclasses.replace(arch, tie_word_embeddings=False)
    assert parameter_count(untied) - parameter_count(arch) == arch.vocab_size * arch.hidden_size


def test_unknown_model_type_is_refused() -> None:
    with pytest.raises(ValueError, match="model_type"):
        parameter_count(dataclasses.replace(ARCHITECTURES["qwen2.5-0.5b-instruct"], model_type="x"))


def test_by_hf_id_misses_unknown_models() -> None:
    assert by_hf_id("Qwen/Qwen2.5-7B-Instruct") is None


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_transformers_builds_the_counted_parameters(name: str) -> None:
    """The formula against the modules transformers actually builds (at toy size, same model
    type, grouping and tying), so a missing bias or norm in the formula fails here."""
    from transformers import AutoModelForCausalLM

    arch = miniature(ARCHITECTURES[name])
    model = AutoModelForCausalLM.from_config(transformers_config(arch))
    assert model.config.model_type == arch.model_type
    assert model.num_parameters() == parameter_count(arch)
    # Negative control: the other model type's layers count differently.
    other = dataclasses.replace(arch, model_type="qwen3" if arch.model_type == "qwen2" else "qwen2")
    assert parameter_count(other) != model.num_parameters()


def test_config_overrides_win() -> None:
    config = transformers_config(ARCHITECTURES["qwen3-4b-instruct-2507"], use_cache=False)
    assert config.use_cache is False
    assert config.head_dim == 128 and config.num_key_value_heads == 8
