"""Health: a connection is healthy when its store answers and a worker of it was seen recently.

``queue_health`` (exit 0 / 1 with the reason) and the JSON view for load balancers and Kubernetes
probes (kinetis_queue/observability/views.py) both ask ``check()``. The store's answer is
queue_status' own reading (kinetis_queue/observability/status.py); "recently" is the worker registry's GONE_AFTER.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kinetis_queue.observability import status
from kinetis_queue.observability.registry import ready_jobs, workers

#: The reason codes a failing connection is reported with: stable words a probe or an alert may match,
#: shown to any caller of the health view, where the problems' text (a store's error names its host,
#: port and user) is shown only to a trusted one.
STORE_UNREACHABLE = "store_unreachable"
NO_WORKER = "no_worker"
WORKERS_STALLED = "workers_stalled"


@dataclass(frozen=True)
class ConnectionHealth:
    connection: str
    #: The store answered queue_status' reading.
    answers: bool
    #: Live (or stalled) workers of the connection in the registry.
    workers: int
    stalled: int
    problems: list[str] = field(default_factory=list)
    #: One reason code per problem, in the same order.
    reasons: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class Health:
    connections: list[ConnectionHealth]

    @property
    def healthy(self) -> bool:
        return all(c.healthy for c in self.connections)

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.healthy else "failing",
            "connections": [
                {
                    "connection": c.connection,
                    "healthy": c.healthy,
                    "answers": c.answers,
                    "workers": c.workers,
                    "stalled": c.stalled,
                    "problems": c.problems,
                    "reasons": c.reasons,
                }
                for c in self.connections
            ],
        }


def check(connection: str | None = None, *, require_worker: bool = True) -> Health:
    """Each connection (or the one named): does its store answer, and is a worker of it alive?"""
    figures = status.collect(connection)
    registry = workers(connection, ready=ready_jobs(figures))
    result = []
    for figure in figures:
        mine = [w for w in registry if w.connection == figure.connection and w.state != "gone"]
        stalled = [w for w in mine if w.state == "stalled"]
        problems, reasons = [], []
        if figure.error is not None:
            problems.append(f"the store does not answer: {figure.error}")
            reasons.append(STORE_UNREACHABLE)
        if require_worker and not mine:
            problems.append("no worker of this connection was seen in the last 15 seconds")
            reasons.append(NO_WORKER)
        if stalled:
            problems.append(
                f"{len(stalled)} worker(s) with a free slot took no job for a minute while their queues "
                "(not paused) hold ready jobs"
            )
            reasons.append(WORKERS_STALLED)
        result.append(
            ConnectionHealth(figure.connection, figure.error is None, len(mine), len(stalled), problems, reasons)
        )
    return Health(result)
