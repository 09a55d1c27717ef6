"""Grid sweeps over verl GRPO runs (``scripts/sweep.py``, ``scripts/plot_sweep.py``).

- ``grid``: the spec, grid axes, points and their run names.
- ``runner``: running the points, one bounded launcher run each.
- ``folder``: the sweep folder's layout, run statuses, reading a sweep back.
- ``history``: a run's verdict from its per-step records (``rlvr.report.metrics_log``).
- ``tables`` and ``plots``: results as CSV/Markdown and figures.
"""
