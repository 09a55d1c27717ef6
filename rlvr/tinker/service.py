"""The connection to a Tinker API server (a TuFT server or Tinker's hosted service), and what its
failures mean to a user, one line each with the fix.

The endpoint and key come from the environment (``TINKER_BASE_URL``, ``TINKER_API_KEY``) so that
no printed config carries the key. Transient failures (a dropped connection, a timeout, HTTP 408,
429 or 5xx) of calls that are safe to repeat (sampling, saving, listing) are retried with
exponential backoff; a train step (``forward_backward`` + ``optim_step``) is never repeated,
since a gradient the server already applied would be applied twice: the run stops, and running
it again resumes from the last checkpoint.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlparse

BASE_URL_ENV = "TINKER_BASE_URL"
#: Where the tinker SDK 0.25 sends requests when TINKER_BASE_URL is unset (tinker/_client.py).
HOSTED_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"
API_KEY_ENV = "TINKER_API_KEY"
T = TypeVar("T")


class TinkerRunError(Exception):
    """A failure a Tinker run stops on; the message is one line with the cause and the fix."""


def endpoint() -> str:
    """Where requests go: ``TINKER_BASE_URL``, else the SDK's default (Tinker's service)."""
    return os.environ.get(BASE_URL_ENV, "").strip() or HOSTED_URL


def service_client(timeout_s: float, max_retries: int) -> Any:
    """A ``tinker.ServiceClient`` for ``endpoint()``; the SDK's own HTTP retries are ours
    (``max_retries``), and a request waits at most ``timeout_s``."""
    try:
        import tinker
    except ImportError:
        raise TinkerRunError(
            "the tinker SDK is not installed; install it with: uv sync --extra tinker"
        ) from None
    key = os.environ.get(API_KEY_ENV, "").strip()
    if not key:
        raise TinkerRunError(
            f"{API_KEY_ENV} is not set; export the key your server accepts (a TuFT server: one "
            f"of the keys in its config; Tinker: the console's API key)"
        )
    try:
        return tinker.ServiceClient(
            base_url=endpoint(), api_key=key, timeout=timeout_s, max_retries=max_retries
        )
    except Exception as exc:
        raise explain(exc, "connecting") from None


def _status(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) else None


def transient(exc: BaseException) -> bool:
    """A failure the same request may not meet again (connection, timeout, 408/429/5xx)."""
    import tinker

    if isinstance(exc, tinker.APIConnectionError | TimeoutError | ConnectionError):
        return True
    code = _status(exc)
    return code is not None and (code in (408, 409, 429) or code >= 500)


def reachable(url: str, timeout_s: float = 5.0) -> bool:
    """Whether anything accepts a TCP connection at the URL's host and port."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def bounded(call: Callable[[], T], timeout_s: float) -> T:
    """``call()``, waited for at most ``timeout_s``: the SDK itself retries a refused or dropped
    connection for up to 5 minutes (tinker 0.25's ``execute_with_retries``), past any timeout
    given to it. A call still running then is left to its daemon thread."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="tinker-call")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"no answer in {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def explain(exc: BaseException, doing: str) -> TinkerRunError:
    """``exc`` as one line naming the cause and the fix."""
    import tinker

    url = endpoint()
    detail = " ".join(str(exc).split())[:300] or type(exc).__name__
    code = _status(exc)
    if isinstance(exc, TimeoutError) and not reachable(url):
        exc = ConnectionError(detail)
    if isinstance(exc, tinker.APITimeoutError | TimeoutError):
        why = (
            f"{url} did not answer in time while {doing}; check the server's load, or raise "
            "tinker.request_timeout_s"
        )
    elif isinstance(exc, tinker.APIConnectionError | ConnectionError):
        why = (
            f"cannot reach {url} while {doing} ({detail}); start the server or set "
            f"{BASE_URL_ENV} to its address"
        )
    elif code in (401, 403):
        why = (
            f"{url} refused the API key while {doing} (HTTP {code}); set {API_KEY_ENV} to a key "
            "the server accepts"
        )
    elif code is not None and code < 500:
        why = f"{url} refused the request while {doing} (HTTP {code}: {detail})"
    else:
        why = f"{doing} failed: {type(exc).__name__}: {detail}"
    return TinkerRunError(why)


def retried(
    call: Callable[[], T],
    doing: str,
    attempts: int,
    backoff_s: float,
    timeout_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()`` (each attempt bounded by ``timeout_s``), repeated after a transient failure
    (``attempts`` in all, waits doubling from ``backoff_s``); the last failure, or any other, as
    a TinkerRunError."""
    for attempt in range(1, max(1, attempts) + 1):
        try:
            return bounded(call, timeout_s)
        except TinkerRunError:
            raise
        except Exception as exc:
            if attempt >= attempts or not transient(exc):
                raise explain(exc, doing) from None
            wait = backoff_s * 2 ** (attempt - 1)
            print(
                f"tinker: {doing}: {type(exc).__name__}; retrying in {wait:g} s "
                f"({attempt}/{attempts - 1})",
                flush=True,
            )
            sleep(wait)
    raise AssertionError("unreachable")
