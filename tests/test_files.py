"""Atomic writes: the target changes only when the whole write succeeded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.common.files import staged, write_json_atomic, write_text_atomic


def test_writes_replace_the_target(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    write_text_atomic(tmp_path / "t.md", "x\n")
    assert (tmp_path / "t.md").read_text() == "x\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json", "t.md"]


def test_a_failed_write_leaves_the_old_file_and_no_staging(tmp_path: Path) -> None:
    target = tmp_path / "rows.parquet"
    target.write_text("old")
    with pytest.raises(RuntimeError), staged(target) as staging:
        staging.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["rows.parquet"]
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "new.json", {"not": object()})
    assert not (tmp_path / "new.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["rows.parquet"]


def test_read_safetensors_header(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    from rlvr.common.files import read_safetensors_header

    save_file({"w": torch.zeros(2, 3)}, tmp_path / "m.safetensors")
    header = read_safetensors_header(tmp_path / "m.safetensors")
    assert header["w"]["shape"] == [2, 3]
    (tmp_path / "bad.safetensors").write_bytes(b"\x01")
    with pytest.raises(ValueError, match="no safetensors header"):
        read_safetensors_header(tmp_path / "bad.safetensors")
