"""Python subprocesses of the tests, forked from a process that has already imported Django and the drivers.

A test that starts ``sys.executable -m tests.faults.worker ...`` (or ``manage.py``, or ``-c``) used to pay for a
whole interpreter start: importing Django, the stores' drivers and pytest took about a second of CPU, two under
coverage, and the suite starts about a thousand such processes on a 2-core machine (issue 28). Here each pytest
process keeps one *zygote*: a Python process that imported those libraries once (not kinetis_queue, not the
settings: nothing that reads the environment) and forks a child per request. The child takes the request's
environment, working directory, standard streams, session and command line, starts coverage when asked
(``COVERAGE_PROCESS_CONFIG``, as a new interpreter would), then runs the command as ``python`` would: the
module as ``__main__``, the script, or the code. It ends as the interpreter's shutdown would, less the teardown
of every module (:func:`_exit_as_python`), and the zygote froze its heap out of the collector's view (``gc.freeze``):
tearing the inherited heap down cost each child 0.2 s.

The test process sees a ``subprocess.Popen`` (:class:`ZygotePopen`): the pid is the child's own, so signals go
straight to it, and the exit status comes back from the zygote, which is the child's parent, over the
request's connection. Only plain commands are forked: another interpreter, interpreter options (``-X``,
``-W``...), a different ``PYTHON*`` variable or ``LD_PRELOAD`` (libfaketime), ``preexec_fn``, ``pass_fds``, a
user or group: anything a fork could not reproduce starts a real process instead (:func:`forkable`).
``KQ_TESTS_ZYGOTE=0`` turns the zygote off.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import posix
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import Any

#: Modules the zygote imports before it forks: Django's own (none of which reads the settings on import), the
#: stores' drivers and the libraries the worker and the test modules it imports bring. Each one missing from
#: the venv (the core-only Django 5.2 venv has no redis, say) is skipped.
PRELOAD = (
    "django.apps",
    "django.conf",
    "django.urls",
    "django.http",
    "django.db.models",
    "django.db.backends.base.base",
    "django.db.backends.postgresql.base",
    "django.db.backends.sqlite3.base",
    "django.db.backends.mysql.base",
    "django.core.management",
    "django.core.management.base",
    "django.core.management.commands.check",
    "django.core.checks",
    "django.core.serializers.json",
    "django.core.handlers.wsgi",
    "django.forms",
    "django.template",
    "django.template.backends.django",
    "django.template.defaulttags",
    "django.template.defaultfilters",
    "django.test",
    "django.test.client",
    "django.views.generic",
    "django.contrib.auth.hashers",
    "django.contrib.admin.decorators",
    "django.utils.log",
    "asyncio",
    "psycopg",
    "MySQLdb",
    "redis",
    "redis.cluster",
    "redis.sentinel",
    "boto3",
    "botocore.session",
    "botocore.client",
    "amqp",
    "cronsim",
    "prometheus_client",
    "opentelemetry.trace",
    "opentelemetry.sdk.trace",
    "pytest",
    "jinja2",
    "coverage",
)

#: Environment variables read when an interpreter starts (or by the dynamic loader): a request that sets one of
#: them otherwise than the zygote's own environment gets a real process. The child applies those of _APPLIED.
_STARTUP_PREFIXES = ("PYTHON", "LD_", "FAKETIME")
_APPLIED = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"})
_SELF_ENV = "KQ_TESTS_ZYGOTE"


def _startup_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_STARTUP_PREFIXES) and k not in _APPLIED}


# ---- the zygote ------------------------------------------------------------------------------------------------


def main() -> None:
    """Run as ``python tests/support/zygote.py <socket path>`` (not as ``tests.support.zygote``: the zygote imports
    nothing of the checkout, so a child may find ``tests`` elsewhere on its own ``PYTHONPATH``)."""
    del sys.path[0]  # this file's directory
    request = _serve(sys.argv[1])  # returns only in a forked child
    _exit_as_python(_become(request))


def _preload() -> None:
    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # not installed in this venv
            importlib.import_module(name)
    from django.conf import settings

    if settings.configured or threading.active_count() != 1:  # nothing may have read the settings or started
        raise SystemExit("zygote: a preloaded module configured the settings or started a thread")
    # The preloaded objects leave the collector's view: a child's collections then skip them instead of walking
    # (and so copying, page by page) the whole inherited heap.
    gc.collect()
    gc.freeze()


class _Request:
    def __init__(self, conn: socket.socket, spec: dict[str, Any], fds: list[int]) -> None:
        self.conn, self.spec, self.fds = conn, spec, fds


_zygote_objects: list[Any] = []


def _serve(path: str) -> _Request:
    _preload()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pytest process ends the zygote, not a terminal's Ctrl-C
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    owner, _ = listener.accept()  # the pytest process: the zygote ends when it closes this connection
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(owner, selectors.EVENT_READ, "owner")
    _zygote_objects.extend([listener, owner, selector])
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    while True:
        for key, _ in selector.select():
            if key.data == "owner":
                return _exit_zygote(listener, children)
            if key.data == "accept":
                conn, _ = listener.accept()
                message, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 8)
                request = _Request(conn, json.loads(message), fds)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    for pidfd, (_pid, other) in children.items():
                        os.close(pidfd)
                        other.close()
                    return request
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, conn)
                selector.register(pidfd, selectors.EVENT_READ, "exit")
                conn.send(json.dumps({"pid": pid}).encode())
            else:  # a child ended: reap it and tell its Popen
                pidfd = key.fd
                pid, conn = children.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):
                    conn.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
                conn.close()


def _exit_zygote(listener: socket.socket, children: dict[int, tuple[int, socket.socket]]) -> Any:
    """The pytest process went away: its children live on (as a real Popen's would); nobody is left to tell."""
    import shutil

    shutil.rmtree(os.path.dirname(listener.getsockname()), ignore_errors=True)
    os._exit(0)


def _become(request: _Request) -> int | None:
    """In the forked child: take on the request's process state, then run its command as ``python`` would; the
    exit status ``python`` would give it (None: the end by SIGINT of an uncaught ``KeyboardInterrupt``)."""
    for obj in _zygote_objects:
        obj.close()
    request.conn.close()
    spec = request.spec
    for target, fd in zip((0, 1, 2), request.fds, strict=True):
        os.dup2(fd, target)
    for fd in set(request.fds):
        if fd > 2:
            os.close(fd)
    if spec["new_session"]:
        os.setsid()
    elif spec["process_group"] is not None and spec["process_group"] >= 0:
        os.setpgid(0, spec["process_group"])
    signal.signal(signal.SIGINT, signal.SIG_IGN if spec["sigint_ignored"] else signal.default_int_handler)
    if spec["cwd"] is not None:
        os.chdir(spec["cwd"])
    os.environ.clear()
    os.environ.update(spec["env"])
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    sys.pycache_prefix = os.environ.get("PYTHONPYCACHEPREFIX") or None
    _new_stdio(unbuffered=bool(os.environ.get("PYTHONUNBUFFERED")))
    argv: list[str] = spec["argv"]
    if argv[0] == "-c":
        first = ""
    elif argv[0] == "-m":
        first = os.getcwd()
    else:
        first = os.path.dirname(os.path.realpath(argv[0]))
    base = [p for p in sys.path[1:] if p not in spec["zygote_pythonpath"]]
    extra = [p for p in spec["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *[os.path.abspath(p) for p in extra], *base]
    importlib.invalidate_caches()
    if "COVERAGE_PROCESS_CONFIG" in os.environ:
        import coverage

        coverage.process_startup(force=True)
    import builtins
    import runpy
    import types

    # A fresh __main__ for the command: this module's globals stay this frame's.
    fresh = types.ModuleType("__main__")
    fresh.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = fresh
    try:
        if argv[0] == "-m":
            sys.argv = ["-m", *argv[2:]]
            runpy._run_module_as_main(argv[1])  # type: ignore[attr-defined]  # what `python -m` calls
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), fresh.__dict__)
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as stop:
        return _system_exit_status(stop.code)
    except KeyboardInterrupt as interrupt:
        _print_uncaught(interrupt, runpy_frames=argv[0] == "-m")
        return None
    except BaseException as uncaught:
        _print_uncaught(uncaught, runpy_frames=argv[0] == "-m")
        return 1
    return 0


def _print_uncaught(exc: BaseException, *, runpy_frames: bool) -> None:
    """The traceback ``python`` prints, from the command's first frame: none of this module's, and runpy's only
    where ``python -m`` shows them too."""
    import runpy

    skipped = {__file__} if runpy_frames else {__file__, "<frozen runpy>", runpy.__file__}
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in skipped:
        tb = tb.tb_next
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)  # python prints the exception's own traceback


