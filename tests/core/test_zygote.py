"""The test zygote (tests/support/zygote.py) starts a command as a new interpreter would.

Each test runs a probe both ways, forked by the zygote and as a real process, and compares what the probe saw:
its command line, import path, working directory, environment, ``__name__``, signal handlers and exit
status. The rest checks what the tests rely on of a ``Popen``: pipes, a timeout, signals, the exit status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support import zygote

PROBE = textwrap.dedent(
    """
    import json, os, signal, sys
    print(json.dumps({
        "name": __name__,
        "argv": sys.argv,
        "path": [p for p in sys.path if "site-packages" not in p and "/lib/python" not in p],
        "cwd": os.getcwd(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("KQ_PROBE")},
        "signals": [  # by name: a handler's repr holds an address (coverage's SIGTERM handler, under --cov)
            h.__qualname__ if callable(h) else str(h)
            for h in map(signal.getsignal, (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE))
        ],
        "stdin": sys.stdin.read(),
        "main_is_fresh": "PRELOAD" not in vars(sys.modules["__main__"]),
        "streams": [
            (s.line_buffering, s.write_through, type(s.buffer).__name__, s.encoding, s.errors)
            for s in (sys.stdin, sys.stdout, sys.stderr)
        ],
        "no_bytecode": sys.dont_write_bytecode,
    }))
    sys.exit(int(os.environ.get("KQ_PROBE_EXIT", "0")))
    """
)


def _both(args: list[str], **kwargs: Any) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    forked = subprocess.run(args, capture_output=True, text=True, check=False, timeout=60, **kwargs)
    with zygote._REAL_POPEN(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **{k: v for k, v in kwargs.items() if k != "input"}) as real:  # fmt: skip
        out, err = real.communicate(kwargs.get("input"), timeout=60)
    return forked, subprocess.CompletedProcess(args, real.returncode, out, err)


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "probe.py").write_text(PROBE)
    (tmp_path / "probe.py").write_text(PROBE)
    return tmp_path


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("how", ["-m", "script", "-c"])
def test_a_forked_child_sees_what_a_new_interpreter_sees(probe: Path, how: str, unbuffered: bool) -> None:
    command = {"-m": ["-m", "pkg.probe"], "script": [str(probe / "probe.py")], "-c": ["-c", PROBE]}[how]
    env = {**os.environ, "KQ_PROBE_VALUE": "1", "KQ_PROBE_EXIT": "3", "PYTHONPATH": str(probe)}
    env.pop("PYTHONUNBUFFERED", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if unbuffered:
        env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
    args = [sys.executable, *command, "an", "argument"]
    assert zygote.forkable(args, env, {})
    forked, real = _both(args, env=env, cwd=probe, input="from stdin")
    assert forked.returncode == real.returncode == 3, forked.stderr
    assert json.loads(forked.stdout) == json.loads(real.stdout)
    assert forked.stderr == real.stderr == ""


def test_a_forked_child_inherits_an_ignored_sigint_as_a_new_interpreter_does(probe: Path) -> None:
    """A test process whose SIGINT is ignored (a CI run a non-interactive shell started in the background): a new
    interpreter inherits SIG_IGN, and so must a forked child (it was given default_int_handler: CI run ci1 of
    issue 30 failed test_a_forked_child_sees_what_a_new_interpreter_sees six times so started)."""
    args = [sys.executable, "-c", PROBE]
    env = {**os.environ, "KQ_PROBE_VALUE": "1", "KQ_PROBE_EXIT": "3", "PYTHONPATH": str(probe)}
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forked, real = _both(args, env=env, cwd=probe, input="")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert json.loads(forked.stdout)["signals"] == json.loads(real.stdout)["signals"]
    assert json.loads(real.stdout)["signals"][0] == "1"  # SIG_IGN, inherited


def test_the_zygote_is_used_and_reports_signals_and_timeouts() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert isinstance(process, zygote.ZygotePopen) and process._use_zygote
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.01)
    assert process.poll() is None
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM
    assert process.poll() == -signal.SIGTERM


def test_what_a_fork_cannot_reproduce_gets_a_real_process() -> None:
    env = {**os.environ, "LD_PRELOAD": ""}
    assert not zygote.forkable([sys.executable, "-X", "dev", "-c", "pass"], None, {})
    assert not zygote.forkable(["/bin/true"], None, {})
    assert not zygote.forkable([sys.executable, "-c", "pass"], None, {"preexec_fn": print})
    process = subprocess.Popen([sys.executable, "-c", "pass"], env=env)  # a startup variable the zygote lacks
    assert process.wait(timeout=60) == 0 and not process._use_zygote


#: How a command may end, each compared with a new interpreter's ending: status, output and traceback.
ENDINGS = {
    "returns": "print('out', end='')",
    "exit-number": "import sys; print('out', end=''); sys.exit(4)",
    "exit-message": "import sys; sys.exit('a message')",
    "exit-none": "raise SystemExit",
    "exception": "def f():\n    raise ValueError('boom')\nf()",
    "keyboard-interrupt": "raise KeyboardInterrupt",
    "threads-then-atexit": (
        "import atexit, threading, time\n"
        "atexit.register(lambda: print(' atexit ran', end=''))\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread ended', end=''))).start()"
    ),
}


@pytest.mark.parametrize("how", ["-c", "script", "-m"])
@pytest.mark.parametrize("ending", ENDINGS)
def test_a_forked_child_ends_as_a_new_interpreter_does(tmp_path: Path, ending: str, how: str) -> None:
    """The child skips the interpreter's teardown of its modules (os._exit after the shutdown steps): its
    threads are waited for, its atexit callbacks run, its streams flushed, its status and traceback python's."""
    (tmp_path / "ends.py").write_text(ENDINGS[ending])
    command = {"-c": ["-c", ENDINGS[ending]], "script": [str(tmp_path / "ends.py")], "-m": ["-m", "ends"]}[how]
    args = [sys.executable, *command]
    forked, real = _both(args, cwd=tmp_path)
    assert forked.returncode == real.returncode, forked.stderr
    assert (forked.stdout, forked.stderr) == (real.stdout, real.stderr)
    if ending in ("exception", "keyboard-interrupt"):
        assert "Traceback" in forked.stderr
