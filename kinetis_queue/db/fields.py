"""Model fields the app's models share, in a leaf module: the models of every feature import them from here,
not from kinetis_queue.models, which imports those models (one hub, no circle)."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper


class ExactCharField(models.CharField):  # type: ignore[type-arg]
    """A CharField compared byte for byte: ``ascii_bin`` on MySQL/MariaDB, whose default is case-insensitive.

    Queue names and reservation tokens are matched for exact equality (DESIGN.md §7); PostgreSQL
    and SQLite already compare text case-sensitively.
    """

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        params = super().db_parameters(connection)
        if connection.vendor == "mysql":
            params["collation"] = "ascii_bin"
        return params
