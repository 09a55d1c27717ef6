"""Shared fixtures (the offline tiny model and tokenizer, built once per session) and the
``no_cuda`` marker: a test of the CPU path is skipped where torch sees CUDA."""

from __future__ import annotations

import functools
import gc
import importlib.util
import os
import signal
import tempfile
import warnings
from pathlib import Path

import pytest
from wandb_run_file import wandb_records

from rlvr.common import processes

__all__ = ["run_bounded", "wandb_records"]

ROOT = Path(__file__).resolve().parents[1]

# A shell starts background jobs (`cmd &` without job control, nohup, some CI runners) with
# SIGINT ignored, and Python then installs no Ctrl-C handler; the tests that send SIGINT to
# this process or to a child (which inherits an ignored signal) would see nothing happen.
# Installing the handler here gives the children the default disposition too.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Likewise `nohup` starts the tests with SIGHUP ignored, which every child inherits, and bash
# cannot trap a signal ignored on entry: the tests that send SIGHUP to a script (stages.sh, the
# launchers' supervisor) then wait out their timeouts (seen once as a flaky CI failure).
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


# The tests run in the synced environment (pytest imports the project from it): the scripts they
# start skip their own `uv sync` (scripts/lib/ensure_uv.sh), as under scripts/test.sh.
os.environ.setdefault("RLVR_UV_SYNCED", str(ROOT))

# The tinker SDK's telemetry thread posts to the server it talks to, and flushes at interpreter
# exit: by then the tests' TuFT servers are stopped, and it printed "Failed to send telemetry
# batch" tracebacks after pytest's summary (once in CI). Telemetry is not what the tests check.
os.environ.setdefault("TINKER_TELEMETRY", "0")


# Ray's core worker gives up when the raylet does not answer its registration in time; on two
# loaded cores a worker of the slow tier hit it once before its run began (test_objectives_e2e's
# dapo run, in CI). It is Ray's start-up, not what any test here checks: one retry.
RAY_START_FAILURE = "Failed to register worker to Raylet"


def run_bounded(
    cmd: list[str], env: dict[str, str], timeout_s: float, ray_tmp: str | None = None
) -> str:
    """Run ``cmd`` from the repo root in its own process group with a hard timeout, and
    require exit 0. With ``ray_tmp`` (the run's own Ray temp dir), no process of that Ray
    instance may remain afterwards; stragglers, and only they, are killed."""
    for attempt in (1, 2):
        with tempfile.TemporaryDirectory() as folder:
            done = processes.run_bounded(cmd, env, timeout_s, ROOT, Path(folder) / "output.log")
        if done.returncode == 124:
            pytest.fail(f"{cmd[:3]} exceeded {timeout_s} s:\n{done.output[-4000:]}")
        if ray_tmp is not None:
            leftovers = processes.reap([ray_tmp])
            assert not leftovers, f"Ray processes left behind: {leftovers}"
        if done.returncode == 0 or RAY_START_FAILURE not in done.output or attempt == 2:
            break
        warnings.warn(f"Ray did not start ({RAY_START_FAILURE!r}): ran it again", stacklevel=2)
    assert done.returncode == 0, done.output[-6000:]
    return done.output


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker computes with its share of the cores. Torch's default is one thread per
    core in every worker, so ``-n auto`` ran cores x cores threads, and OpenMP's threads spin
    waiting on each other: the tiny model's greedy-decoding test took 12 s on 2 cores under
    ``-n 2`` and 0.14 s alone. This sets the worker's own torch; the interpreters its fast
    tests start get the same share from the fixture below."""
    threads = _worker_threads()
    if threads is None:
        return
    import torch

    torch.set_num_threads(threads)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The test modules have imported torch, verl, transformers and Ray: some 520,000 objects
    that live until exit. Python's full collections walked them again and again (33 times in
    each worker of the fast tier, 11 s of its ~115 s, measured with gc.callbacks). Frozen, they
    are not walked; and young collections at 20,000 new objects rather than 700 free the
    OmegaConf node cycles each compose leaves in fewer passes. Together: 12.5 -> 6 s a worker."""
    gc.freeze()
    gc.set_threshold(20_000, 20, 10)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """One collection frees what the tests left (their finalizers run now, and pytest reports
    any unraisable exception from them at exit, as it would), then the rest is frozen: the
    interpreter's teardown of a worker's whole heap, walked again, was 3 s the run waited on."""
    gc.collect()
    gc.freeze()


@functools.cache  # fixed for the worker's life; the fixture below asks once per test
def _worker_threads() -> int | None:
    """An xdist worker's share of the cores; None outside xdist."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    return None if workers is None else max(1, len(os.sched_getaffinity(0)) // int(workers))


@pytest.fixture(autouse=True)
def _children_share_the_cores(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """The interpreters a fast test starts (an eval, a gradient check) take the worker's share
    too, through OMP_NUM_THREADS (torch's default thread count); a slow test's runs keep the
    machine's, as they run alone once the fast tests are done."""
    threads = _worker_threads()
    if threads is not None and request.node.get_closest_marker("slow") is None:
        monkeypatch.setenv("OMP_NUM_THREADS", str(threads))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests form one xdist group (``--dist loadgroup`` in pyproject.toml): one worker
    runs them one after another, as each needs the machine's memory and cores to itself."""
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.xdist_group("slow"))


