"""Reference bands: published results for a model on a task, and where a run stands against them.

The data is ``reference_bands.yaml`` beside this module (versioned; every number with its public
source); docs/REFERENCE_BANDS.md explains the entries, the matching and the tolerance band. A run
matches an entry when its model (the run plan's ``model``, compared by its last path component,
case-insensitively, so a local copy of a hub model matches) and its task are the entry's. A
verdict (on track / behind / ahead) is given only where the run measured accuracy the way the
entry's source did: the same protocol family and the same decoding; otherwise the line says "not
comparable" and why. Information for the reader, never an alarm. The file's ``throughput``
entries are published tokens/s/GPU, set against the run's by ``rlvr.report.throughput``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rlvr.common.messages import first_line
from rlvr.report.records import VAL_CORE_KEY, RunRecords
from rlvr.report.run_plan import validation_problem

DATA_FILE = Path(__file__).with_name("reference_bands.yaml")
#: Two binomial standard errors: a ~95% band for the difference of two accuracies.
Z = 2.0
#: The band's least half-width: near 0 or 1 the binomial term vanishes, and published tables
#: round to a tenth of a point or coarser.
MIN_TOLERANCE = 0.02
VERDICTS = ("on track", "behind", "ahead")


class BandsError(Exception):
    """The data file cannot be read or breaks its schema; the message names the file and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


class Source(_Strict):
    url: str = Field(pattern=r"^https://\S+$")
    where: str = Field(min_length=1)  # the table and row, figure, or log line


class Protocol(_Strict):
    family: str = Field(min_length=1)  # protocols of one family read the same final answer
    description: str = Field(min_length=1)
    defined_in: str = Field(min_length=1)


class Decoding(_Strict):
    kind: Literal["greedy", "sampled"]
    samples_per_prompt: int = Field(ge=1)


class Point(_Strict):
    step: int | None = Field(ge=0)  # None: the end of training, step count not published
    value: float = Field(ge=0.0, le=1.0)


