"""The import arrows of issue 13: Django glue and contrib -> worker -> contract <- backends.

Every module of kinetis_queue is parsed with ``ast`` (nothing is imported) and each ``import`` in it,
at module level or inside a function (a lazy import is still an arrow), is checked against the map
below. An import under ``if TYPE_CHECKING:`` is an arrow too, with one allowance: the contract's
display functions may name the model they take (``kinetis_queue.models``) for type checking only.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import kinetis_queue
from tests.support import import_graph

PACKAGE = Path(kinetis_queue.__file__).resolve().parent

#: The contract: what every backend and the worker build on. Each names no module outside this set.
CONTRACT = {
    "kinetis_queue.contracts": "the Queue template: the shared rules run once before each backend's primitive",
    "kinetis_queue.job": "Job, JobContext, Sensitive: what a job is and how handle() is called",
    "kinetis_queue.payload.envelope": "the stored wire format and its strict decoder",
    "kinetis_queue.payload.serializer": "the argument contract: job arguments to JSON and back",
    "kinetis_queue.values": "typed values in job arguments: the registry of value types and its codecs",
    "kinetis_queue.validation": "queue names, limits and the ceilings defined once",
    "kinetis_queue.exceptions": "the errors the contract names",
    "kinetis_queue.schema": "how a backend declares its option schema",
    "kinetis_queue.conf": "the connection settings every backend is built from",
    "kinetis_queue.payload.registry": "what a payload may name (DESIGN.md §2), checked by push",
    "kinetis_queue.payload.redaction": "what Sensitive hides, wherever a job is shown",
    "kinetis_queue.signals": "the outcome signals the contract's observers receive",
    "kinetis_queue.crashpoints": "the named points where a fault test crashes a backend or the worker",
    "kinetis_queue.unique.store": "unique jobs' capability: the lock a push carries and the store backends implement",
    "kinetis_queue.limits.store": "concurrency limits' capability: a slot, its key and the store backends implement",
    "kinetis_queue.ratelimits.store": "rate limits' capability: a limit, its key's digest and the store",
    "kinetis_queue.outbox": "the transactional outbox: its middleware and what it asks of a connection's outbox",
    "kinetis_queue.middleware": "the extension API: Middleware, the push chain and the MIDDLEWARE registry",
    "kinetis_queue.hooks": "what the Django glue plugs into a worker around each delivery (pausing, cancelling)",
    "kinetis_queue.priority": "job priority within a queue: its range and where the envelope carries it",
    "kinetis_queue.outcomes": "how a delivery ends and the markers raised in place of an attempt (a leaf)",
}

#: Type-only imports a contract module may make (the records its display functions take).
CONTRACT_TYPE_ONLY = {"kinetis_queue.models"}

#: The plug-in points: imports of the package's own modules made inside a function on purpose, each because the
#: module imported needs Django's app registry (its models) and is loaded at its first use, once the app is.
PLUG_IN_POINTS = {
    ("kinetis_queue.limits", "kinetis_queue.limits.database"): "the slot store in a Django database",
    ("kinetis_queue.unique", "kinetis_queue.unique.database"): "the lock store in a Django database",
    ("kinetis_queue.ratelimits", "kinetis_queue.ratelimits.database"): "the rate store in a Django database",
}


def plug_in_point(arrow: import_graph.Arrow) -> bool:
    return arrow.in_function and (arrow.source, arrow.target) in PLUG_IN_POINTS


#: The worker: one delivery's lifecycle and what it writes. It knows the contract and the models
#: it records into, never the Django glue above it, contrib, or a particular backend.
WORKER = {
    "kinetis_queue.worker": "the worker's room: its public names (Worker, ExitReason, JobReport)",
    "kinetis_queue.worker.worker": "the delivery lifecycle",
    "kinetis_queue.worker.background": "the loops that run in daemon threads beside the jobs",
    "kinetis_queue.worker.settlement": "the one transition per delivery",
    "kinetis_queue.worker.heartbeat": "reservation renewal",
    "kinetis_queue.worker.hygiene": "Django connection hygiene around each job",
    "kinetis_queue.worker.job_timeout": "the hard limit on one attempt",
    "kinetis_queue.worker.run_limits": "when Worker.run() stops on its own",
    "kinetis_queue.worker.log": "how log lines name a job",
    "kinetis_queue.failed": "the failed-job record written before fail()",
    "kinetis_queue.worker.restart": "the restart marker a worker watches",
    "kinetis_queue.worker.supervisor": "queue_work --processes N",
    "kinetis_queue.worker.delivery": "one delivery from its attempt to its report",
    "kinetis_queue.worker.dispatcher": "run()'s reserving loop and its --concurrency slots",
    "kinetis_queue.worker.acks": "successful acks sent with ack_many()",
    "kinetis_queue.worker.timeout_watchdog": "the hard limit on one attempt in a pool thread",
    "kinetis_queue.worker.async_loop": "the event loop async jobs run on",
    "kinetis_queue.limits.keeper": "a delivery's concurrency slot: taken, renewed, given back",
}

#: What sits above the worker (Django glue, contrib) or beside the contract (backends).
ABOVE_THE_WORKER = (
    "kinetis_queue.admin",
    "kinetis_queue.apps",
    "kinetis_queue.backends",
    "kinetis_queue.conf.checks",
    "kinetis_queue.contrib",
    "kinetis_queue.control",
    "kinetis_queue.dashboard",
    "kinetis_queue.management",
    "kinetis_queue.observability.views",
    "kinetis_queue.schedules.admin",
    "kinetis_queue.observability.status",
    "kinetis_queue.tasks",
    "kinetis_queue.templatetags",
    "kinetis_queue.workflows.admin",
)

#: Core modules that may import kinetis_queue.contrib, each for a place Django looks for it.
CONTRIB_ENTRY_POINTS = {
    "kinetis_queue.tasks": "the path Django's TASKS setting names (re-exports KinetisTaskBackend)",
    "kinetis_queue.apps": "ready() registers contrib's carrier jobs before any message arrives",
    "kinetis_queue.models": "TaskResultRecord is a model of the kinetis_queue app (migration 0002)",
    "kinetis_queue.management.commands.queue_prune_task_results": "Django finds commands only in the app",
}

#: Django's ORM: no contract module imports it (the models, the SQL backend and the glue above the
#: contract do).
ORM = "django.db"


def module_name(path: Path) -> str:
    return import_graph.module_name(path, PACKAGE.parent)


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def backend_of(module: str) -> str | None:
    """The backend a module belongs to: the package or module right under kinetis_queue.backends."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["kinetis_queue", "backends"] else None


