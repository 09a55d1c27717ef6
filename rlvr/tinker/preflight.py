"""Pre-flight of a Tinker run (``rlvr.preflight.checks`` calls it): the run folder, then the
endpoint, each refusal one line with the fix, before any sampling or training.

The endpoint check asks the server for its capabilities (which also proves the address and the
key) and refuses a model it does not serve or a context its model cannot hold. Neither Tinker
nor TuFT advertises a LoRA rank limit, so a rank the server refuses is the run's first request
(``create_lora_training_client``), before any sampling, with the same one-line message.
"""

from __future__ import annotations

from typing import Any

from rlvr.tinker.recipe import RecipeError, TinkerRecipe, is_tinker
from rlvr.tinker.run_folder import identity_problem
from rlvr.tinker.service import (
    TinkerRunError,
    endpoint,
    explain,
    reachable,
    retried,
    service_client,
)

__all__ = ["endpoint_problems", "folder_problems", "is_tinker", "tinker_problems"]


def tinker_problems(config: Any, local: list[str]) -> list[str]:
    """A Tinker run's problems: its settings, the ``local`` ones pre-flight found (data, reward,
    steps) and its folder, then (only when those are sound) the endpoint."""
    try:
        recipe = TinkerRecipe.from_config(config)
    except RecipeError as exc:
        return exc.problems + local
    problems = local + folder_problems(recipe)
    return problems or endpoint_problems(recipe)


def folder_problems(recipe: TinkerRecipe) -> list[str]:
    """Checkpoints of another model or rank in the run folder, or a ledger that does not read."""
    try:
        problem = identity_problem(recipe.run_dir, recipe.model, recipe.lora_rank)
    except ValueError as exc:
        return [f"trainer.default_local_dir: {exc}"]
    return [problem] if problem else []


def endpoint_problems(recipe: TinkerRecipe) -> list[str]:
    url = endpoint()
    if not reachable(url):
        return [
            f"tinker: {explain(ConnectionError('connection refused'), 'asking for its models')}"
        ]
    try:
        service = service_client(recipe.request_timeout_s, max_retries=0)
        capabilities = retried(
            service.get_server_capabilities, "asking for its models", 1, recipe.backoff_s,
            recipe.request_timeout_s,
        )  # fmt: skip
    except TinkerRunError as exc:
        return [f"tinker: {exc}"]
    except Exception as exc:  # anything the SDK raises outside a request
        return [f"tinker: {explain(exc, 'asking for its models')}"]
    served = {m.model_name: m for m in capabilities.supported_models if m.model_name}
    model = served.get(recipe.model)
    if model is None:
        names = ", ".join(sorted(served)) or "none"
        return [
            f"actor_rollout_ref.model.path={recipe.model}: {endpoint()} does not serve it "
            f"(it serves: {names}); pick one of those, or serve it"
        ]
    needed = recipe.max_prompt_tokens + recipe.max_tokens
    limit = model.max_context_length
    if limit is not None and needed > limit:
        return [
            f"data.max_prompt_length + data.max_response_length = {needed} tokens, over "
            f"{recipe.model}'s context of {limit} on {endpoint()}; lower max_response_length"
        ]
    print(f"pre-flight: tinker: {endpoint()} serves {recipe.model}")
    return []
