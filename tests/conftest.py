"""Shared fixtures: the offline tiny tokenizer is built once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from rlvr.tiny_model import build_tokenizer

    return build_tokenizer()
