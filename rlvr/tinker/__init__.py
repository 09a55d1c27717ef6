"""Training through the Tinker API (a TuFT server or Tinker's hosted service): TuFT's Countdown
RL guide on the recipes' task, data, reward, run folder, report and sweep (docs/TINKER.md).

``recipe`` reads and checks a Tinker experiment's composed config (``hardware: tinker``);
``problems`` renders the task's prompts and grades with its reward; ``datums`` turns graded
groups into the importance-sampling Datums (verl's GRPO advantages); ``service`` connects and
explains failures; ``loop`` trains; ``tracking`` logs through verl's own loggers (metrics.jsonl,
WandB) as a verl run does; ``run_folder`` writes what the report and eval read; ``train`` is the
run that ``scripts/train.sh`` starts; ``preflight`` refuses a run that cannot start;
``tuft_env`` builds TuFT's CPU test-mode environment (the tests' server).
"""
