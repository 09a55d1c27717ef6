"""The typed records of an eval run and their JSON form on disk.

| record | file | one per |
|---|---|---|
| ``GradedSample`` | ``samples.jsonl`` | response |
| ``PassKRecord`` / ``AnalyseRecord`` | ``prompts.jsonl`` | prompt (``passk`` / ``analyse``) |
| ``Summary`` (``RunHeader`` + metrics + verdict + ``Recommendations``) | ``summary.json`` | run |

On disk each record is one flat JSON object with the keys users and ``compare`` read
(``prompt_index``, ``score``, ``pass@4``, ``mean_variance``, ...); ``to_json`` writes that form
and ``parse`` reads it back with pydantic in strict mode ("3", 3.0 or true is no integer), so a
summary from any earlier version loads and a bad one fails in one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from rlvr.evaluation import EvalError

JSONValue: TypeAlias = JsonValue
JSONDict: TypeAlias = dict[str, JsonValue]
ANSWER_KEY = "answer_key"  # the sample key holding the reward file's answer_key
R = TypeVar("R")
FINGERPRINT_KEYS = ("prompts_sha256", "rendered_sha256")  # RunHeader's, optional
_OPTIONAL_KEYS = (*FINGERPRINT_KEYS, "dtype", "batch_size")  # left out on disk when None
# summary.json's {"generation_seconds", "generated_tokens"}: an object, so not a metric, and
# absent from runs written before it was recorded.
TIMING_KEY = "timing"


def jsonable(value: object) -> JSONValue:
    """Parquet hands back numpy arrays and scalars; JSON wants lists and plain numbers."""
    to_list = getattr(value, "tolist", None)
    if callable(to_list):
        return jsonable(to_list())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"{type(value).__name__} is not JSON-serializable: {value!r}")


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}  # built once per record type


def parse(cls: type[R], text: str | bytes, source: str) -> R:
    """One record from its JSON text; a bad one as an EvalError naming ``source`` and the key."""
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    try:
        return _ADAPTERS[cls].validate_json(text, strict=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"])
        raise EvalError(f"{source}: {f'{key!r}: ' if key else ''}{error['msg']}") from exc


def _as_float(value: object) -> float | None:
    """A reward part as a number (bools count: ``format`` may be one), else None."""
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True)
class PromptStats:
    """One prompt's group of n sampled responses."""

    prompt_index: int
    n: int
    mean_score: float
    success_rate: float
    variance: float
    outcome_entropy: float
    token_entropy: float | None  # mean -log p of sampled tokens (nats/token); None if no logprobs


@dataclass(frozen=True)
class Verdict:
    label: str  # "sft_first" | "partial_credit" | "harder_data" | "ready_for_grpo" | "marginal"
    advice: str
    checks: dict[str, bool]


class _Record(BaseModel):
    # strict: what parse refuses on disk, the constructor refuses in memory too
    model_config = ConfigDict(strict=True, frozen=True)

    def to_json(self) -> JSONDict:
        return self.model_dump()


