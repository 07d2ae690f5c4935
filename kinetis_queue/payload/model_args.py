"""Model instances as job arguments: stored as a reference (model label, primary key, database alias)
and fetched again on the worker, as Laravel's SerializesModels does (docs/job-arguments.md).

A parameter annotated with a model class (``user: User``, ``User | None``, or an abstract base class
of the models it accepts) takes a saved instance of that class or a subclass. The generic
``models.Model`` is refused (``Unusable``: at push, by the worker and by ``manage.py check``): a payload
could otherwise name any installed model's row. The worker looks the label up among the installed
models only (nothing is imported), accepts it only if it is the annotated model or a subclass, fetches
the row from the alias the instance was saved to or loaded from with the model's base manager, and
fails the job at once, naming the model and key, when the row is gone. QuerySets are refused at push.
Installed by ``KinetisQueueConfig.ready()``.
"""

from __future__ import annotations

from typing import Any, Final

from django.apps import apps
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.db import connections, models

from kinetis_queue import values
from kinetis_queue.values import Malformed, Missing, Rejected, Unusable

#: The keys of a stored model reference, exactly.
REFERENCE_KEYS: Final = frozenset(("model", "pk", "db"))
#: The longest primary key string a reference may carry (a reference is not a place for data).
MAX_KEY_LENGTH: Final = 1000


class ModelCodec:
    """Stores a saved instance of ``model`` (or of a subclass) as ``{"model", "pk", "db"}``."""

    __slots__ = ("model", "name")

    def __init__(self, model: type[models.Model]) -> None:
        if model is models.Model:
            raise Unusable(
                "is annotated with the generic models.Model, which would let a stored payload load a row of any "
                "installed model (auth.User's password hashes included): annotate the model class the job takes, "
                "or the base class of the models it accepts"
            )
        self.model = model
        self.name = model._meta.label

    def encode(self, value: Any) -> Any:
        if not isinstance(value, self.model) or isinstance(value, type):
            explained = _explain(value)
            if explained is not None and not isinstance(value, models.Model):
                raise Rejected(explained)
            raise Rejected(
                f"the annotation stores an instance of {self.name}, so a {type(value).__qualname__} is not allowed"
            )
        label = value._meta.label
        if value._state.adding or value.pk is None:
            raise Rejected(f"the {label} instance is unsaved, so the worker could not fetch it: save it before pushing")
        if value._meta.abstract:  # pragma: no cover - Django refuses to instantiate an abstract model
            raise Rejected(f"{label} is abstract")
        return {"model": value._meta.label_lower, "pk": _key_data(value), "db": value._state.db or "default"}

    def decode(self, stored: Any) -> Any:
        if type(stored) is not dict or stored.keys() != REFERENCE_KEYS:
            raise Malformed("is not a model reference (an object of exactly model, pk and db)")
        label, key, alias = stored["model"], stored["pk"], stored["db"]
        if type(label) is not str or label.count(".") != 1 or not all(p.isidentifier() for p in label.split(".")):
            raise Malformed("names a model that is not an app_label.model_name label")
        try:
            model = apps.get_model(label)  # installed models only: a label never causes an import
        except LookupError:
            raise Malformed(f"names model {label!r}, which is not installed in this process") from None
        if not issubclass(model, self.model):
            raise Malformed(f"names model {model._meta.label}, which is not {self.name} or a subclass of it")
        if type(alias) is not str or alias not in connections.settings:
            raise Malformed(f"names database {str(alias)[:60]!r}, which this process's DATABASES does not define")
        pk = _key_value(model, key)
        try:
            return model._base_manager.db_manager(alias).get(pk=pk)
        except ObjectDoesNotExist:  # the model's DoesNotExist
            raise Missing(model._meta.label, _shown_key(key)) from None


def _pk_fields(model: type[models.Model]) -> list[Any] | None:
    """The fields of a composite primary key, or None for a single-column key."""
    fields = getattr(model._meta.pk, "fields", None)
    return list(fields) if fields is not None else None


def _field_data(field: Any, instance: models.Model) -> Any:
    """One key column as JSON: an int or str as it is, anything else (a UUID) as the field's string form."""
    value = getattr(instance, field.attname)
    if type(value) is int or type(value) is str:
        return value
    return field.value_to_string(instance)


def _key_data(instance: models.Model) -> Any:
    fields = _pk_fields(type(instance))
    if fields is not None:
        return [_field_data(field, instance) for field in fields]
    return _field_data(instance._meta.pk, instance)


def _column_value(field: Any, data: Any) -> Any:
    if type(data) is not int and not (type(data) is str and len(data) <= MAX_KEY_LENGTH):
        raise Malformed("holds a primary key that is not an int or a string")
    try:
        return field.to_python(data)
    except ValidationError:  # its message quotes the value, so it is not chained
        raise Malformed(f"holds a primary key its {type(field).__name__} does not accept") from None


def _key_value(model: type[models.Model], data: Any) -> Any:
    fields = _pk_fields(model)
    if fields is None:
        return _column_value(model._meta.pk, data)
    if type(data) is not list or len(data) != len(fields):
        raise Malformed(f"holds a primary key that is not a list of {len(fields)} values (composite key)")
    return tuple(_column_value(field, item) for field, item in zip(fields, data, strict=True))


def _shown_key(key: Any) -> str:
    text = repr(tuple(key)) if type(key) is list else repr(key)
    return text if len(text) <= 80 else text[:77] + "..."


def _explain(value: Any) -> str | None:
    if isinstance(value, models.QuerySet):
        return (
            "a QuerySet is not allowed (it is neither a value nor one row): pass a list of primary keys "
            "and query them in handle()"
        )
    if isinstance(value, models.Model):
        return (
            f"an instance of {value._meta.label} needs a parameter annotated with its model class "
            "(or that class | None)"
        )
    if isinstance(value, models.Manager):
        return "a model Manager is not allowed: pass primary keys and query them in handle()"
    return None


def _claims(hint: type) -> bool:
    return issubclass(hint, models.Model)


_installed = False


def install() -> None:
    """Let the argument contract store model instances (once per process; KinetisQueueConfig.ready())."""
    global _installed
    if not _installed:
        _installed = True
        values.register_family(_claims, ModelCodec)
        values.register_explainer(_explain)
