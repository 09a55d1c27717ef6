"""The typed records of an eval run and their JSON form on disk.

| record | file | one per |
|---|---|---|
| ``GradedSample`` | ``samples.jsonl`` | response |
| ``PassKRecord`` / ``AnalyseRecord`` | ``prompts.jsonl`` | prompt (``passk`` / ``analyse``) |
| ``Summary`` (``RunHeader`` + metrics + verdict) | ``summary.json`` | run |

On disk each record is one flat JSON object with the keys users and ``compare`` read
(``prompt_index``, ``score``, ``pass@4``, ``mean_variance``, ...); ``to_json`` writes that form
and ``from_json`` reads it back, checking the types, so a summary from any earlier version loads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TypeAlias

from rlvr.evaluation.errors import EvalError
from rlvr.evaluation.metrics import PromptStats, Verdict

JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None
JSONDict: TypeAlias = dict[str, JSONValue]
Fields: TypeAlias = Mapping[str, object]  # a record as json.loads hands it back
ANSWER_KEY = "answer_key"  # the sample key holding the reward file's answer_key


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


# ---------------------------------------------------------------- typed field access


def _get(data: Fields, key: str, source: str) -> object:
    if key not in data:
        raise EvalError(f"{source}: no {key!r} (not an eval record?)")
    return data[key]


def _str(data: Fields, key: str, source: str) -> str:
    value = _get(data, key, source)
    if not isinstance(value, str):
        raise EvalError(f"{source}: {key!r} is {value!r}, not a string")
    return value


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_float(value: object) -> float | None:
    """A reward part as a number (bools count: ``format`` may be one), else None."""
    return float(value) if isinstance(value, int | float) else None


def _int(data: Fields, key: str, source: str) -> int:
    value = _get(data, key, source)
    if not isinstance(value, int) or isinstance(value, bool):
        raise EvalError(f"{source}: {key!r} is {value!r}, not an integer")
    return value


def _float(data: Fields, key: str, source: str) -> float:
    value = _get(data, key, source)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise EvalError(f"{source}: {key!r} is {value!r}, not a number")
    return float(value)


def _optional_float(data: Fields, key: str, source: str) -> float | None:
    return None if data.get(key) is None else _float(data, key, source)


def _object(data: Fields, key: str, source: str) -> JSONDict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise EvalError(f"{source}: {key!r} is {value!r}, not an object")
    return {str(k): jsonable(v) for k, v in value.items()}


# ---------------------------------------------------------------- samples and prompts


_READERS = {
    "str": _str,
    "int": _int,
    "float": _float,
    "float | None": _optional_float,
    "JSONDict": _object,
    "JSONValue": lambda data, key, source: jsonable(data.get(key)),
}


def _read_fields(cls: type, data: Fields, source: str) -> dict[str, object]:
    """Every field of dataclass ``cls`` read from ``data`` and checked by its annotation."""
    return {f.name: _READERS[str(f.type)](data, f.name, source) for f in fields(cls)}


def _field_values(record: object) -> JSONDict:
    return {f.name: getattr(record, f.name) for f in fields(record)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class GradedSample:
    """One response and its grade: a line of ``samples.jsonl`` (the logprobs stay in memory)."""

    prompt_index: int
    sample: int
    ground_truth: JSONValue
    prompt_tokens: int
    response: str
    response_tokens: int
    finish_reason: str  # "stop" or "length" (hit max_tokens)
    mean_neg_logprob: float | None
    # Everything the reward returned (score, format, valid, correct...), and its answer_key when
    # the reward file defines one (a string, or None for no answer: what maj@k votes on).
    parts: JSONDict
    logprobs: list[float] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if _as_float(self.parts.get("score")) is None:
            raise EvalError(f"prompt {self.prompt_index}: the reward returned no numeric score")

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
        return {
            "prompt_index": self.prompt_index,
            "sample": self.sample,
            "ground_truth": self.ground_truth,
            "prompt_tokens": self.prompt_tokens,
            "response": self.response,
            "response_tokens": self.response_tokens,
            "finish_reason": self.finish_reason,
            "mean_neg_logprob": self.mean_neg_logprob,
            **self.parts,
        }

    @classmethod
    def from_json(cls, data: Fields, source: str = "samples.jsonl") -> GradedSample:
        own = {f.name for f in fields(cls)} - {"parts", "logprobs"}
        return cls(
            prompt_index=_int(data, "prompt_index", source),
            sample=_int(data, "sample", source),
            ground_truth=jsonable(data.get("ground_truth")),
            prompt_tokens=_int(data, "prompt_tokens", source),
            response=_str(data, "response", source),
            response_tokens=_int(data, "response_tokens", source),
            finish_reason=_str(data, "finish_reason", source),
            mean_neg_logprob=_optional_float(data, "mean_neg_logprob", source),
            parts={k: jsonable(v) for k, v in data.items() if k not in own},
        )


@dataclass(frozen=True)
class PassKRecord:
    """One prompt of a ``passk`` run: its successes among n samples, pass@k for each k and, when
    the reward names answers, maj@k for each k."""

    prompt_index: int
    ground_truth: JSONValue
    n: int
    successes: int
    pass_at: dict[int, float]  # k -> unbiased pass@k
    maj_at: dict[int, float] = field(default_factory=dict)  # k -> maj@k; empty: no answer keys

    def to_json(self) -> JSONDict:
        return {
            "prompt_index": self.prompt_index,
            "ground_truth": self.ground_truth,
            "n": self.n,
            "successes": self.successes,
            **{f"pass@{k}": value for k, value in self.pass_at.items()},
            **{f"maj@{k}": value for k, value in self.maj_at.items()},
        }


@dataclass(frozen=True)
class AnalyseRecord(PromptStats):
    """One prompt of an ``analyse`` run: its group statistics and ground truth."""

    ground_truth: JSONValue = None

    @classmethod
    def of(cls, stats: PromptStats, ground_truth: JSONValue) -> AnalyseRecord:
        return cls(**asdict(stats), ground_truth=ground_truth)

    def to_json(self) -> JSONDict:
        return _field_values(self)

    @classmethod
    def from_json(cls, data: Fields, source: str = "prompts.jsonl") -> AnalyseRecord:
        return cls(**_read_fields(cls, data, source))  # type: ignore[arg-type]


# ---------------------------------------------------------------- the summary


@dataclass(frozen=True)
class RunHeader:
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

    def to_json(self) -> JSONDict:
        return _field_values(self)

    @classmethod
    def from_json(cls, data: Fields, source: str) -> RunHeader:
        return cls(**_read_fields(cls, data, source))  # type: ignore[arg-type]


HEADER_KEYS = tuple(f.name for f in fields(RunHeader))
VERDICT_KEYS = ("verdict", "advice", "checks")


@dataclass(frozen=True)
class Summary:
    """A run's ``summary.json``: its header, its metrics in report order, and for ``analyse``
    the verdict. ``extra`` keeps keys this version does not know, so nothing is lost."""

    header: RunHeader
    metrics: dict[str, float | None]  # "mean_score", "pass@1", "pass@4", "mean_variance"...
    verdict: Verdict | None = None
    extra: JSONDict = field(default_factory=dict)

    def to_json(self) -> JSONDict:
        flat: JSONDict = {**self.header.to_json(), **self.metrics}
        if self.verdict is not None:
            checks: JSONDict = {**self.verdict.checks}
            flat.update(verdict=self.verdict.label, advice=self.verdict.advice, checks=checks)
        return {**flat, **self.extra}

    @classmethod
    def from_json(cls, data: Fields, source: str = "summary.json") -> Summary:
        rest = {k: v for k, v in data.items() if k not in HEADER_KEYS + VERDICT_KEYS}
        return cls(
            header=RunHeader.from_json(data, source),
            metrics={k: _as_float(v) for k, v in rest.items() if v is None or _number(v)},
            verdict=_verdict(data, source) if "verdict" in data else None,
            extra={k: jsonable(v) for k, v in rest.items() if v is not None and not _number(v)},
        )


def _verdict(data: Fields, source: str) -> Verdict:
    checks = _object(data, "checks", source)
    return Verdict(
        label=_str(data, "verdict", source),
        advice=str(data.get("advice", "")),
        checks={name: bool(ok) for name, ok in checks.items()},
    )


# ---------------------------------------------------------------- files


def write_jsonl(path: Path, records: Iterable[JSONDict], mode: str = "x") -> None:
    """One JSON object per line; ``x`` (the default) refuses to overwrite a file."""
    with open(path, mode) as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def read_jsonl(path: Path) -> list[dict[str, object]]:
    lines = path.read_text().splitlines()
    try:
        return [json.loads(line) for line in lines if line.strip()]
    except json.JSONDecodeError as exc:
        raise EvalError(f"{path}: not JSON lines ({exc})") from exc


def load_summary(path: str | Path) -> Summary:
    """A run's summary, from its folder or its ``summary.json``."""
    path = Path(path)
    file = path / "summary.json" if path.is_dir() else path
    if not file.is_file():
        raise EvalError(f"{path}: no summary.json (is it an eval run folder?)")
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise EvalError(f"{file}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise EvalError(f"{file}: not a JSON object")
    return Summary.from_json(data, str(file))
