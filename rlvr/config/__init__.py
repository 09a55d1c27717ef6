"""An experiment's composed config: Hydra composition on verl's ``ppo_trainer`` with one-line
errors (``compose``), and the rules that turn its batch settings into optimizer steps
(``batching``). Below planning, pre-flight and the train entry point, which all read it."""
