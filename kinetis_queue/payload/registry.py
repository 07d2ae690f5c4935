"""What a stored payload may name, and how a process learns it (DESIGN.md §2).

A payload names a job class, a queued receiver or a django.tasks task by its dotted path. The
worker resolves that name only among objects this process registered before the message arrived:

- discovery, at start-up (``KinetisQueueConfig.ready()``): the ``jobs`` and ``tasks`` module of
  every installed app, like the admin's autodiscovery, then each module listed in
  ``KINETIS_QUEUE["IMPORTS"]``;
- whatever the project's own code imported (a Job subclass registers itself when its class
  statement runs, a ``@queued_receiver`` when it decorates).

Resolution never imports a module, not even one inside an installed app: a module with import-time
effects (a script, a settings module) cannot be run by a payload that names it. A name that does
not resolve raises JobReconstructionError (the job's own failure under the contract) saying why:
its module failed to import at discovery, was never imported in this process, has no such
attribute, or holds something that is not a job class / queued receiver / task.

A discovery module that fails to import does not stop Django's start-up: the failure is kept with
its real exception, reported by ``manage.py check`` (kinetis_queue.E004) and refused by
``queue_work``. An app without such a module is not a failure; an ImportError raised inside one is.
"""

from __future__ import annotations

import importlib
import sys
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from django.apps import apps
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import module_has_submodule

from kinetis_queue import conf
from kinetis_queue.exceptions import (
    JobReconstructionError,
    QueueConfigurationError,
    UnresolvableJobParameterError,
    UnrunnableJobError,
)
from kinetis_queue.job import Job, _handle_plan, job_class_path

#: The submodule of each installed app that discovery imports.
DISCOVERED_SUBMODULES: Final = ("jobs", "tasks")

#: kinetis_queue's own app is not discovered: its modules are imported as it needs them.
_OWN_APP: Final = "kinetis_queue"


@dataclass(frozen=True)
class DiscoveryFailure:
    """A discovery module whose import raised: the module's name and the real exception."""

    module: str
    error: Exception

    def __str__(self) -> str:
        return f"module {self.module!r} failed to import: {type(self.error).__name__}: {self.error}"


#: Every discovery module this process has tried, by name: None once imported, else its failure.
#: A module is tried once: importing a broken one again would rerun its import-time effects.
_attempted: dict[str, DiscoveryFailure | None] = {}
_lock = threading.Lock()


def discovery_modules() -> list[str]:
    """The names discovery imports: each installed app's existing ``jobs``/``tasks`` module, then IMPORTS.

    An invalid IMPORTS is left out here; ``manage.py check`` reports it as kinetis_queue.E001.
    """
    names: list[str] = []
    for config in apps.get_app_configs():
        if config.name == _OWN_APP:
            continue
        for submodule in DISCOVERED_SUBMODULES:
            if module_has_submodule(config.module, submodule):
                names.append(f"{config.name}.{submodule}")
    try:
        names.extend(name for name in conf.imports() if name not in names)
    except QueueConfigurationError:
        pass
    return names


def discover() -> list[DiscoveryFailure]:
    """Import every discovery module not tried yet; return the failures among the current ones.

    Each failure keeps the exception its import raised (a missing IMPORTS module included), and is
    reported, never raised: Django's start-up goes on, ``check`` and ``queue_work`` report it.
    """
    names = discovery_modules()
    with _lock:
        for name in names:
            if name in _attempted:
                continue
            try:
                importlib.import_module(name)
            except Exception as exc:
                _attempted[name] = DiscoveryFailure(name, exc)
            else:
                _attempted[name] = None
        return [failure for name in names if (failure := _attempted.get(name)) is not None]


def discoverable(module: str) -> bool:
    """Whether discovery imports ``module``: an installed app's jobs or tasks module, or an IMPORTS entry.

    The enqueue-time test for a django.tasks task: what passes it, a worker with the same settings
    has imported before its first message (or reports the module's failure).
    """
    for config in apps.get_app_configs():
        if config.name != _OWN_APP and module in (f"{config.name}.{sub}" for sub in DISCOVERED_SUBMODULES):
            return True
    try:
        return module in conf.imports()
    except QueueConfigurationError:
        return False


def discovered() -> frozenset[str]:
    """The current discovery modules (under today's settings) this process imported successfully."""
    return frozenset(name for name in discovery_modules() if name in _attempted and _attempted[name] is None)


# -- resolution ------------------------------------------------------------------------------------


def resolve_job_class(path: str) -> type[Job]:
    """The Job subclass registered as ``path``; raises JobReconstructionError saying why it is not."""
    cls = Job._registry.get(path)
    if cls is not None:
        return cls
    raise JobReconstructionError(f"job class {path!r} cannot be resolved: {why_unresolved(path, 'a Job subclass')}")