class GradedSample(_Record):
    """One response and its grade: a line of ``samples.jsonl`` (the logprobs stay in memory)."""

    prompt_index: int
    sample: int
    ground_truth: JsonValue = None
    prompt_tokens: int
    response: str
    response_tokens: int
    finish_reason: str  # "stop" or "length" (hit max_tokens)
    mean_neg_logprob: float | None = None
    # Everything the reward returned (score, format, valid, correct...), and its answer_key when
    # the reward file defines one (a string, or None for no answer: what maj@k votes on). On
    # disk these keys sit beside the fields above.
    parts: JSONDict
    logprobs: list[float] = Field(default_factory=list, exclude=True, repr=False)
    # the generated token ids, in memory only: the checks look for an end-of-turn token in them
    token_ids: list[int] = Field(default_factory=list, exclude=True, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _gather_parts(cls, data: Any) -> Any:
        """A dict without ``parts`` is the flat form on disk: every other key is a part."""
        if not isinstance(data, dict) or "parts" in data:
            return data
        own = cls.model_fields.keys() - {"parts", "logprobs", "token_ids"}
        parts = {k: v for k, v in data.items() if k not in own}
        return {**{k: v for k, v in data.items() if k in own}, "parts": parts}

    @model_validator(mode="after")
    def _scored(self) -> GradedSample:
        if _as_float(self.parts.get("score")) is None:
            raise EvalError(f"prompt {self.prompt_index}: the reward returned no numeric score")
        return self

    @property
    def score(self) -> float:
        return _as_float(self.parts.get("score")) or 0.0  # always there: checked on creation

    @property
    def format(self) -> float:
        """The reward's ``format`` part (1.0 = a parsable answer); 0.0 when it has none."""
        return _as_float(self.parts.get("format")) or 0.0

    @property
    def answer_key(self) -> str | None:
        """The answer this response gives (``answer_key`` of the reward file), None for none."""
        key = self.parts.get(ANSWER_KEY)
        return key if isinstance(key, str) else None

    def to_json(self) -> JSONDict:
        return {**self.model_dump(exclude={"parts"}), **self.parts}


class PassKRecord(_Record):
    """One prompt of a ``passk`` run: its successes among n samples, pass@k for each k and, when
    the reward names answers, maj@k for each k (written as ``pass@4``, ``maj@4``...)."""

    prompt_index: int
    ground_truth: JsonValue
    n: int
    successes: int
    pass_at: dict[int, float] = Field(exclude=True)  # k -> unbiased pass@k
    maj_at: dict[int, float] = Field(default_factory=dict, exclude=True)  # empty: no answer keys

    def to_json(self) -> JSONDict:
        at = {f"pass@{k}": v for k, v in self.pass_at.items()}
        return {**super().to_json(), **at, **{f"maj@{k}": v for k, v in self.maj_at.items()}}


@dataclass(frozen=True)
class AnalyseRecord(PromptStats):
    """One prompt of an ``analyse`` run: its group statistics and ground truth.

    A dataclass, to stay the ``PromptStats`` that ``statistics`` takes; ``parse`` reads it all the
    same (strict pydantic accepts a JSON object for a dataclass)."""

    ground_truth: JsonValue = None

    @classmethod
    def of(cls, stats: PromptStats, ground_truth: JSONValue) -> AnalyseRecord:
        return cls(**asdict(stats), ground_truth=ground_truth)

    def to_json(self) -> JSONDict:
        return asdict(self)


class RunHeader(_Record):
    """What a run was: command, task, model, data, backend, sampling and grading settings."""

    command: str
    task: str
    model: str
    data: str  # the resolved Parquet path
    prompts: int
    backend: str
    sampling: JSONDict
    reward_kwargs: JSONDict
    template_kwargs: JSONDict
    # What ``compare`` checks the prompts by (``statistics.check_comparable``); None in runs
    # written before they were recorded, and then left out on disk so an old summary
    # round-trips unchanged.
    prompts_sha256: str | None = None  # the data's prompts and ground truths, in order
    rendered_sha256: str | None = None  # the token ids the model saw (chat template applied)
    # How the HF backend decoded (its draws depend on both); None for vLLM and older runs.
    dtype: str | None = None
    batch_size: int | None = None

    def to_json(self) -> JSONDict:
        flat = self.model_dump()
        return {k: v for k, v in flat.items() if k not in _OPTIONAL_KEYS or v is not None}


class _VerdictKeys(_Record):
    """A ``Verdict`` as ``summary.json`` holds it."""

    verdict: str
    advice: str = ""
    checks: dict[str, bool] = Field(default_factory=dict)


class SuggestedSetting(_Record):
    """One training setting ``analyse`` suggests (``statistics.py``), against the value it would
    replace."""

    setting: str  # verl's key, e.g. "data.max_response_length"
    action: str  # "keep" | "raise" | "lower" | "probe again" | "change the data"
    suggested: int | None  # None: no value of this setting fixes what the probe found
    current: int | None  # the value compared with; None where nothing sets it
    compared_with: str  # where ``current`` comes from
    reason: str
    table: dict[str, float] = Field(default_factory=dict)  # rollout.n: n -> useful-group share


class CheckLine(_Record):
    """One check of the model's template and end-of-sequence handling (``model.py``)."""

    name: str
    status: Literal["ok", "warning"]
    message: str  # a warning's ends with its fix

    def line(self) -> str:
        return f"{self.status}: {self.name}: {self.message}"


class Recommendations(_Record):
    """What ``analyse`` recommends before a run: settings and checks (``summary.json`` key
    ``recommendations``)."""

    settings: list[SuggestedSetting]
    checks: list[CheckLine]


class _RecommendationsKey(_Record):
    recommendations: Recommendations


RECOMMENDATIONS_KEY = "recommendations"


@dataclass(frozen=True)
class Summary:
    """A run's ``summary.json``: its header, its metrics in report order, and for ``analyse``
    the verdict and the recommendations. ``extra`` keeps keys this version does not know, so
    nothing is lost.

    Not a pydantic model: its open keys split by value (numbers and nulls are metrics), which no
    schema states."""

    header: RunHeader
    metrics: dict[str, float | None]  # "mean_score", "pass@1", "pass@4", "mean_variance"...
    verdict: Verdict | None = None
    extra: JSONDict = field(default_factory=dict)
    recommendations: Recommendations | None = None

    def to_json(self) -> JSONDict:
        flat: JSONDict = {**self.header.to_json(), **self.metrics}
        if self.verdict is not None:
            checks: JSONDict = {**self.verdict.checks}
            flat.update(verdict=self.verdict.label, advice=self.verdict.advice, checks=checks)
        if self.recommendations is not None:
            flat[RECOMMENDATIONS_KEY] = self.recommendations.to_json()
        return {**flat, **self.extra}

    def timed(self, seconds: float, graded: Sequence[Sequence[GradedSample]]) -> Summary:
        """This summary with its run's wall seconds and the tokens it generated (``TIMING_KEY``)."""
        tokens = sum(sample.response_tokens for group in graded for sample in group)
        timing: JSONDict = {"generation_seconds": seconds, "generated_tokens": tokens}
        return replace(self, extra={**self.extra, TIMING_KEY: timing})

    @property
    def tokens_per_second(self) -> float | None:
        """Tokens generated per wall second of the run; None where it was not recorded."""
        timing = self.extra.get(TIMING_KEY)
        if not isinstance(timing, dict):
            return None
        seconds, tokens = timing.get("generation_seconds"), timing.get("generated_tokens")
        if not isinstance(seconds, int | float) or not isinstance(tokens, int) or seconds <= 0:
            return None
        return tokens / seconds

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "summary.json") -> Summary:
        """The header and verdict keys are typed; other numbers (or nulls) are metrics."""
        header = parse(RunHeader, text, source)
        data: JSONDict = json.loads(text)  # an object: RunHeader checked that
        verdict = None
        if "verdict" in data:
            keys = parse(_VerdictKeys, text, source)
            verdict = Verdict(keys.verdict, keys.advice, keys.checks)
        recommended = None
        if RECOMMENDATIONS_KEY in data:
            recommended = parse(_RecommendationsKey, text, source).recommendations
        known = (*RunHeader.model_fields, *_VerdictKeys.model_fields, RECOMMENDATIONS_KEY)
        rest = {k: v for k, v in data.items() if k not in known}
        return cls(
            header=header,
            metrics={k: _as_float(v) for k, v in rest.items() if _ismetric_value(v)},
            verdict=verdict,
            extra={k: v for k, v in rest.items() if not _ismetric_value(v)},
            recommendations=recommended,
        )


def _ismetric_value(value: object) -> bool:
    """A number or null (a metric not measured); a bool is no metric."""
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def write_jsonl(path: Path, records: Iterable[JSONDict], mode: str = "x") -> None:
    """One JSON object per line; ``x`` (the default) refuses to overwrite a file."""
    with open(path, mode) as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def read_records(path: Path, cls: type[R]) -> list[R]:
    """Every line of a JSON-lines file as a ``cls`` record; an error names the line."""
    lines = enumerate(path.read_text().splitlines(), 1)
    return [parse(cls, line, f"{path} line {i}") for i, line in lines if line.strip()]


def load_summary(path: str | Path) -> Summary:
    """A run's summary, from its folder or its ``summary.json``."""
    path = Path(path)
    file = path / "summary.json" if path.is_dir() else path
    if not file.is_file():
        raise EvalError(f"{path}: no summary.json (is it an eval run folder?)")
    return Summary.from_json(file.read_text(), str(file))
