"""Where the repository's folders are: configs, rewards, artifacts (rlvr runs from a checkout)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "configs"
ARTIFACTS = ROOT / "artifacts"