def _system_exit_status(code: object) -> int:
    """What ``python`` exits with on an uncaught ``SystemExit(code)``: 0 for None, the number, or 1 after printing
    anything else to stderr."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def _exit_as_python(status: int | None) -> None:
    """End the child as the interpreter's shutdown would, less its teardown of every module: wait for the
    non-daemon threads, run the atexit callbacks (logging's flush, coverage's save), flush the standard
    streams, then exit. Tearing down the heap inherited from the zygote cost each child about 0.2 s of CPU.

    A ``KeyboardInterrupt`` that ended the command (None) ends the child by SIGINT, as ``python`` does."""
    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # as python: a stream that cannot be flushed makes the exit status 120
            status = 120 if status == 0 else status
    if status is None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        status = 130
    posix._exit(status & 0xFF)  # not os._exit, which coverage wraps to save again


def _new_stdio(*, unbuffered: bool) -> None:
    """Standard streams on the child's descriptors, buffered as a new interpreter's would be (``-u`` included)."""
    import io

    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        writes = fd != 0
        buffer: Any = (
            io.FileIO(fd, "w", closefd=False)
            if writes and unbuffered
            else open(fd, "wb" if writes else "rb", closefd=False)
        )
        stream = io.TextIOWrapper(
            buffer,
            encoding=old.encoding,
            errors=old.errors,
            newline="\n" if writes else None,
            line_buffering=writes and not unbuffered and (fd == 2 or os.isatty(fd)),
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


# ---- the test process's side -----------------------------------------------------------------------------------


class _Zygote:
    """This pytest process's zygote, started on first use."""

    _lock = threading.Lock()
    _instance: _Zygote | None = None

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="kq-zygote-")
        self.path = os.path.join(self.directory, "socket")
        # No coverage in the zygote (a child starts its own), and no settings module: a preloaded module that
        # read the settings would fail here rather than configure them for every child.
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_") and k != "DJANGO_SETTINGS_MODULE"
        }
        self.pythonpath = [os.path.abspath(p) for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
        log = open(os.path.join(self.directory, "zygote.log"), "wb")
        self.process = _REAL_POPEN(
            [sys.executable, os.path.abspath(__file__), self.path],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()
        self.owner = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        while True:
            try:
                self.owner.connect(self.path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if self.process.poll() is not None:
                    with open(os.path.join(self.directory, "zygote.log")) as failed:
                        raise RuntimeError(f"the test zygote failed to start:\n{failed.read()}") from None
                select.select([], [], [], 0.01)
        self.startup = _startup_env(self.env)

    @classmethod
    def get(cls) -> _Zygote:
        with cls._lock:
            if cls._instance is None or cls._instance.process.poll() is not None:
                cls._instance = cls()
            return cls._instance


def forkable(args: Any, env: Mapping[str, str] | None, kwargs: Mapping[str, Any]) -> bool:
    """Whether a fork of the zygote runs this command as a new interpreter would."""
    if os.environ.get(_SELF_ENV) == "0" or not isinstance(args, (list, tuple)) or len(args) < 2:
        return False
    if args[0] != sys.executable or any(kwargs.get(k) for k in ("shell", "executable", "preexec_fn", "pass_fds")):
        return False
    if any(kwargs.get(k) is not None for k in ("user", "group", "extra_groups")) or kwargs.get("umask", -1) != -1:
        return False
    if not kwargs.get("close_fds", True):
        return False
    first = str(args[1])
    if first in ("-m", "-c"):
        if len(args) < 3:
            return False
    elif first.startswith("-"):
        return False
    return True


_REAL_POPEN = subprocess.Popen


class ZygotePopen(subprocess.Popen):  # type: ignore[type-arg]
    """A ``subprocess.Popen`` whose Python child is forked by the zygote when :func:`forkable` says it can be."""

    _zygote_conn: socket.socket | None = None

    def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
        self._use_zygote = not rest and forkable(args, kwargs.get("env"), kwargs)
        super().__init__(args, *rest, **kwargs)

    def _execute_child(  # type: ignore[override]
        self,
        args: Sequence[str],
        executable: Any,
        preexec_fn: Any,
        close_fds: bool,
        pass_fds: Any,
        cwd: Any,
        env: Mapping[str, str] | None,
        startupinfo: Any,
        creationflags: Any,
        shell: bool,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *more: Any,
    ) -> None:
        full_env = dict(os.environ if env is None else env)
        zygote = _Zygote.get() if self._use_zygote else None
        if zygote is None or _startup_env(full_env) != zygote.startup:
            self._use_zygote = False
            super()._execute_child(
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags, shell,
                p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, *more,
            )  # fmt: skip
            return
        start_new_session, process_group = more[-2:]
        spec = {
            "argv": [str(a) for a in args[1:]],
            "cwd": None if cwd is None else os.fsdecode(cwd),
            "env": {os.fsdecode(k): os.fsdecode(v) for k, v in full_env.items()},
            "new_session": bool(start_new_session),
            "process_group": process_group,
            "zygote_pythonpath": zygote.pythonpath,
            # A new interpreter inherits an ignored SIGINT (a job a non-interactive shell put in the background);
            # any other disposition is reset by exec, and Python then installs default_int_handler.
            "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
        }
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1, errwrite if errwrite != -1 else 2]
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(zygote.path)
            socket.send_fds(conn, [json.dumps(spec).encode()], fds)
            reply = json.loads(conn.recv(1 << 16))
        except BaseException:
            conn.close()
            raise
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]
        self.pid = reply["pid"]
        self._child_created = True
        self._zygote_conn = conn

    def _status(self, timeout: float | None) -> int | None:
        conn = self._zygote_conn
        assert conn is not None
        ready, _, _ = select.select([conn], [], [], timeout)
        if not ready:
            return None
        message = conn.recv(1 << 16)
        conn.close()
        if not message:  # the zygote died: the child's status is lost with it
            return -signal.SIGKILL
        return int(json.loads(message)["exit"])

    def _internal_poll(self, _deadstate: Any = None, **_: Any) -> int | None:
        if not self._use_zygote:
            return super()._internal_poll(_deadstate)  # type: ignore[misc, no-any-return]
        if self.returncode is None and self._waitpid_lock.acquire(False):  # type: ignore[attr-defined]
            try:
                if self.returncode is None:
                    status = self._status(0)
                    if status is not None:
                        self.returncode = status
            finally:
                self._waitpid_lock.release()  # type: ignore[attr-defined]
        return self.returncode

    def _wait(self, timeout: float | None) -> int:
        if not self._use_zygote:
            return super()._wait(timeout)  # type: ignore[misc, no-any-return]
        if self.returncode is not None:
            return self.returncode
        with self._waitpid_lock:  # type: ignore[attr-defined]
            if self.returncode is None:
                status = self._status(timeout)
                if status is None:
                    raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
                self.returncode = status
        return self.returncode


def install() -> None:
    """Route this process's ``subprocess.Popen`` (and so ``subprocess.run``) through :class:`ZygotePopen`."""
    if os.environ.get(_SELF_ENV) != "0":
        subprocess.Popen = ZygotePopen  # type: ignore[misc]


if __name__ == "__main__":
    main()