ARROWS = import_graph.all_arrows(PACKAGE)
#: Per module, the imports it makes when it is imported (neither inside a function nor for type checking only).
AT_IMPORT: dict[str, list[import_graph.Arrow]] = {}
for _arrow in ARROWS:
    if not (_arrow.in_function or _arrow.type_only):
        AT_IMPORT.setdefault(_arrow.source, []).append(_arrow)


def test_the_map_names_existing_modules() -> None:
    """A renamed module must not leave the map silently checking nothing."""
    modules = {module_name(path) for path in PACKAGE.rglob("*.py")}
    assert set(CONTRACT) | set(WORKER) | set(CONTRIB_ENTRY_POINTS) <= modules
    assert {arrow.source for arrow in ARROWS} >= set(CONTRACT)


def test_no_backend_imports_another() -> None:
    crossing = [
        str(a)
        for a in ARROWS
        if backend_of(a.source) and backend_of(a.target) and backend_of(a.source) != backend_of(a.target)
    ]
    assert crossing == []


def test_backends_import_only_the_contract_and_themselves() -> None:
    """contract <- backends: a backend knows the contract and its own package, nothing above them."""
    upward = [
        str(a)
        for a in ARROWS
        if backend_of(a.source)
        and within(a.target, "kinetis_queue")
        and not (a.target in CONTRACT or backend_of(a.target) == backend_of(a.source))
    ]
    assert upward == []


@pytest.mark.parametrize("module", sorted(CONTRACT))
def test_the_contract_imports_only_the_contract(module: str) -> None:
    """worker -> contract <- backends: nothing of the worker, settlement, admin, commands, contrib or
    backends (nor any other module above the contract) is imported by a contract module."""
    outside = [
        str(a)
        for a in ARROWS
        if a.source == module
        and within(a.target, "kinetis_queue")
        and a.target != "kinetis_queue"
        and a.target not in CONTRACT
        and not (a.type_only and a.target in CONTRACT_TYPE_ONLY)
        and not plug_in_point(a)
    ]
    assert outside == []


#: The features built on the contract (issue 29): each plugs into it as a middleware (kinetis_queue.middleware) and
#: declares the capability it asks of a store, so the Queue's own module imports none of them.
FEATURES = (
    "kinetis_queue.unique",
    "kinetis_queue.limits",
    "kinetis_queue.outbox",
    "kinetis_queue.control",
    "kinetis_queue.workflows",
    "kinetis_queue.observability",
    "kinetis_queue.schedules",
    "kinetis_queue.hooks",
)


def test_the_queue_imports_no_feature() -> None:
    """contracts.py knows no feature: unique jobs, limits, the outbox, control, workflows and observability reach
    a push or a delivery through the middleware chain, and a store's part in them through a capability."""
    found = [
        str(a)
        for a in ARROWS
        if a.source == "kinetis_queue.contracts" and any(within(a.target, feature) for feature in FEATURES)
    ]
    assert found == []


