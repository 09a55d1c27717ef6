"""What verl's ``ray.init`` will do with this run's environment and config, read before Ray is
imported: start a local Ray, join a cluster on purpose (``RAY_ADDRESS``), or join one silently,
which pre-flight refuses.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _ray_temp_dir(environ: Mapping[str, str]) -> Path:
    """Ray's default temp dir, as ``ray._common.utils.get_ray_temp_dir`` picks it (without
    importing Ray: seconds on a slow machine)."""
    base = environ.get("RAY_TMPDIR") or environ.get("TMPDIR") or "/tmp"
    return Path(base) / "ray"


def _answers(address: str, timeout_s: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``host:port`` (a live Ray GCS)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return False
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def ray_plan(config: Any, environ: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """What ``ray.init`` in verl's driver will do, and a problem when that is unsafe or doomed.

    Without an address Ray joins the cluster the last ``ray start`` recorded in
    ``<temp dir>/ray_current_cluster``: someone else's cluster, silently. That is refused;
    joining is done on purpose with ``RAY_ADDRESS``.
    """
    environ = os.environ if environ is None else environ
    ray_init = config.get("ray_kwargs", {}).get("ray_init", {}) or {}
    address = environ.get("RAY_ADDRESS") or ray_init.get("address") or ""
    temp_dir = Path(str(ray_init.get("_temp_dir") or _ray_temp_dir(environ)))
    record = temp_dir / "ray_current_cluster"
    recorded = record.read_text().strip() if record.is_file() else ""
    if not address:
        if not recorded:
            return "starting a local Ray for this run (it stops with the run)", None
        state = "is running" if _answers(recorded) else "was left recorded (nothing answers)"
        return "refusing to join a cluster silently", (
            f"ray: a Ray cluster {state} at {recorded} ({record}), and verl would join it; "
            "to join it set RAY_ADDRESS=auto, or stop it (bash scripts/ray_cluster.sh stop), "
            "or give this run its own Ray: +ray_kwargs.ray_init._temp_dir=/tmp/ray-NAME"
        )
    if address == "local":
        return "starting a separate local Ray (RAY_ADDRESS=local)", None
    if address.startswith(("ray://", "http://", "https://")):
        return f"joining the Ray cluster at {address} (RAY_ADDRESS)", None
    target = recorded if address == "auto" else address
    if not target or not _answers(target):
        return "cannot join", (
            f"RAY_ADDRESS={address}: no Ray cluster answers"
            + (f" at {target}" if target else f" (none recorded in {record})")
            + "; start one with `bash scripts/ray_cluster.sh head`, or unset RAY_ADDRESS"
        )
    fixed = [k for k in ("num_cpus", "num_gpus") if ray_init.get(k) is not None]
    if fixed:  # ray.init refuses resource counts when it connects to a cluster
        return "cannot join", (
            f"RAY_ADDRESS={address}: ray_kwargs.ray_init sets {', '.join(fixed)} (a local-Ray "
            "setting, e.g. hardware=cpu), which Ray refuses when joining; unset RAY_ADDRESS"
        )
    return f"joining the Ray cluster at {target} (RAY_ADDRESS={address})", None
