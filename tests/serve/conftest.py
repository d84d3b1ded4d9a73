"""Launcher and shared helpers of the `lowbit serve` end-to-end tests.

Every server is a real `lowbit serve` process on a free loopback port (--port 0; the port is read
from the line the server prints on stderr). Its stderr goes to a file that is attached to the report
of any test that fails while the server is alive, and every server is stopped (SIGTERM, then
SIGKILL of that one pid) when its fixture ends. The binary comes from $LOWBIT_BIN (tests/serve/run.sh
sets it from CTest's $<TARGET_FILE:lowbit>).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import openai
import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "models" / "ref-llama-19m"
MODEL_NAME = "ref-llama-19m"  # --served-model-name of every test server
HELDOUT = REPO / "data" / "text" / "heldout.txt"

READY_RE = re.compile(r"lowbit serve: (.+) on http://([^\s:]+):(\d+) \(OpenAI API under /v1\)")

# Guards against hangs only (never a performance threshold): how long a server may take to load the
# 19M-parameter model and bind, and how long one HTTP call may take on a loaded 2-core machine.
STARTUP_TIMEOUT_S = 120
HTTP_TIMEOUT_S = 120


def lowbit_bin() -> str:
    path = os.environ.get("LOWBIT_BIN")
    if not path:
        for candidate in ("build/bin/lowbit", "build-e2e/bin/lowbit"):
            if (REPO / candidate).exists():
                path = str(REPO / candidate)
                break
    if not path or not Path(path).exists():
        pytest.exit(f"lowbit binary not found (LOWBIT_BIN={path!r}); run through tests/serve/run.sh",
                    returncode=2)
    return path


_LIVE_SERVERS: list["LowbitServer"] = []
_STARTED_IN_TEST: list["LowbitServer"] = []  # servers a test started itself (maybe stopped since)
_ALL_SERVERS: list["LowbitServer"] = []


class LowbitServer:
    """One `lowbit serve` process of the embedded model."""

    def __init__(self, *extra_args: str, name: str = "server", api_key: str | None = None):
        self.name = name
        self.api_key = api_key
        self.args = [lowbit_bin(), "serve", str(MODEL_DIR), "--port", "0",
                     "--served-model-name", MODEL_NAME, *extra_args]
        if api_key is not None:
            self.args += ["--api-key", api_key]
        self._stderr_file = tempfile.NamedTemporaryFile(prefix=f"lowbit-serve-{name}-", suffix=".log",
                                                        delete=False)
        self.proc: subprocess.Popen | None = None
        _ALL_SERVERS.append(self)
        self.host = ""
        self.port = 0
        self.returncode: int | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "LowbitServer":
        env = dict(os.environ)
        env.pop("LOWBIT_API_KEY", None)  # only --api-key decides authentication here
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._stderr_file, env=env, cwd=REPO)
        _LIVE_SERVERS.append(self)
        _STARTED_IN_TEST.append(self)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            match = READY_RE.search(self.stderr())
            if match:
                assert match.group(1) == MODEL_NAME, f"startup line names {match.group(1)!r}"
                self.host, self.port = match.group(2), int(match.group(3))
                assert self.port > 0, f"--port 0 printed port {self.port}"
                break
            if self.proc.poll() is not None:
                raise AssertionError(f"lowbit serve exited with {self.proc.returncode} before "
                                     f"listening:\n{self.stderr()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"lowbit serve printed no startup line in {STARTUP_TIMEOUT_S} s:"
                                     f"\n{self.stderr()}")
            time.sleep(0.05)
        # The startup line comes after bind(); /health answers once run() accepts.
        while True:
            try:
                if httpx.get(self.url("/health"), timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"/health never answered 200:\n{self.stderr()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then SIGKILL of this pid only if it does not exit in `timeout` s."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
                self.returncode = -9
        if self.returncode is None:
            self.returncode = self.proc.returncode
        if self in _LIVE_SERVERS:
            _LIVE_SERVERS.remove(self)
        return self.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- access ----------------------------------------------------------------------------------

    def stderr(self) -> str:
        with open(self._stderr_file.name, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def url(self, path: str = "") -> str:
        return f"http://{self.host}:{self.port}{path}"

    @property
    def base_url(self) -> str:
        return self.url("/v1")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, **kwargs) -> openai.OpenAI:
        # max_retries=0: a retried request would hide a failed one.
        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key or "none", max_retries=0,
                             timeout=HTTP_TIMEOUT_S, **kwargs)

    def async_client(self, **kwargs) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key or "none",
                                  max_retries=0, timeout=HTTP_TIMEOUT_S, **kwargs)

    def post(self, path: str, body, **kwargs) -> httpx.Response:
        headers = {**self.headers(), **kwargs.pop("headers", {})}
        if isinstance(body, (bytes, str)):
            return httpx.post(self.url(path), content=body, timeout=HTTP_TIMEOUT_S,
                              headers={"Content-Type": "application/json", **headers}, **kwargs)
        return httpx.post(self.url(path), json=body, timeout=HTTP_TIMEOUT_S, headers=headers, **kwargs)

    def get(self, path: str, **kwargs) -> httpx.Response:
        headers = {**self.headers(), **kwargs.pop("headers", {})}
        return httpx.get(self.url(path), timeout=HTTP_TIMEOUT_S, headers=headers, **kwargs)

    def metrics_text(self) -> str:
        response = self.get("/metrics")
        assert response.status_code == 200, f"/metrics: {response.status_code} {response.text}"
        return response.text

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels` (0 when none)."""
        return metric_value(self.metrics_text(), name, **labels)

    def wait_idle(self, timeout: float = 60) -> tuple[float, float]:
        """Polls /metrics until no request runs or waits; returns the last (running, waiting)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.metrics_text()
            state = (metric_value(text, "lowbit:num_requests_running"),
                     metric_value(text, "lowbit:num_requests_waiting"))
            if state == (0, 0) or time.monotonic() > deadline:
                return state
            time.sleep(0.1)

    def rss_kib(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS in /proc/PID/status")


_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric_value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE_RE.match(line)
        if not match or match.group(1) != name:
            continue
        have = dict(_LABEL_RE.findall(match.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(match.group(3))
    return total


# -- the CLI as the reference --------------------------------------------------------------------

def run_lowbit(*args: str, timeout: float = 300) -> str:
    result = subprocess.run([lowbit_bin(), *args], capture_output=True, timeout=timeout, cwd=REPO)
    assert result.returncode == 0, (f"lowbit {' '.join(args)} exited {result.returncode}:\n"
                                    f"{result.stderr.decode('utf-8', 'replace')}")
    return result.stdout.decode("utf-8")


def tokenize(text: str, special: bool = True) -> list[int]:
    args = ["tokenize", str(MODEL_DIR), "--text", text]
    if not special:
        args.append("--no-special-tokens")
    return json.loads(run_lowbit(*args))


def detokenize(ids: list[int], skip_special: bool = True) -> str:
    args = ["detokenize", str(MODEL_DIR), "--ids", json.dumps(ids)]
    if skip_special:
        args.append("--skip-special-tokens")
    out = run_lowbit(*args)
    assert out.endswith("\n")
    return out[:-1]


def generate_ids(prompt: str, max_tokens: int, chat: bool = False) -> list[int]:
    """Greedy ids of `lowbit generate` (one request, no server)."""
    args = ["generate", str(MODEL_DIR), "--prompt", prompt, "-n", str(max_tokens), "--ignore-eos",
            "--output-ids", "--temperature", "0"]
    if chat:
        args.append("--chat")
    return json.loads(run_lowbit(*args))


def render_chat(messages: list[dict]) -> str:
    """The model's chat template rendered by jinja2 (the reference engine transformers uses)."""
    import jinja2

    config = json.loads((MODEL_DIR / "tokenizer_config.json").read_text())
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string((MODEL_DIR / "chat_template.jinja").read_text())
    return template.render(messages=messages, add_generation_prompt=True,
                           bos_token=config["bos_token"], eos_token=config["eos_token"])