class Entry(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    model: str = Field(min_length=1)  # the hub id the run starts from
    task: str = Field(min_length=1)  # a task name of rlvr.tasks
    task_variant: str = Field(min_length=1)
    method: str = Field(min_length=1)
    protocol: str = Field(min_length=1)
    metric: str = Field(min_length=1)
    decoding: Decoding
    eval_size: int = Field(ge=1)  # prompts the source's value was measured on
    steps_note: str = Field(min_length=1)
    points: list[Point] = Field(min_length=1)
    source: Source

    @model_validator(mode="after")
    def _points_in_order(self) -> Entry:
        steps = [point.step for point in self.points if point.step is not None]
        if steps != sorted(set(steps)):
            raise ValueError("points: steps must strictly increase")
        if len(self.points) - len(steps) > 1:
            raise ValueError("points: at most one end-of-training point (step: null)")
        return self

    @property
    def stepped(self) -> list[tuple[int, float]]:
        return [(point.step, point.value) for point in self.points if point.step is not None]

    @property
    def final(self) -> float | None:
        return next((point.value for point in self.points if point.step is None), None)


class RunSettings(_Strict):
    """The settings of a run that most often explain a slow one (``rlvr.report.throughput``)."""

    enforce_eager: bool  # actor_rollout_ref.rollout.enforce_eager: vLLM without CUDA graphs
    param_offload: bool  # actor_rollout_ref.actor.fsdp_config.param_offload
    optimizer_offload: bool  # actor_rollout_ref.actor.fsdp_config.optimizer_offload
    gpu_memory_utilization: float = Field(gt=0.0, le=1.0)  # rollout: vLLM's share of the GPU
    use_dynamic_bsz: bool  # actor_rollout_ref.actor.use_dynamic_bsz
    use_remove_padding: bool  # actor_rollout_ref.model.use_remove_padding


class ThroughputEntry(_Strict):
    """A published run's verl ``perf/throughput`` (tokens, prompt and response, per second of a
    step, per GPU), with the GPU and settings it was measured on."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    model: str = Field(min_length=1)  # the hub id the run starts from
    gpu: str = Field(pattern=r"^[A-Z]\d{2,3}[A-Z]?$")  # the GPU kind: H100, A100...
    gpus: int = Field(ge=1)
    task: str = Field(min_length=1)
    method: str = Field(min_length=1)  # algorithm, batch, rollout.n, framework versions
    response_length: str = Field(min_length=1)  # the cap and the mean the log shows
    settings: RunSettings
    tokens_per_s_per_gpu: float = Field(gt=0.0)
    statistic: str = Field(min_length=1)  # how the value was read from the log
    gpu_note: str = Field(min_length=1)  # where the GPU kind comes from
    source: Source


class ReferenceBands(_Strict):
    version: int = Field(ge=1)
    protocols: dict[str, Protocol]
    entries: list[Entry]
    throughput: list[ThroughputEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> ReferenceBands:
        ids = [entry.id for entry in self.entries] + [entry.id for entry in self.throughput]
        if len(ids) != len(set(ids)):
            raise ValueError(f"entries: duplicate id {next(i for i in ids if ids.count(i) > 1)}")
        for entry in self.entries:
            if entry.protocol not in self.protocols:
                raise ValueError(f"entry {entry.id}: unknown protocol {entry.protocol!r}")
        return self


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys without a word; a data file must refuse them."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_bands(path: Path = DATA_FILE) -> ReferenceBands:
    """The data file, validated strictly (unknown or missing keys, a number as text, an entry
    without a source or with an undescribed protocol: BandsError)."""
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise BandsError(f"{path}: {first_line(exc)}") from None
    try:
        return ReferenceBands.model_validate(raw)
    except ValidationError as exc:
        raise BandsError(f"{path}: {validation_problem(exc)}") from None


@cache
def default_bands() -> ReferenceBands:
    return load_bands()


# --- a run's side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunFacts:
    """What matching and comparing need from a run: the run plan's descriptors and its core
    validation series (``RunRecords.val_key``)."""

    model: str | None
    task: str | None
    protocol: str | None
    val_key: str | None
    validations: tuple[tuple[int, float], ...]
    planned_steps: int | None = None


def run_facts(records: RunRecords) -> RunFacts:
    plan = records.plan
    inferred = records.task.name if records.task else None
    key = records.val_key()
    return RunFacts(
        model=plan.model if plan else None,
        task=(plan.task if plan else None) or inferred,
        protocol=plan.answer_protocol if plan else None,
        val_key=key,
        validations=tuple(records.finite(key)) if key else (),
        planned_steps=plan.total_training_steps if plan else None,
    )


def own_protocol(task: str, reward_kwargs: Mapping[str, Any]) -> str | None:
    """The protocol id (in the data file) of this repository's reward for ``task``."""
    if task == "gsm8k":
        return f"rlvr-gsm8k-{reward_kwargs.get('method', 'strict')}"
    return "rlvr-countdown" if task == "countdown" else None


@dataclass(frozen=True)
class Comparison:
    entry: Entry | None
    verdict: str | None  # one of VERDICTS, or None where no verdict could be given
    line: str


def tolerance(value: float, eval_size: int) -> float:
    """The band's half-width around a published accuracy ``value`` measured on ``eval_size``
    prompts: ``Z`` standard errors of the difference of two such accuracies (the run's assumed
    measured on as many prompts), at least ``MIN_TOLERANCE``."""
    return max(MIN_TOLERANCE, Z * math.sqrt(2.0 * value * (1.0 - value) / eval_size))


def interpolate(points: Sequence[tuple[int, float]], step: int) -> float | None:
    """The value at ``step`` on the straight lines between ``points`` (sorted by step); None
    outside their span."""
    steps, values = zip(*points, strict=True)
    value = float(np.interp(step, steps, values, left=math.nan, right=math.nan))
    return None if math.isnan(value) else value


def same_model(published: str, run_model: str) -> bool:
    def name(model: str) -> str:
        return model.rstrip("/").rsplit("/", 1)[-1].lower()

    return name(published) == name(run_model)


def compare(facts: RunFacts, bands: ReferenceBands) -> list[Comparison]:
    """One comparison per entry the run matches, or one line saying why none was made."""
    if facts.model is None:
        why = (
            "none compared: no run_plan.json, so the run's model is unknown"
            if facts.planned_steps is None
            else "none compared: run_plan.json names no model (written before it recorded one?)"
        )
        return [Comparison(None, None, why)]
    matched = [
        entry
        for entry in bands.entries
        if same_model(entry.model, facts.model) and entry.task == facts.task
    ]
    if not matched:
        line = (
            f"no published reference for model {facts.model} on task {facts.task or 'unknown'} "
            f"({DATA_FILE.name}, version {bands.version})"
        )
        return [Comparison(None, None, line)]
    return [_compare_entry(entry, facts, bands) for entry in matched]


def _compare_entry(entry: Entry, facts: RunFacts, bands: ReferenceBands) -> Comparison:
    label = f"[{entry.id}: {entry.method}; {entry.source.url}]"
    mismatch = _protocol_mismatch(entry, facts, bands)
    if mismatch is not None:
        return Comparison(entry, None, f"not comparable: {mismatch} {label}")
    point = _comparison_point(entry, facts)
    if isinstance(point, str):
        return Comparison(entry, None, f"no verdict yet: {point} {label}")
    step, how, published, measured = point
    band = tolerance(published, entry.eval_size)
    verdict = (
        VERDICTS[0] if abs(measured - published) <= band else VERDICTS[1 + (measured > published)]
    )
    if facts.protocol == entry.protocol:
        same = "the run's own"
    else:
        family = bands.protocols[entry.protocol].family
        same = f"the run's {facts.protocol} reads the same answer (family {family})"
    line = (
        f"{verdict} at step {step}{how}: {measured:.3f} vs {published:.3f} ± {band:.3f} "
        f"published; protocol {entry.protocol}, {same} {label}"
    )
    return Comparison(entry, verdict, line)


def _protocol_mismatch(entry: Entry, facts: RunFacts, bands: ReferenceBands) -> str | None:
    """Why the run's validation accuracy cannot be set against the entry's, or None."""
    theirs = f"protocol {entry.protocol} ({entry.decoding.kind})"
    if facts.protocol is None:
        return f"{theirs} vs unknown (run_plan.json records no answer_protocol)"
    ours = bands.protocols.get(facts.protocol)
    if ours is None or ours.family != bands.protocols[entry.protocol].family:
        return f"{theirs} vs {facts.protocol}"
    match = VAL_CORE_KEY.match(facts.val_key) if facts.val_key else None
    if match is None:
        return f"{theirs}; the run logged no core validation metric yet"
    if match["var"] != "acc":
        return f"{theirs}; the run's validation logs a reward, not an accuracy ({facts.val_key})"
    # verl validates greedily unless val_kwargs.do_sample is set, and then logs mean@n
    kind = "greedy" if match["n"] == "1" else "sampled"
    if kind != entry.decoding.kind:
        return f"{theirs} vs {facts.protocol} ({kind}, {facts.val_key})"
    return None


def _comparison_point(entry: Entry, facts: RunFacts) -> tuple[int, str, float, float] | str:
    """(step, how, published value, the run's value) to compare, or why there is none yet."""
    runs = list(facts.validations)
    if not runs:
        return "the run has logged no validation yet"
    last = runs[-1][0]
    planned = facts.planned_steps
    final = entry.final
    if final is not None and planned is not None and last >= planned:
        return last, " (end of training vs the source's end)", final, runs[-1][1]
    stepped = entry.stepped
    if not stepped or stepped[0][0] > last:
        start = (
            f"the reference starts at step {stepped[0][0]}"
            if stepped
            else "the source gives its end-of-training value only"
        )
        of = f" of {planned} planned" if planned else ""
        return f"{start}; the run's last validation is at step {last}{of}"
    step = last if last <= stepped[-1][0] else stepped[-1][0]
    published = interpolate(stepped, step)
    measured = interpolate(runs, step)
    if published is None or measured is None:
        return f"the run has no validation at or around step {step}"
    how = "" if step in dict(stepped) else " (published points interpolated)"
    return step, how, published, measured
