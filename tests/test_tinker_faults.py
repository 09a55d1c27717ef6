"""Bad input and faults of a Tinker run, each one line naming the cause and the fix, against TuFT
0.2.2's real server on 127.0.0.1 (tests/tuft_server.py), a closed port, a port that accepts and
never answers, and a proxy that drops the connection mid-run. Pre-flight and the loop are called
in-process, as the launcher calls them.

TuFT's CPU test mode does not enforce ``max_lora_rank`` (its vLLM and FSDP backends do), so a
refused rank is shown through the same path a refused creation takes: a model the server
does not know, asked for past pre-flight.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tuft_server import (
    EXPERIMENT,
    Proxy,
    free_port,
    overrides,
)
from wandb_run_file import history_rows, wandb_records

from rlvr.config.compose import compose
from rlvr.preflight import checks
from rlvr.tinker.loop import TinkerLoop
from rlvr.tinker.problems import grader, load_problems
from rlvr.tinker.recipe import TinkerRecipe
from rlvr.tinker.service import TinkerRunError, service_client
from rlvr.tinker.train import load_tokenizer, start_training

pytestmark = [pytest.mark.slow, pytest.mark.extra("tinker")]


def preflight(
    work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    url: str, key: str | None, *extra: str,
) -> tuple[int, list[str]]:  # fmt: skip
    monkeypatch.setenv("TINKER_BASE_URL", url)
    if key is None:
        monkeypatch.delenv("TINKER_API_KEY", raising=False)
    else:
        monkeypatch.setenv("TINKER_API_KEY", key)
    code = checks.main([EXPERIMENT, *overrides(work, "faults", 1, *extra)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pre-flight:")]
    return code, err


def test_preflight_passes_against_the_server(tuft, tinker_dir, monkeypatch, capsys) -> None:
    code, err = preflight(tinker_dir, monkeypatch, capsys, tuft.url, tuft.api_key)
    assert (code, err) == (0, [])


def test_unreachable_server(tinker_dir, monkeypatch, capsys) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    code, err = preflight(tinker_dir, monkeypatch, capsys, url, "tml-any")
    assert code == 2 and len(err) == 1
    assert f"cannot reach {url}" in err[0] and "start the server or set TINKER_BASE_URL" in err[0]


def test_wrong_key(tuft, tinker_dir, monkeypatch, capsys) -> None:
    code, err = preflight(tinker_dir, monkeypatch, capsys, tuft.url, "tml-wrong")
    assert code == 2 and len(err) == 1
    assert "refused the API key" in err[0] and "HTTP 403" in err[0] and "TINKER_API_KEY" in err[0]


def test_missing_key(tuft, tinker_dir, monkeypatch, capsys) -> None:
    code, err = preflight(tinker_dir, monkeypatch, capsys, tuft.url, None)
    assert code == 2 and err == [
        "pre-flight: tinker: TINKER_API_KEY is not set; export the key your server accepts (a "
        "TuFT server: one of the keys in its config; Tinker: the console's API key)"
    ]


def test_model_not_served(tuft, tinker_dir, monkeypatch, capsys) -> None:
    code, err = preflight(
        tinker_dir,
        monkeypatch,
        capsys,
        tuft.url,
        tuft.api_key,
        "actor_rollout_ref.model.path=Qwen/Nope",
    )
    assert code == 2 and len(err) == 1
    assert "actor_rollout_ref.model.path=Qwen/Nope" in err[0] and "does not serve it" in err[0]
    assert tuft.model in err[0]  # what it does serve


def recipe_for(work: Path, url: str, *extra: str) -> TinkerRecipe:
    quick = ["tinker.max_retries=1", "tinker.backoff_s=0.01", "tinker.request_timeout_s=3"]
    config = compose(EXPERIMENT, overrides(work, "faults", 1, *quick, *extra))
    return TinkerRecipe.from_config(config)


def test_a_creation_the_server_refuses(tuft, tinker_dir, monkeypatch) -> None:
    monkeypatch.setenv("TINKER_BASE_URL", tuft.url)
    monkeypatch.setenv("TINKER_API_KEY", tuft.api_key)
    recipe = recipe_for(tinker_dir, tuft.url, "actor_rollout_ref.model.path=Qwen/Nope")
    service = service_client(recipe.request_timeout_s, 0)
    with pytest.raises(TinkerRunError) as refused:
        start_training(recipe, service)
    message = str(refused.value)
    assert "\n" not in message
    assert (
        "refused the request while creating a LoRA rank-32 training client of Qwen/Nope" in message
    )
    assert "HTTP 404" in message


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and reads, and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join()
    for sock in held:
        sock.close()
    listener.close()


def test_a_server_that_does_not_answer_times_out(
    tinker_dir, monkeypatch, capsys, silent_port
) -> None:
    url = f"http://127.0.0.1:{silent_port}"
    began = time.monotonic()
    code, err = preflight(
        tinker_dir, monkeypatch, capsys, url, "tml-any", "tinker.request_timeout_s=1"
    )
    assert time.monotonic() - began < 60
    assert code == 2 and len(err) == 1
    assert f"{url} did not answer in time" in err[0] and "tinker.request_timeout_s" in err[0]


def test_a_connection_dropped_mid_step(tuft, tinker_dir, monkeypatch, capsys) -> None:
    proxy = Proxy(int(tuft.url.rsplit(":", 1)[1]))
    url = f"http://127.0.0.1:{proxy.port}"
    monkeypatch.setenv("TINKER_BASE_URL", url)
    monkeypatch.setenv("TINKER_API_KEY", tuft.api_key)
    recipe = recipe_for(tinker_dir, url)
    training, _ = start_training(recipe, service_client(recipe.request_timeout_s, 0))
    tokenizer = load_tokenizer(recipe.model)
    problems = load_problems(recipe.train_files, tokenizer, {}, recipe.max_prompt_tokens, 2)
    grade = grader(recipe.reward_path, recipe.reward_name, recipe.reward_kwargs)
    loop = TinkerLoop(recipe, training, tokenizer, grade, problems, [], log=None)  # logs nothing
    sampler = loop.sampler(0)
    graded = loop.collect(problems, loop.submit(sampler, problems, 2, 1.0))  # through the proxy
    proxy.cut()
    # The SDK retries a refused connection for minutes; each call is bounded by the timeout,
    # which the calls that now fail need only briefly (the ones before took it whole).
    loop.recipe = dataclasses.replace(recipe, request_timeout_s=1.0)
    with pytest.raises(TinkerRunError) as dropped:
        loop.update(graded)
    assert "\n" not in str(dropped.value)
    assert f"cannot reach {url} while the train step" in str(dropped.value)
    with pytest.raises(TinkerRunError, match=f"cannot reach {url} while exporting the weights"):
        loop.sampler(1)  # a repeatable call: retried with backoff first
    assert "retrying in 0.01 s (1/1)" in capsys.readouterr().out


def test_ctrl_c_stops_cleanly_and_says_where_a_rerun_resumes(
    tuft, tinker_dir, monkeypatch, capsys
) -> None:
    """SIGINT (Ctrl-C) right after step 2 is logged, delivered to this process as a terminal
    sends it; the run is the launcher's (rlvr.tinker.train.run), in-process."""
    from rlvr.tinker import tracking, train

    monkeypatch.setenv("TINKER_BASE_URL", tuft.url)
    monkeypatch.setenv("TINKER_API_KEY", tuft.api_key)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tinker_dir / "logs/interrupted"))
    logged = tracking.RunLog.log

    def then_ctrl_c(self: tracking.RunLog, metrics: dict[str, float], step: int) -> None:
        logged(self, metrics, step)
        if step == 2:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(tracking.RunLog, "log", then_ctrl_c)
    run = overrides(tinker_dir, "interrupted", 50, "trainer.test_freq=-1")
    code = train.run(EXPERIMENT, run)
    err = capsys.readouterr().err
    assert code == 130
    assert "tinker: stopped; run the same command again to resume from step 2" in err
    run_dir = tinker_dir / "runs/interrupted"
    assert [json.loads(line)["step"] for line in (run_dir / "checkpoints.jsonl").open()] == [1, 2]
    assert (run_dir / "metrics.jsonl").read_text().endswith("\n")
    assert not (run_dir / "adapter").exists()  # stopped before the end: nothing half written
    # The WandB run was finished with the stop's exit code, its steps written whole.
    (run_file,) = (tinker_dir / "logs/interrupted/wandb").glob("offline-run-*/run-*.wandb")
    exits = [r.exit.exit_code for kind, r in wandb_records(run_file) if kind == "exit"]
    assert exits == [130]
    assert {row["_step"] for row in history_rows(run_file)} >= {1, 2}