@pytest.mark.parametrize("module", sorted(CONTRACT))
def test_the_contract_never_imports_the_orm(module: str) -> None:
    """Only the models and the SQL backend (and the Django glue above the contract) talk to django.db."""
    assert [str(a) for a in ARROWS if a.source == module and within(a.target, ORM)] == []


@pytest.mark.parametrize("module", sorted(WORKER))
def test_the_worker_imports_nothing_above_it(module: str) -> None:
    """Django glue and contrib -> worker: the worker never imports them, nor a particular backend."""
    upward = [str(a) for a in ARROWS if a.source == module and any(within(a.target, p) for p in ABOVE_THE_WORKER)]
    assert upward == []


def test_contrib_is_imported_only_through_its_entry_points() -> None:
    """The core does not depend on contrib/ except where Django looks for an integration."""
    inward = [
        str(a)
        for a in ARROWS
        if within(a.target, "kinetis_queue.contrib")
        and not within(a.source, "kinetis_queue.contrib")
        and a.source not in CONTRIB_ENTRY_POINTS
    ]
    assert inward == []


def test_the_arrows_are_read() -> None:
    """The parser sees the imports the rules are about (else every rule above would pass vacuously)."""
    shown = {str(a) for a in ARROWS}
    assert "kinetis_queue.backends.sync -> kinetis_queue.contracts" in shown
    assert "kinetis_queue.tasks -> kinetis_queue.contrib.tasks.backend" in shown
    assert "kinetis_queue.payload.redaction -> kinetis_queue.models (type only)" in shown
    assert "kinetis_queue.backends.sql.queue -> django.db" in shown
    assert "kinetis_queue.apps -> kinetis_queue.contrib.tasks.backend" in shown  # by importlib.import_module


def test_the_outcome_markers_live_in_one_leaf_module() -> None:
    """Issue 29: how a delivery ends and the markers raised in place of its attempt (skipped, deferred) are
    defined once, in kinetis_queue.outcomes, which imports nothing of the package; their old homes re-export
    them."""
    from kinetis_queue import hooks, limits, outcomes, unique

    assert [a for a in ARROWS if a.source == "kinetis_queue.outcomes" and within(a.target, "kinetis_queue")] == []
    for marker in (outcomes.SkipDelivery, outcomes.AtLimit):
        assert marker.__module__ == "kinetis_queue.outcomes"
    assert hooks.SkipDelivery is outcomes.SkipDelivery and limits.AtLimit is outcomes.AtLimit
    assert issubclass(unique.Superseded, outcomes.SkipDelivery)


#: The modules that stay at the top of kinetis_queue/ (issue 29: at most 20), each for a reason: where Django
#: looks for it, or a documented import path of users' code. Everything else lives in a room (a package).
TOP_LEVEL = {
    "apps": "Django's AppConfig",
    "models": "Django's models of the app",
    "urls": "the URLconf users include",
    "tasks": "the path Django's TASKS setting names",
    "signals": "DESIGN.md: kinetis_queue.signals",
    "exceptions": "DESIGN.md: kinetis_queue.exceptions",
    "contracts": "the Queue a backend implements (docs: writing a backend)",
    "job": "Job, JobContext, Sensitive",
    "schema": "how a backend declares its options (docs: writing a backend)",
    "middleware": "the extension API (docs/middleware.md)",
    "hooks": "DeliveryHooks, the delivery side of a middleware",
    "dispatch": "push_on_commit and the push entry points",
    "values": "register_value (docs: job arguments)",
    "outcomes": "the outcome markers, a leaf the contract raises",
    "priority": "job priority (docs)",
    "validation": "the ceilings and checks of the contract",
    "connections": "queues[name] and queue",
    "crashpoints": "the fault tests' named crash points, reached by backends and the worker",
    "failed": "list_failed(), retry(), forget() (docs/failed-jobs.md)",
}


