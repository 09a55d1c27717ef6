"""Evaluation: one model eval is one pipeline, one module per stage, run in this order by
``pipeline.run_model_command`` (``cli.py`` parses the command line):

settings (``settings.py``: the experiment's, then the flags) -> model (``model.py``: a
checkpoint, a LoRA adapter or a base model) -> prompts (``prompts.py``) -> generation
(``generation.py``: the HF or vLLM backend) -> grading (``grading.py``: the task's reward) ->
statistics (``statistics.py``: pass@k, maj@k, the signal probe, paired intervals) -> the run
folder, written whole (``run_folder.py``). ``compare``, ``stats`` and ``filter`` read run
folders and reuse the same statistics and writer (``statistics.compare``,
``run_folder.filter_learnable``).
"""


class EvalError(Exception):
    """Bad eval input (missing model, unreadable data...): scripts print it and exit 2."""
