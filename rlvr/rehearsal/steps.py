"""What the CPU and GPU rehearsals share (rlvr/rehearsal/cpu.py and gpu.py): the runner of
named steps, the resume check, the cleanup row and the final table. Both modes import it; neither
imports the other's internals (the CLI in cpu.py picks the GPU mode lazily)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.common.messages import first_line
from rlvr.rehearsal import checks
from rlvr.rehearsal.plan import Plan


class Runner:
    """Runs named steps in order; the first failure stops the rehearsal and names the step."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str]] = []

    def step(self, name: str, action: Callable[[], Any]) -> Any:
        start = time.monotonic()
        print(f"== {name} ...", flush=True)
        try:
            result = action()
        except Exception as exc:  # a check that crashes still names its step
            if not isinstance(exc, checks.RehearsalFailure):
                exc = checks.RehearsalFailure(f"{type(exc).__name__}: {exc}")
            self.rows.append((name, "FAIL", first_line(exc)))
            print(f"FAILED at step '{name}': {exc}", file=sys.stderr, flush=True)
            raise exc from None
        detail = result if isinstance(result, str) else getattr(result, "summary", "")
        self.rows.append((name, "ok", f"{detail} ({time.monotonic() - start:.0f} s)"))
        print(f"   ok: {self.rows[-1][2]}", flush=True)
        return result


def cleanup_row(left: list[int], stopped: int) -> tuple[str, str, str]:
    detail = f"Ray processes left: {len(left)}" + (f" (killed: {left})" if left else "")
    if stopped:
        detail += f"; stopped this rehearsal's cluster ({stopped} daemons)"
    return ("cleanup", "FAIL" if left else "ok", detail)


def resumed(plan: Plan, metrics: Path, known: tuple[set[Path], int]) -> str:
    """The relaunch loaded step 2 and trained step 3 only, into a new wandb run; ``known`` is the
    wandb runs and the metrics.jsonl size the first launch left."""
    log = (plan.out / "resume.log").read_text()
    if "global_step_2" not in log or "Load from checkpoint folder" not in log:
        raise checks.RehearsalFailure("the relaunch did not load global_step_2")
    runs, logged = known
    steps = checks.logged_steps(metrics, [3], start=logged)
    return f"from global_step_2; {steps}; {checks.wandb_run(plan.out / 'logs/wandb', runs)}"


def report(plan: Plan, runner: Runner, seconds: float, peaks: tuple[int, int]) -> None:
    print(
        f"\nRehearsal of {plan.experiment} (objective={plan.objective}): "
        f"{plan.nnodes} node(s) x {plan.gpus_per_node} ranks"
    )
    for name, status, detail in runner.rows:
        print(f"  {status:4}  {name:12} {detail}")
    machine, summed = (value / 2**30 for value in peaks)
    print(
        f"wall {seconds:.0f} s; peak memory: machine +{machine:.1f} GiB in use "
        f"(summed RSS {summed:.1f} GiB); out: {plan.out}"
    )