def test_at_most_twenty_modules_at_the_top() -> None:
    """The layout shows the architecture: the worker's modules in kinetis_queue/worker/, the stored form of a
    job in payload/, the admin pages in admin/, the settings and their checks in conf/, each backend and each
    feature in its package."""
    top = {path.stem for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    assert top == set(TOP_LEVEL) and len(top) <= 20


#: The modules that start a thread of their own rather than a BackgroundLoop (kinetis_queue/worker/background.py),
#: each for a reason: every loop beside the jobs is a BackgroundLoop (issue 29: one loop type).
OWN_THREADS = {
    "kinetis_queue.worker.background": "the loop type itself",
    "kinetis_queue.worker.dispatcher": "the --concurrency slots: each thread runs jobs, not rounds",
    "kinetis_queue.worker.async_loop": "asyncio's own loop (run_forever) for async def handle()",
    "kinetis_queue.contrib.tasks.backend": "one get_result() wait, bounded by its timeout",
    "kinetis_queue.management.commands.queue_work": "one note printed when the reloader is ready",
    "kinetis_queue.management.commands._reload": "Django's autoreloader drives its own ticker",
    "kinetis_queue.backends.sql.timeouts": "the SQL backend's socket deadlines: a backend imports no worker module",
}


def test_every_loop_beside_the_jobs_is_a_background_loop() -> None:
    """No hand-written loop thread: a module that calls threading.Thread() is named in OWN_THREADS with why."""
    starting = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Thread":
                if isinstance(node.func.value, ast.Name) and node.func.value.id == "threading":
                    starting.add(module_name(path))
    assert starting == set(OWN_THREADS)


@functools.cache
def loads_models(module: str) -> bool:
    """Whether importing ``module`` loads a models module: it is one, or one of its imports made at import time
    (followed through the package) does. Such a module cannot be imported before Django's app registry is ready."""
    seen: set[str] = set()
    waiting = [module]
    while waiting:
        current = waiting.pop()
        if current == "kinetis_queue.models" or current.endswith(".models"):
            return True
        if current not in seen:
            seen.add(current)
            waiting.extend(a.target for a in AT_IMPORT.get(current, ()) if within(a.target, "kinetis_queue"))
    return False


def in_function_kind(arrow: import_graph.Arrow) -> str | None:
    """Why an import of the package's own modules may sit inside a function, by kind; None: no reason known."""
    if plug_in_point(arrow):
        return "a plug-in point (PLUG_IN_POINTS)"
    if arrow.source == "kinetis_queue.apps":
        return "the app's ready(): Django's place for what loads once the app registry is"
    if loads_models(arrow.target) and not loads_models(arrow.source):
        return (
            "a module that loads models at import time, reached from a module that loads before Django's app registry"
        )
    if arrow.source.count(".") == 2 and within(arrow.source, "kinetis_queue.backends"):
        if within(arrow.target, arrow.source):
            return "a lazy backend package: its client library loads when a connection is built"
    if arrow.target == "kinetis_queue.observability.tracing":
        return "OpenTelemetry, an optional extra"
    if backend_of(arrow.target) in OPTIONAL_BACKENDS and backend_of(arrow.source) is None:
        return "a backend whose client library is an optional extra, reached only for a queue of that backend"
    return None


#: The backends whose client library is an extra (pyproject.toml): the core installs with Django alone.
OPTIONAL_BACKENDS = {"redis", "sqs", "rabbitmq"}


def test_an_import_inside_a_function_has_a_named_reason() -> None:
    """Issue 29 item 6: an import of the package's own modules made inside a function is of a named kind
    (in_function_kind): none is there to keep two modules that import each other from breaking the import."""
    unnamed = sorted(
        str(a) for a in ARROWS if a.in_function and within(a.target, "kinetis_queue") and in_function_kind(a) is None
    )
    assert unnamed == []


def test_no_import_circle_even_inside_functions() -> None:
    """Issue 29 item 6: no two modules import each other, at import time or when a function runs (a circle
    hidden inside a function is still a circle: the two cannot be read or changed apart)."""
    assert import_graph.figures(PACKAGE).circles == []


def test_no_import_circle_at_import_time() -> None:
    """Issue 29: the models hub and the admin hub were circles at import time (each feature's models imported a
    field from kinetis_queue.models, which imports them; each feature's admin imported from kinetis_queue.admin,
    which imports them). What they share now lives in leaf modules (db/fields.py, admin/pages.py)."""
    assert import_graph.figures(PACKAGE).import_time_circles == []


def test_the_figures_of_a_small_package(tmp_path: Path) -> None:
    """tests/support/import_graph.py's figures (issue 29's before and after) on a package whose answers are known:
    a imports b at import time, b imports a inside a function (one circle, not at import time, one upward and one
    in-function import), c imports a for type checking only (no circle)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from pkg import a\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    (package / "d.py").write_text("import pkg.c\n")
    found = import_graph.figures(package)
    assert (found.modules, found.top_level, found.layers) == (5, 4, 2)
    assert [str(a) for a in found.upward] == ["pkg.b -> pkg.a"]
    assert found.circles == [["pkg.a", "pkg.b"]] and found.import_time_circles == []
    assert found.circles_with_types == [["pkg.a", "pkg.b"]]
    assert [str(a) for a in found.in_function] == ["pkg.b -> pkg.a"]
