"""What the report sets a run against, composed from the two kinds of published results: the
accuracies of ``rlvr.report.bands`` and the throughput of ``rlvr.report.throughput``. Here, so
that each of those imports only what is below it (throughput reads the bands' entries; neither
imports this module): the run plan's fields a trainer writes, and the report's Reference lines.
"""

from __future__ import annotations

from typing import Any

from rlvr.report.bands import BandsError, compare, default_bands, own_protocol, run_facts
from rlvr.report.records import RunRecords
from rlvr.report.throughput import detected_gpu, run_settings, throughput_lines


def plan_fields(config: Any) -> dict[str, Any]:
    """What the trainer passes to ``write_run_plan`` so that the report can match the run: the
    model (``actor_rollout_ref.model.path``), the task whose reward file the run grades with,
    that reward's protocol (None for a reward from elsewhere), the GPU (the kind Ray detected,
    else what the hardware overlay declares in ``hardware_facts.gpu``; None on CPU) and the
    settings that explain throughput."""
    from rlvr import tasks

    spec = tasks.for_config(config)
    kwargs = config.custom_reward_function.get("reward_kwargs") or {}
    facts = config.get("hardware_facts") or {}
    return {
        "model": str(config.actor_rollout_ref.model.path),
        "task": spec.name if spec else None,
        "answer_protocol": own_protocol(spec.name, kwargs) if spec else None,
        "gpu": detected_gpu() or (str(facts["gpu"]) if facts.get("gpu") else None),
        "settings": run_settings(config),
    }


# --- matching and comparing --------------------------------------------------------------------


def reference_lines(records: RunRecords) -> list[str]:
    """The report's lines on published results for this run (report.md and scripts/report.py)."""
    try:
        bands = default_bands()
    except BandsError as exc:  # the report is still written; the data file's test catches this
        return [f"not compared: {exc}"]
    lines = [comparison.line for comparison in compare(run_facts(records), bands)]
    return lines + throughput_lines(records, bands)
