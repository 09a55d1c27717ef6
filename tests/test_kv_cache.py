"""``rlvr.models.kv_cache``: decoding from a cache with room gives what ``DynamicCache`` gives,
and every ``DynamicLayer`` operation that replaces the keys from outside stays valid."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache
from transformers.cache_utils import DynamicLayer

from rlvr.models.kv_cache import ReservedLayer, with_room
from rlvr.models.prefill import shared_prompt_cache
from rlvr.models.tiny import build_model


def _states(batch: int, tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 2, tokens, 4, generator=gen), torch.randn(
        batch, 2, tokens, 8, generator=gen
    )


def test_a_reserved_layer_holds_what_a_dynamic_layer_holds() -> None:
    """Updates past the room, a crop, a batch selection and a reorder (the last two replace the
    keys from outside) leave both layers with equal keys and values at every step."""
    plain, reserved = DynamicLayer(), ReservedLayer(room=2)
    steps = [(3, 5), (3, 1), (3, 1), (3, 1), (3, 1), (3, 2)]
    for seed, (batch, tokens) in enumerate(steps):
        keys, values = _states(batch, tokens, seed)
        for layer in (plain, reserved):
            got = layer.update(keys, values)
        assert torch.equal(got[0], plain.keys) and torch.equal(got[1], plain.values)
    for change in (lambda layer: layer.crop(7),
                   lambda layer: layer.batch_select_indices(torch.tensor([2, 0])),
                   lambda layer: layer.reorder_cache(torch.tensor([1, 0]))):  # fmt: skip
        change(plain)
        change(reserved)
        keys, values = _states(plain.keys.shape[0], 1, 99)
        for layer in (plain, reserved):
            layer.update(keys, values)
        assert torch.equal(reserved.keys, plain.keys) and torch.equal(reserved.values, plain.values)
    assert reserved.get_seq_length() == plain.get_seq_length() == 10 and plain.keys.shape[0] == 2


def test_a_step_writes_in_place() -> None:
    """Within the room the keys stay views of one buffer (no copy of the cache per step); the
    negative control: a plain DynamicLayer's keys move at every step."""
    plain, reserved = DynamicLayer(), ReservedLayer(room=4)
    pointers: dict[str, set[int]] = {"plain": set(), "reserved": set()}
    for seed in range(4):
        keys, values = _states(2, 6 if seed == 0 else 1, seed)
        for name, layer in (("plain", plain), ("reserved", reserved)):
            layer.update(keys, values)
            pointers[name].add(layer.keys.data_ptr())
    assert len(pointers["reserved"]) == 1 and len(pointers["plain"]) == 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model(tmp_path_factory.mktemp("kv") / "tiny", seed=5)


@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sampled"])
def test_generate_from_a_cache_with_room_decodes_the_same(tiny: Path, sample: bool) -> None:
    """``generate`` continuing from a prefilled cache: the same tokens and logits with the
    cache given room as with transformers' own, greedy and seeded sampling; the room (8) is
    smaller than the response (12), so the buffer grows once on the way."""
    model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 200, (3, 9), generator=gen).repeat_interleave(2, dim=0)
    mask = torch.ones_like(prompts)
    mask[:2, :3] = 0  # two left-padded rows
    outputs = []
    for room in (None, 8):
        cache = shared_prompt_cache(model, prompts, mask)
        assert isinstance(cache, DynamicCache)
        if room is not None:
            cache = with_room(cache, room)
            assert all(isinstance(layer, ReservedLayer) for layer in cache.layers)
        torch.manual_seed(1)
        with torch.no_grad():
            out = model.generate(
                input_ids=prompts, attention_mask=mask, past_key_values=cache,
                max_new_tokens=12, do_sample=sample, temperature=1.0, top_k=None,
                eos_token_id=[], pad_token_id=0, output_logits=True,
                return_dict_in_generate=True,
            )  # fmt: skip
        outputs.append(out)
    assert torch.equal(outputs[0].sequences, outputs[1].sequences)
    torch.testing.assert_close(torch.stack(outputs[1].logits), torch.stack(outputs[0].logits))