#: The extras scripts/test.sh synced (comma-separated), set by it and so in CI: a test needing
#: one of them fails when it is missing there, where it would be skipped after a plain sync.
REQUIRED_EXTRAS_ENV = "RLVR_REQUIRE_EXTRAS"


def missing_extra(extra: str, module: str, required: str) -> tuple[bool, str] | None:
    """None when ``module`` (what the ``extra`` installs) imports; else whether its tests must
    fail rather than skip (``extra`` is one of ``required``), and the one line saying so."""
    if importlib.util.find_spec(module) is not None:
        return None
    line = f"needs the {extra} extra ({module} is not installed): uv sync --extra {extra}"
    return extra in required.split(","), line


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.extra(NAME[, module])``: the test needs an optional extra of
    pyproject.toml; without it, a skip naming the install command (a fail under
    scripts/test.sh, which syncs the extras: there they always run).

    ``@pytest.mark.no_cuda``: the test exercises what happens without CUDA (the CPU fixes,
    the HF backend picked by ``auto``, the quickstart's CPU path); where CUDA is available the
    code takes its GPU path instead, so the test is skipped rather than failed."""
    for marker in item.iter_markers("extra"):
        extra = str(marker.args[0])
        module = str(marker.args[1]) if len(marker.args) > 1 else extra
        missing = missing_extra(extra, module, os.environ.get(REQUIRED_EXTRAS_ENV, ""))
        if missing is not None:
            must_run, line = missing
            (pytest.fail if must_run else pytest.skip)(line)
    if item.get_closest_marker("no_cuda") is None:
        return
    import torch

    if torch.cuda.is_available():
        pytest.skip("no_cuda: tests the path taken without CUDA, and torch sees CUDA here")


@pytest.fixture(scope="module")
def countdown_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Held-out Countdown rows, generated offline: the test split of 8 train / 6 test tasks."""
    from rlvr.tasks.countdown import prepare

    out = tmp_path_factory.mktemp("data") / "countdown"
    return prepare("generate", str(out), train_size=8, test_size=6, seed=1).paths["test"]


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from rlvr.models.tiny import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """The offline tiny random model (rlvr/models/tiny.py), built once per session."""
    from rlvr.models.tiny import build_model

    return build_model(tmp_path_factory.mktemp("models") / "tiny")


def countdown_workdir(
    factory: pytest.TempPathFactory, name: str, train_size: int, test_size: int
) -> Path:
    """A work folder with generated Countdown data (seed 0) and the tiny model, for e2e runs."""
    from rlvr.models.tiny import build_model
    from rlvr.tasks.countdown import prepare

    work = factory.mktemp(name)
    prepare(
        "generate", str(work / "data/countdown"), train_size=train_size, test_size=test_size, seed=0
    )
    build_model(work / "models/tiny")
    return work


def cpu_launch(work: Path, experiment_name: str) -> tuple[list[str], dict[str, str]]:
    """The launcher command (countdown_cpu on ``work``'s data and tiny model) and its env
    (wandb offline, logs under ``work``); callers add their own overrides."""
    env = {**os.environ, "RLVR_LOG_DIR": str(work / "logs"), "WANDB_MODE": "offline"}
    env.pop("WANDB_API_KEY", None)
    cmd = [
        "bash",
        str(ROOT / "scripts/train.sh"),
        "countdown_cpu",
        f"paths.data={work}/data",
        f"paths.checkpoints={work}/checkpoints",
        f"actor_rollout_ref.model.path={work}/models/tiny",
        f"trainer.experiment_name={experiment_name}",
    ]
    return cmd, env


@pytest.fixture(autouse=True)
def _plan_memory_for_the_declared_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pre-flight's memory planner checks this machine's GPU when it has one; the tests check
    configs against the GPU their hardware overlay declares, wherever they run."""
    from rlvr.planning import memory_plan

    monkeypatch.setattr(memory_plan, "_visible_gpu", lambda: None)


@pytest.fixture
def preflight_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pre-flight as on a fresh machine: no Ray cluster to find (an empty RAY_TMPDIR, no
    RAY_ADDRESS), Hub access and the memory plan at their defaults."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray"))
    for name in ("RAY_ADDRESS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "RLVR_STRICT_MEMORY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def tinker_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generated Countdown data and the tiny model (a Qwen2 folder, which TuFT resolves LoRA
    targets for), for the Tinker tests."""
    return countdown_workdir(tmp_path_factory, "tinker", 16, 8)


@pytest.fixture(scope="session")
def tuft(tinker_dir: Path):
    """TuFT 0.2.2's real server serving the tiny model on 127.0.0.1 (tests/tuft_server.py), one
    for the Tinker tests of a session."""
    from tuft_server import tuft_server

    with tuft_server(tinker_dir / "models/tiny", tinker_dir / "tuft") as server:
        yield server