def why_unresolved(path: str, kind: str) -> str:
    """Why ``path`` names no registered ``kind``: from what this process knows, importing nothing.

    The reason every resolver gives (job classes here; queued receivers and tasks in contrib/).
    """
    for name, failure in list(_attempted.items()):
        if failure is not None and (path == name or path.startswith(name + ".")):
            return f"its module {name!r} failed to import at start-up ({type(failure.error).__name__}: {failure.error})"
    module, rest = _imported_prefix(path)
    if module is None or (len(rest) > 1 and hasattr(module, "__path__") and rest[0] not in vars(module)):
        # Nothing imported, or an imported package without the submodule: the module was never imported.
        return (
            f"its module {path.rpartition('.')[0] or path!r} was never imported in this process. A worker "
            f"imports nothing a payload names: it knows the {' and '.join(DISCOVERED_SUBMODULES)} modules "
            "of INSTALLED_APPS, the modules listed in KINETIS_QUEUE['IMPORTS'] (list it there) and what "
            "those and the project import at start-up"
        )
    if not rest:
        return f"it is a module, not {kind}"
    if _walk(module, rest) is MISSING:
        return f"module {module.__name__!r} has no attribute {'.'.join(rest)!r}"
    return f"it is not {kind}"


#: What lookup() returns when ``path`` names nothing in an imported module.
MISSING: Final = object()


def _imported_prefix(path: str) -> tuple[ModuleType | None, list[str]]:
    """The longest dotted prefix of ``path`` that is an imported module, and the remaining names."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if isinstance(module, ModuleType):
            return module, parts[cut:]
    return None, parts


def _walk(start: object, names: list[str]) -> object:
    """Follow ``names`` through namespaces' own dictionaries: no ``__getattr__``, so no lazy import runs."""
    found = start
    for name in names:
        try:
            namespace = vars(found)
        except TypeError:
            return MISSING
        found = namespace.get(name, MISSING)
        if found is MISSING:
            return MISSING
    return found


def lookup(path: str) -> object:
    """The object ``path`` names in an already imported module, or MISSING; imports nothing."""
    module, rest = _imported_prefix(path)
    if module is None or not rest:
        return MISSING
    return _walk(module, rest)


def reachable(cls: type) -> bool:
    """Whether ``cls`` is found under its dotted path in its already imported module (as a worker would)."""
    return lookup(f"{cls.__module__}.{cls.__qualname__}") is cls


# -- what push() accepts -----------------------------------------------------------------------------

#: Per job class: why no worker could run it, or None. Checked once per class: push is a hot path.
_runnable: dict[type, str | None] = {}


def ensure_runnable(cls: type[Job]) -> None:
    """Raise UnrunnableJobError, naming the class, when no worker could run a job of ``cls``."""
    try:
        problem = _runnable[cls]
    except KeyError:
        problem = _runnable[cls] = runnable_problem(cls)
    if problem is not None:
        raise UnrunnableJobError(problem)


def forget_runnable() -> None:
    """Drop the per-class verdicts: a changed KINETIS_QUEUE["IMPORTS"] changes what a worker imports."""
    _runnable.clear()


@receiver(setting_changed)
def _forget_on_setting_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "KINETIS_QUEUE":
        forget_runnable()


def runnable_problem(cls: type[Job], *, discovery: bool = True) -> str | None:
    """Why a worker could not run a job of ``cls`` (never a value), or None.

    A worker finds the class by its dotted path among what it imported at start-up, so the class
    must live at module level in a discovery module (``discoverable``: an installed app's jobs or
    tasks module, or one listed in IMPORTS; not ``__main__`` or the shell); it must define
    ``handle()``, and each ``handle()`` parameter must be one the worker can pass (annotated JobContext).
    ``discovery=False`` leaves the discovery module out (a caller that says it in its own words).
    """
    path = job_class_path(cls)
    if cls.__module__ == "__main__":
        return (
            f"{path}: the class is defined in __main__ (a script or the shell), which a worker cannot "
            "import; define it in a module, such as <app>/jobs.py"
        )
    if "<locals>" in cls.__qualname__:
        return f"{path}: the class is defined inside a function; a worker can only find a module-level class"
    if not reachable(cls):
        return (
            f"{path}: the class is not found under that name in an importable module (defined in the "
            "shell, or created dynamically?); a worker finds a job class only by its dotted path"
        )
    if cls.handle is Job.handle:
        return f"{path} defines no handle(), so a worker has nothing to run"
    try:
        _handle_plan(cls)
    except UnresolvableJobParameterError as exc:
        return str(exc)
    if discovery and not discoverable(cls.__module__) and not cls.__module__.startswith(_OWN_APP + "."):
        return (
            f"{path}: its module {cls.__module__!r} is not one a worker imports at start-up, so no worker "
            "could find the class; define it in an installed app's jobs or tasks module, or list its "
            "module in KINETIS_QUEUE['IMPORTS']"
        )
    return None


# -- names operators see ------------------------------------------------------------------------------

#: What metrics and the history call a job whose name this process does not know (known_name()): a
#: payload chooses the name it carries, and each new one would be a new series and new rows for good.
UNKNOWN_NAME: Final = "(unknown)"


def known_name(name: str) -> bool:
    """Whether ``name`` is registered in this process: a Job class, a queued receiver, or a django.tasks
    Task in an imported module (what the worker can resolve). Imports nothing."""
    if name in Job._registry:
        return True
    receivers = sys.modules.get("kinetis_queue.contrib.receivers")
    if receivers is not None and name in receivers._RECEIVERS:
        return True
    compat = sys.modules.get("kinetis_queue.contrib.tasks.compat")
    return compat is not None and isinstance(lookup(name), compat.Task)


def name_label(name: str) -> str:
    """``name`` when known_name(), else UNKNOWN_NAME: the bounded set of names a metric or history row carries."""
    return name if known_name(name) else UNKNOWN_NAME
