"""TuFT 0.2.2's real server on 127.0.0.1, in its CPU test mode, for the Tinker tests.

Its environment is the one rlvr/tinker/tuft_env.py builds (once, cached): TuFT pins torch 2.11,
transformers 5 and vllm 0.24, which cannot share the project's environment. torch, which this
mode still imports, comes from the project's environment through a .pth file placed after the
server's own packages.

What the mode proves and what it does not: ``TUFT_CPU_TEST=1`` swaps TuFT's model for
``DummySamplingBackend`` (each sample counts up from the prompt's last token; log prob -0.3 per
token) and ``DummyTrainingBackend`` (a 16-weight linear model under Adam). TuFT's HTTP API,
request validation, sessions, futures, checkpoint records and loss dispatch are its real code;
no language model samples or trains, and its checkpoints hold metadata, not adapter weights.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rlvr.tinker.tuft_env import CPU_TEST_ENV, ensure_env

API_KEY = "tml-rlvr-test"  # the tinker SDK refuses keys without the tml- prefix
MAX_LORA_RANK = 32
EXPERIMENT = "countdown_qwen3_4b_tinker"
RUN_TIMEOUT_S = 180  # one launcher run against the server, a hard limit


def _die_with_parent() -> None:
    """In the server's process: SIGTERM from the kernel when the test process dies, killed or
    timed out before its clean-up ran (Linux's PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class TuftServer:
    url: str
    api_key: str
    model: str  # the model name it serves: the tiny model's folder, also its tokenizer
    log: Path
    checkpoint_dir: Path

    def env(self) -> dict[str, str]:
        return {"TINKER_BASE_URL": self.url, "TINKER_API_KEY": self.api_key}


@contextmanager
def tuft_server(model_dir: Path, work: Path, timeout_s: float = 120) -> Iterator[TuftServer]:
    """TuFT's server serving ``model_dir`` (a Qwen2-architecture folder: TuFT resolves its LoRA
    targets from config.json) on a free port; stopped, with only its own processes, at exit."""
    python = ensure_env()
    work.mkdir(parents=True, exist_ok=True)
    config = work / "tuft.yaml"
    config.write_text(
        "supported_models:\n"
        f"  - model_name: {model_dir}\n    model_path: {model_dir}\n"
        f"    max_model_len: 2048\n    max_lora_rank: {MAX_LORA_RANK}\n"
        f"authorized_users:\n  {API_KEY}: tester\n"
    )
    port = free_port()
    log = work / "tuft.log"
    command = [str(python), "-m", "tuft", "launch", "--host", "127.0.0.1", "--port", str(port),
               "--config", str(config), "--checkpoint-dir", str(work / "checkpoints")]  # fmt: skip
    env = {**os.environ, **CPU_TEST_ENV, "PYTHONNOUSERSITE": "1"}
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work,
                                   start_new_session=True, preexec_fn=_die_with_parent)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"TuFT exited {process.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/v1/healthz", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"TuFT not healthy in {timeout_s} s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield TuftServer(url, API_KEY, str(model_dir), log, work / "checkpoints")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # its own session: only its processes
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class Proxy:
    """A TCP proxy to the server that counts the HTTP requests it forwards (the tinker SDK
    speaks HTTP/1.1 to an http:// address) and whose ``cut()`` drops every connection and
    refuses new ones."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.port = int(self.listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.sockets: list[socket.socket] = []
        self.sent: list[bytearray] = []  # what each connection's client sent
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client = self.listener.accept()[0]
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            self.sent.append(sent := bytearray())
            for a, b, seen in ((client, upstream, sent), (upstream, client, None)):
                threading.Thread(target=self._pipe, args=(a, b, seen), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket, seen: bytearray | None) -> None:
        try:
            while data := source.recv(65536):
                if seen is not None:
                    seen += data
                sink.sendall(data)
        except OSError:
            pass

    def requests(self) -> list[str]:
        """Every request forwarded so far, as ``METHOD /path`` (query strings cut)."""
        line = re.compile(rb"(GET|POST|PUT|PATCH|DELETE) (/[^ ?\r\n]*)\S* HTTP/1\.[01]\r\n")
        return [f"{m[0].decode()} {m[1].decode()}" for sent in self.sent
                for m in line.findall(bytes(sent))]  # fmt: skip

    def cut(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def overrides(work: Path, run: str, steps: int, *extra: str) -> list[str]:
    """A 2-prompt x 4-sample run on the tiny model. GRPO without the group filter: TuFT's toy
    sampler gives one group the same sample four times, so the filter would send nothing; with
    it off every response's Datum (advantage 0) still reaches the server's validation."""
    return [
        f"paths.data={work / 'data'}", f"paths.checkpoints={work / 'runs'}",
        f"trainer.experiment_name={run}", f"actor_rollout_ref.model.path={work / 'models/tiny'}",
        "data.train_batch_size=2", "actor_rollout_ref.rollout.n=4",
        "data.max_response_length=8", "data.val_max_samples=4", "algorithm.adv_estimator=grpo",
        f"trainer.total_training_steps={steps}", "trainer.save_freq=1", "trainer.test_freq=2",
        *extra,
    ]  # fmt: skip


def launch_env(server: TuftServer, work: Path) -> dict[str, str]:
    """The launcher's environment: the server's address and key, logs and wandb's offline
    runs under ``work`` (no key, no group inherited from the machine's)."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_RUN_GROUP")}
    return {**env, **server.env(), "RLVR_LOG_DIR": str(work / "logs"), "WANDB_MODE": "offline"}
