"""Generation backends: model resolution, batched HF generate, sampled-token log-probs."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlvr.evaluation import EvalError
from rlvr.evaluation.generation import (
    VLLM_LORA_RANKS,
    HFBackend,
    _from_vllm,
    make_backend,
    vllm_lora_rank,
)
from rlvr.evaluation.model import ModelSource, resolve_model
from rlvr.evaluation.settings import SamplingSettings


def _prompts(tokenizer) -> list[list[int]]:
    texts = ["Using the numbers [2, 3, 7]", "(1 + 7) * 42", "<answer> 3 * 7 </answer> and more"]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def _forward_logprobs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    """Teacher-forced log p(response token) under the raw model distribution."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(response)[:, None])[:, 0]


def _manual_greedy(model, prompt: list[int], steps: int) -> list[int]:
    ids = list(prompt)
    for _ in range(steps):
        with torch.no_grad():
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Path) -> HFBackend:
    return HFBackend(resolve_model(str(tiny_model_dir)), batch_size=4)


def test_resolve_model_kinds(tmp_path: Path, tiny_model_dir: Path) -> None:
    assert resolve_model(str(tiny_model_dir)) == ModelSource("folder", str(tiny_model_dir))
    assert resolve_model("Qwen/Qwen3-4B-Instruct-2507").kind == "hub"
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": str(tiny_model_dir)})
    )
    source = resolve_model(str(adapter))
    assert source.kind == "lora" and source.base == str(tiny_model_dir)
    assert source.tokenizer_path == str(tiny_model_dir)  # the adapter has no tokenizer
    assert source.weights_path == str(tiny_model_dir)
    assert resolve_model(str(tiny_model_dir)).weights_path == str(tiny_model_dir)


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda d: str(d / "missing/actor/huggingface"), "no such folder"),
        (lambda d: "./relative/org_model", "no such folder"),
        (lambda d: str(d), "no config.json or adapter_config.json"),
        (lambda d: str(d / "file.txt"), "is a file"),
    ],
)
def test_resolve_model_fails_fast(tmp_path: Path, make, message: str) -> None:
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(EvalError, match=message):
        resolve_model(make(tmp_path))


