"""An alarm's verdict: the one type every rule in this package returns, and how an example
response is shown in it."""

from __future__ import annotations

from dataclasses import dataclass, field

FIRED, OK, NO_DATA = "fired", "ok", "no data"


@dataclass(frozen=True)
class Alarm:
    """One check's verdict: ``status`` is FIRED, OK or NO_DATA; ``steps`` where it fired."""

    key: str
    title: str
    status: str
    detail: str  # what was seen (or why it could not be judged)
    advice: str = ""  # what to try, when fired
    steps: tuple[int, ...] = ()
    figure: str = ""  # the figure that shows it (rlvr/report/figures.py)
    examples: tuple[str, ...] = field(default=(), compare=False)  # offending responses, trimmed

    @property
    def fired(self) -> bool:
        return self.status == FIRED


def trim(text: str, limit: int = 160) -> str:
    """A response as one line of at most ``limit`` characters, for an alarm's examples."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
