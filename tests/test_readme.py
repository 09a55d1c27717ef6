"""The README a user reads in three minutes: short, one GRPO launcher, links that resolve."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_readme_stays_short() -> None:
    assert len(README.splitlines()) <= 120
    assert len(README.split()) <= 1000


def test_readme_names_one_grpo_launcher_and_the_two_commands() -> None:
    for gone in ("run_grpo", "launch_grpo.sh", "uv run pytest"):
        assert gone not in README, gone
    for command in ("bash scripts/quickstart.sh", "bash scripts/test.sh", "bash scripts/train.sh"):
        assert command in README, command


def _local_links(page: Path) -> list[tuple[str, str]]:
    return [
        (target, anchor or "")
        for target, anchor in LINK.findall(page.read_text())
        if not target.startswith(("http://", "https://", "mailto:"))
    ]


def _anchors(page: Path) -> set[str]:
    # GitHub's slugs: lower case, punctuation dropped, spaces to hyphens.
    heads = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
    return {"#" + re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_links_in_readme_and_docs_resolve() -> None:
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target, anchor in _local_links(page):
            path = (page.parent / target).resolve()
            if not path.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.name}: {target}{anchor}")
    assert broken == []


def test_the_link_check_catches_a_broken_link(tmp_path: Path) -> None:
    """Negative control: a page that links a missing file and a missing heading."""
    (tmp_path / "A.md").write_text("# Title\n[x](B.md) [y](A.md#nope) [z](A.md#title)\n")
    links = _local_links(tmp_path / "A.md")
    assert links == [("B.md", ""), ("A.md", "#nope"), ("A.md", "#title")]
    assert not (tmp_path / "B.md").exists() and "#nope" not in _anchors(tmp_path / "A.md")
    assert "#title" in _anchors(tmp_path / "A.md")