def test_adapter_without_base_record(tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(EvalError, match="--base_model"):
        resolve_model(str(tmp_path))


def test_adapter_base_must_be_a_complete_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    """An adapter naming itself, or two naming each other, is refused (it recursed until
    RecursionError); a base that is not a string names adapter_config.json; --base_model is
    blamed by name."""

    def adapter(name: str, base: object) -> str:
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(
            json.dumps({"base_model_name_or_path": base})
        )
        return str(tmp_path / name)

    with pytest.raises(EvalError, match="is the adapter itself"):
        resolve_model(adapter("self", str(tmp_path / "self")))
    adapter("a", str(tmp_path / "b"))
    with pytest.raises(EvalError, match=r"/b/adapter_config.json: .*another LoRA adapter"):
        resolve_model(adapter("b", str(tmp_path / "a")))
    with pytest.raises(EvalError, match=r"adapter_config.json: base_model_name_or_path is 5"):
        resolve_model(adapter("int", 5))
    good = adapter("good", str(tiny_model_dir))
    with pytest.raises(EvalError, match=r"^--base_model .*nope: no such folder"):
        resolve_model(good, base_model=str(tmp_path / "nope"))
    assert resolve_model(good).base == str(tiny_model_dir)  # negative control
    assert resolve_model(str(tmp_path / "a"), base_model=str(tiny_model_dir)).kind == "lora"


def test_greedy_matches_manual_decoding_and_logprobs(backend: HFBackend) -> None:
    """Batched, left-padded greedy output equals one-at-a-time argmax decoding, and the
    recorded log-probs equal a teacher-forced forward pass over the same tokens."""
    prompts = _prompts(backend.tokenizer)
    assert len({len(p) for p in prompts}) > 1  # padding is exercised
    results = backend.generate(prompts, SamplingSettings(max_tokens=12))
    for prompt, (generation,) in zip(prompts, results, strict=True):
        expected = _manual_greedy(backend.model, prompt, 12)
        assert generation.token_ids == expected
        assert generation.num_tokens == 12 and generation.finish_reason == "length"
        assert backend.tokenizer.decode(expected, skip_special_tokens=True) == generation.text
        reference = _forward_logprobs(backend.model, prompt, expected)
        assert torch.allclose(torch.tensor(generation.logprobs), reference, atol=1e-4)


@pytest.mark.parametrize("temperature,top_p", [(0.5, 1.0), (1.0, 0.9), (2.0, 0.5)])
def test_sampled_logprobs_are_raw_model_logprobs(
    backend: HFBackend, temperature: float, top_p: float
) -> None:
    """Under temperature and top-p the recorded values are the model's own log-probs (T = 1, no
    nucleus), as vLLM's default raw_logprobs mode reports them, not the sampling distribution's."""
    prompt = _prompts(backend.tokenizer)[0]
    settings = SamplingSettings(n=2, temperature=temperature, top_p=top_p, max_tokens=8, seed=3)
    first = backend.generate([prompt], settings)[0]
    assert first[0].token_ids != first[1].token_ids  # two different samples
    for generation in first:
        reference = _forward_logprobs(backend.model, prompt, generation.token_ids)
        assert torch.allclose(torch.tensor(generation.logprobs), reference, atol=1e-4)


def test_sampling_is_deterministic_for_a_seed(backend: HFBackend) -> None:
    """Same seed, same samples (across batches too); another seed, other samples; the caller's
    torch RNG is left as it was."""
    prompts = _prompts(backend.tokenizer)
    settings = SamplingSettings(n=2, temperature=1.0, top_p=0.9, max_tokens=8, seed=7)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = backend.generate(prompts, settings)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(999)  # the global RNG state does not matter, only the seed
    assert backend.generate(prompts, settings) == first
    other = backend.generate(prompts, SamplingSettings(**{**settings.__dict__, "seed": 8}))
    assert [g.token_ids for group in other for g in group] != [
        g.token_ids for group in first for g in group
    ]


def test_n_samples_per_prompt_and_batches(backend: HFBackend) -> None:
    prompts = _prompts(backend.tokenizer)
    results = backend.generate(prompts, SamplingSettings(n=3, temperature=1.0, max_tokens=5))
    assert [len(group) for group in results] == [3, 3, 3]  # 9 sequences in batches of 4
    assert all(len(g.logprobs) == g.num_tokens == 5 for group in results for g in group)


def test_stop_at_eos_cuts_tokens_and_logprobs(backend: HFBackend) -> None:
    eos = backend.eos_ids[0]
    words = backend.tokenizer("<answer> 3 </answer>", add_special_tokens=False)["input_ids"]
    generation = backend._decode([*words, eos, 5, 6], [-0.5] * (len(words) + 3))
    assert generation.finish_reason == "stop"
    assert generation.num_tokens == len(words) + 1 == len(generation.logprobs)
    assert generation.text == "<answer> 3 </answer>"


def test_model_generation_config_is_ignored(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A shipped generation_config (repetition penalty, top_k) must not change eval sampling."""
    import shutil

    from transformers import GenerationConfig

    copy = tmp_path / "penalised"
    shutil.copytree(tiny_model_dir, copy)
    config = GenerationConfig.from_pretrained(copy)
    config.repetition_penalty, config.top_k, config.do_sample = 10.0, 1, True
    config.save_pretrained(copy)
    plain = HFBackend(resolve_model(str(tiny_model_dir)))
    penalised = HFBackend(resolve_model(str(copy)))
    prompt = _prompts(plain.tokenizer)[1]
    settings = SamplingSettings(max_tokens=16)
    assert plain.generate([prompt], settings) == penalised.generate([prompt], settings)


def test_lora_adapter_is_loaded_onto_its_base(tmp_path: Path, tiny_model_dir: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    lora = get_peft_model(
        base,
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    lora.save_pretrained(tmp_path / "adapter")
    backend = HFBackend(resolve_model(str(tmp_path / "adapter")))
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.tensor([_prompts(backend.tokenizer)[0]])
    with torch.no_grad():
        merged_logits = backend.model(ids).logits
        base_logits = plain(ids).logits
        adapter_logits = lora(ids).logits
    assert not torch.allclose(merged_logits, base_logits)  # the adapter changed the model
    assert torch.allclose(merged_logits, adapter_logits, atol=1e-4)  # and it is this adapter


def _verl_vllm_max_lora_rank():
    """verl's rule, loaded from its file: its package's __init__ imports vllm, absent on CPU."""
    import importlib.util

    import verl

    path = Path(verl.__file__).parent / "workers/rollout/vllm_rollout/utils.py"
    spec = importlib.util.spec_from_file_location("verl_vllm_rollout_utils", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_vllm_max_lora_rank


def test_a_peft_adapters_rank_is_read_once_for_vllm(tmp_path: Path, tiny_model_dir: Path) -> None:
    """vLLM 0.11 refuses a max_lora_rank outside its list (vllm/config/lora.py): an r=4 adapter,
    passed as 4 before, is served at 8; a per-module rank_pattern larger than r counts."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], rank_pattern={"v_proj": 24})
    get_peft_model(base, config).save_pretrained(tmp_path / "adapter")
    source = resolve_model(str(tmp_path / "adapter"))
    assert source.lora_rank == 24  # as PEFT wrote it: r 4, v_proj 24
    assert vllm_lora_rank(source.lora_rank) == 32
    assert [vllm_lora_rank(r) for r in (None, 1, 4, 8, 9, 320, 512)] == [8, 8, 8, 8, 16, 320, 512]
    assert all(vllm_lora_rank(r) == r for r in VLLM_LORA_RANKS)
    verl_rule = _verl_vllm_max_lora_rank()  # verl's own, for its vLLM rollout
    assert [vllm_lora_rank(r) for r in range(1, 513)] == [verl_rule(r) for r in range(1, 513)]
    with pytest.raises(EvalError, match=r"LoRA rank 513: vLLM 0\.11 serves ranks up to 512"):
        vllm_lora_rank(513)


def test_missing_hub_model_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants
    import transformers.utils.hub

    # Both libraries read HF_HUB_OFFLINE once, at import: setting the variable now would leave
    # them trying the network (46 s of retries on a machine without it).
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(transformers.utils.hub, "_is_offline_mode", True)
    with pytest.raises(EvalError, match="hub ids need network access"):
        HFBackend(resolve_model("rlvr-test-org/not-a-model"))


def test_backend_choice(tiny_model_dir: Path) -> None:
    source = resolve_model(str(tiny_model_dir))
    assert make_backend("auto", source).name == "hf"  # no CUDA here
    with pytest.raises(EvalError, match="gpu extra"):
        make_backend("vllm", source)


def test_vllm_output_conversion() -> None:
    """vLLM's CompletionOutput shape (token_ids, per-step {token: Logprob}) -> Generation."""
    completion = SimpleNamespace(
        text="<answer>1</answer>",
        token_ids=[11, 12],
        finish_reason="stop",
        logprobs=[{11: SimpleNamespace(logprob=-0.25)}, {12: SimpleNamespace(logprob=-1.5)}],
    )
    generation = _from_vllm(completion)
    assert generation.logprobs == [-0.25, -1.5] and generation.num_tokens == 2
    assert generation.finish_reason == "stop"
    assert generation.token_ids == [11, 12]
    truncated = SimpleNamespace(**{**completion.__dict__, "finish_reason": "length"})
    assert _from_vllm(truncated).finish_reason == "length"


def test_rows_stop_at_eos_without_disturbing_the_rest(backend: HFBackend) -> None:
    """Make a token prompt 0 emits early the end-of-sequence token: its row stops there
    ("stop"), every other row still decodes exactly as it would alone, with its log-probs, and
    ``ignore_eos`` decodes all max_tokens through it ("length")."""
    prompts = _prompts(backend.tokenizer)
    alone = [_manual_greedy(backend.model, p, 12) for p in prompts]
    config = backend.model.generation_config
    saved = backend.eos_ids, config.eos_token_id
    backend.eos_ids = [alone[0][2]]
    config.eos_token_id = alone[0][2]  # as if it were the model's own eos, in every place
    try:
        results = backend.generate(prompts, SamplingSettings(max_tokens=12))
        ignoring = backend.generate(prompts, SamplingSettings(max_tokens=12, ignore_eos=True))
    finally:
        backend.eos_ids, config.eos_token_id = saved
    stop = alone[0][2]
    for prompt, expected, (generation,), (full,) in zip(
        prompts, alone, results, ignoring, strict=True
    ):
        cut = expected[: expected.index(stop) + 1] if stop in expected else expected
        assert generation.token_ids == cut
        assert generation.finish_reason == ("stop" if stop in expected else "length")
        reference = _forward_logprobs(backend.model, prompt, cut)
        assert torch.allclose(torch.tensor(generation.logprobs), reference, atol=1e-4)
        assert full.token_ids == expected and full.finish_reason == "length"
        assert len(full.logprobs) == 12
    reasons = [generation.finish_reason for (generation,) in results]
    assert reasons[0] == "stop" and "length" in reasons  # a batch with both kinds of row


def test_a_second_pass_over_the_same_prompts_prefills_nothing(tiny_model_dir: Path) -> None:
    """On a CPU the greedy pass of ``--greedy_output`` reuses the sampled pass's prefill, and
    decodes what a fresh backend decodes, token for token and log-prob for log-prob."""
    settings = SamplingSettings(max_tokens=6)
    used = HFBackend(resolve_model(str(tiny_model_dir)), batch_size=4)
    prompts = _prompts(used.tokenizer)
    used.generate(prompts, SamplingSettings(n=2, temperature=1.0, max_tokens=6))
    assert used.prefills is not None and used.prefills.computed == len(prompts)
    again = used.generate(prompts, settings)
    assert used.prefills.computed == len(prompts)
    fresh = HFBackend(resolve_model(str(tiny_model_dir)), batch_size=4).generate(prompts, settings)
    assert again == fresh
    used.generate([prompts[0] + [7]], settings)  # control: a new prompt is prefilled
    assert used.prefills.computed == len(prompts) + 1