def heldout_prompts(count: int, words: int = 12, seed: int = 0) -> list[str]:
    """`count` different prompts: the first `words` words of distinct heldout paragraphs' lines."""
    lines = [line.strip() for line in HELDOUT.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if len(line.split()) >= 8 and line.isascii()
             and not line.startswith("-")]
    step = max(1, len(lines) // (count * 3))
    prompts: list[str] = []
    for i in range(seed, len(lines), step):
        prompt = " ".join(lines[i].split()[:words])
        if prompt not in prompts:
            prompts.append(prompt)
        if len(prompts) == count:
            return prompts
    raise AssertionError("heldout.txt has too few lines")


# -- pytest plumbing -----------------------------------------------------------------------------

def pytest_sessionfinish(session, exitstatus):
    for server in _ALL_SERVERS:
        server.stop()  # a no-op for those already stopped
        os.unlink(server._stderr_file.name)


def pytest_runtest_setup(item):
    _STARTED_IN_TEST.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        servers = list(_LIVE_SERVERS) + [s for s in _STARTED_IN_TEST if s not in _LIVE_SERVERS]
        for server in servers:
            tail = server.stderr()[-6000:]
            report.sections.append((f"lowbit serve stderr ({server.name}, pid "
                                    f"{server.proc.pid if server.proc else '-'})", tail))


@pytest.fixture(autouse=True)
def _servers_survive():
    """Nothing a test sends may bring a server down: every live server must still run after it."""
    before = list(_LIVE_SERVERS)
    yield
    dead = [s for s in before if s in _LIVE_SERVERS and not s.alive()]
    if dead:
        server = dead[0]
        pytest.fail(f"lowbit serve ({server.name}) died with exit code {server.proc.returncode}:\n"
                    f"{server.stderr()[-6000:]}")


def start_server(*args: str, **kwargs) -> LowbitServer:
    return LowbitServer(*args, **kwargs).start()


@pytest.fixture(scope="session")
def server():
    """The shared server of the tests that do not change or measure server-wide state."""
    s = start_server("--max-num-seqs", "32", name="shared")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server):
    with server.client() as c:
        yield c
