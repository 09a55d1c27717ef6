"""A stand-in for huggingface.co at huggingface_hub's HTTP layer: it serves one repo from a local
folder and records every request, so the library's real download and lookup code runs and
nothing reaches the network.

``serve(hub)`` installs it with huggingface_hub's own ``configure_http_backend``; ``use_cache``
points the cache at a temporary folder. Both libraries resolve the cache folder at import
(``huggingface_hub.constants.HF_HUB_CACHE``, ``transformers.utils.hub.TRANSFORMERS_CACHE``), so
a test sets those; a fresh process (pre-flight's) reads ``HF_HOME``/``HF_HUB_CACHE`` instead.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests
from requests.adapters import BaseAdapter

COMMIT = "1" * 40


class FakeHub(BaseAdapter):
    """Answers the Hub API's repo info and ``resolve`` HEAD/GET for ``repo_id`` from ``folder``;
    anything else is a 404. ``requests`` holds (method, url) of every request."""

    def __init__(self, repo_id: str, folder: Path) -> None:
        super().__init__()
        self.repo_id = repo_id
        self.files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
        self.requests: list[tuple[str, str]] = []

    def send(self, request, **kwargs):  # type: ignore[no-untyped-def,override]
        self.requests.append((str(request.method), str(request.url)))
        path = urlparse(str(request.url)).path
        body, headers, status = b"", {}, 404
        resolve = re.fullmatch(rf"/{re.escape(self.repo_id)}/resolve/[^/]+/(.+)", path)
        if path == f"/api/models/{self.repo_id}/revision/main":
            siblings = [{"rfilename": name} for name in self.files]
            info = {"id": self.repo_id, "sha": COMMIT, "siblings": siblings}
            body, status = json.dumps(info).encode(), 200
        elif resolve and resolve.group(1) in self.files:
            content = self.files[resolve.group(1)]
            etag = hashlib.sha256(content).hexdigest()  # names the blob: one per file
            headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{etag}"'}
            body, status = (b"" if request.method == "HEAD" else content), 200
            headers["Content-Length"] = str(len(content))
        response = requests.Response()
        response.status_code, response.url, response.request = status, request.url, request
        response.headers.update(headers)
        response.raw = io.BytesIO(body)
        return response

    def close(self) -> None:
        pass


@contextmanager
def serve(hub: FakeHub) -> Iterator[FakeHub]:
    """Every huggingface_hub request goes to ``hub`` while the block runs, as from a process
    started online: the import-time offline flags are off (CI exports HF_HUB_OFFLINE=1)."""
    import transformers.utils.hub
    from huggingface_hub import configure_http_backend, constants

    def session() -> requests.Session:
        made = requests.Session()
        made.mount("https://", hub)
        made.mount("http://", hub)
        return made

    flags = constants.HF_HUB_OFFLINE, transformers.utils.hub._is_offline_mode
    constants.HF_HUB_OFFLINE = transformers.utils.hub._is_offline_mode = False
    configure_http_backend(session)
    try:
        yield hub
    finally:
        configure_http_backend()  # the default again (also drops the cached sessions)
        constants.HF_HUB_OFFLINE, transformers.utils.hub._is_offline_mode = flags


def use_cache(monkeypatch: pytest.MonkeyPatch, folder: Path) -> Path:
    """Point both libraries' hub cache at ``folder`` for this test."""
    import transformers.utils.hub
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(folder))
    monkeypatch.setattr(transformers.utils.hub, "TRANSFORMERS_CACHE", str(folder))
    return folder


def download(repo_id: str, folder: Path) -> FakeHub:
    """``hf download repo_id`` (huggingface_hub's ``snapshot_download``) from a fake Hub serving
    ``folder``, into the cache ``use_cache`` set."""
    from huggingface_hub import snapshot_download

    with serve(FakeHub(repo_id, folder)) as hub:
        snapshot_download(repo_id)
    return hub
