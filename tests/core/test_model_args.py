"""Model instances as job arguments (issue 19; Laravel's SerializesModels): stored as (model label, key,
database alias), fetched again on the worker; QuerySets, unsaved instances and references the worker
cannot follow are refused with a clear error."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import DatabaseError, connections, models

from kinetis_queue import Job, Sensitive
from kinetis_queue.exceptions import JobReconstructionError, MalformedQueuedJobDataError, UnserializableJobError
from kinetis_queue.hooks import SkipDelivery
from kinetis_queue.job import job_class_path
from kinetis_queue.payload.redaction import REDACTED, display_args, sensitive_values
from kinetis_queue.payload.serializer import deserialize_job, serialize_job
from kinetis_queue.values import MalformedJobArgumentError, MissingModelError


class Ticket(models.Model):
    """A UUID primary key (a table made by the ``tables`` fixture: the tests app has no migrations)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    title = models.CharField(max_length=50)

    class Meta:
        app_label = "tests"
        db_table = "tests_values_ticket"


class Seat(models.Model):
    """A composite primary key."""

    pk = models.CompositePrimaryKey("row", "number")
    row = models.CharField(max_length=2)
    number = models.IntegerField()

    class Meta:
        app_label = "tests"
        db_table = "tests_values_seat"


class Welcome(Job):
    def __init__(self, user: User, group: Group | None = None, note: str = "") -> None:
        self.user = user
        self.group = group
        self.note = note


class AnyModel(Job):
    def __init__(self, instance: models.Model) -> None:
        self.instance = instance


class Booking(Job):
    def __init__(self, ticket: Ticket, seat: Seat | None = None) -> None:
        self.ticket = ticket
        self.seat = seat


class Private(Job):
    def __init__(self, ticket: Annotated[Ticket, Sensitive], user: User | None = None) -> None:
        self.ticket = ticket
        self.user = user


class SkipsMissing(Welcome):
    delete_when_missing_models = True


class Loose(Job):
    def __init__(self, value: Any) -> None:
        self.value = value


@pytest.fixture(scope="module")
def tables(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """The tables of Ticket and Seat in the default database, made once (another test process may have)."""
    with django_db_blocker.unblock():
        _make_tables()
    yield


def _make_tables() -> None:
    connection = connections["default"]
    for model in (Ticket, Seat):
        if model._meta.db_table not in connection.introspection.table_names():
            try:
                with connection.schema_editor() as editor:
                    editor.create_model(model)
            except DatabaseError:  # made meanwhile by the other test process
                assert model._meta.db_table in connection.introspection.table_names()


@pytest.fixture
def user() -> Iterator[User]:
    made = User.objects.create(username=f"u{uuid.uuid4().hex[:20]}")
    yield made
    User.objects.filter(pk=made.pk).delete()


def push_error(job: Job) -> str:
    with pytest.raises(UnserializableJobError) as raised:
        serialize_job(job)
    return str(raised.value)


def test_a_saved_instance_is_stored_by_reference_and_fetched_again(user: User) -> None:
    path, args = serialize_job(Welcome(user))
    assert args["user"] == {"model": "auth.user", "pk": user.pk, "db": "default"}
    User.objects.filter(pk=user.pk).update(first_name="Changed")  # the worker sees the row as it is now
    restored = deserialize_job(path, args)
    assert isinstance(restored, Welcome)
    assert type(restored.user) is User and restored.user is not user
    assert (restored.user.pk, restored.user.first_name, restored.user._state.db) == (user.pk, "Changed", "default")
    assert restored.group is None


def test_the_instance_is_fetched_from_the_database_it_came_from() -> None:
    """Stored: the alias the instance was saved to or loaded from (``_state.db``), not a router's guess."""
    made = User.objects.using("postgres").create(username=f"p{uuid.uuid4().hex[:20]}")
    try:
        path, args = serialize_job(Welcome(made))
        assert args["user"]["db"] == "postgres"
        restored = deserialize_job(path, args)
        assert restored.user._state.db == "postgres" and restored.user.pk == made.pk  # type: ignore[attr-defined]
    finally:
        made.delete()


def test_an_unsaved_instance_is_refused_at_push() -> None:
    assert push_error(Welcome(User(username="nobody"))) == (
        f"{job_class_path(Welcome)} argument user: the auth.User instance is unsaved, so the worker could not "
        "fetch it: save it before pushing"
    )
    assert "is unsaved" in push_error(Welcome(User(pk=123456789, username="with a pk but never saved")))


@pytest.mark.parametrize("job_class", [Welcome, Loose])
def test_a_queryset_is_refused_at_push_with_what_to_do_instead(job_class: type[Job]) -> None:
    argument = "user" if job_class is Welcome else "value"
    assert push_error(job_class(User.objects.all())) == (
        f"{job_class_path(job_class)} argument {argument}: a QuerySet is not allowed (it is neither a value nor one "
        "row): pass a list of primary keys and query them in handle()"
    )
    assert "a QuerySet is not allowed" in push_error(Loose({"users": User.objects.filter(pk=1)}))
    assert "a model Manager is not allowed" in push_error(Loose(User.objects))


def test_an_instance_of_another_model_or_without_its_annotation_is_refused(user: User) -> None:
    group = Group.objects.create(name=f"g{uuid.uuid4().hex[:20]}")
    try:
        assert push_error(Welcome(group)) == (  # type: ignore[arg-type]
            f"{job_class_path(Welcome)} argument user: the annotation stores an instance of auth.User, so a Group "
            "is not allowed"
        )
        assert push_error(Loose(user)) == (
            f"{job_class_path(Loose)} argument value: an instance of auth.User needs a parameter annotated with "
            "its model class (or that class | None)"
        )
        assert "a value of type auth.User is allowed only as a top-level argument" in push_error(Loose([user]))
        # The generic models.Model is refused (issue 27 item 11): a payload could name any model's row.
        assert push_error(AnyModel(group)) == (
            f"{job_class_path(AnyModel)}: __init__ parameter instance is annotated with the generic models.Model, "
            "which would let a stored payload load a row of any installed model (auth.User's password hashes "
            "included): annotate the model class the job takes, or the base class of the models it accepts"
        )
        with pytest.raises(JobReconstructionError, match=r"annotated with the generic models\.Model"):
            deserialize_job(
                job_class_path(AnyModel), {"instance": {"model": "auth.user", "pk": user.pk, "db": "default"}}
            )
    finally:
        group.delete()


def test_a_row_gone_by_the_worker_is_a_failure_naming_the_model_and_key(user: User) -> None:
    path, args = serialize_job(Welcome(user))
    user.delete()
    with pytest.raises(MissingModelError) as raised:
        deserialize_job(path, args)
    assert str(raised.value) == (
        f"{path}: argument user: auth.User with primary key {args['user']['pk']} no longer exists"
    )
    assert not isinstance(raised.value, MalformedQueuedJobDataError)


def test_delete_when_missing_models_skips_the_job_instead(user: User) -> None:
    path, args = serialize_job(SkipsMissing(user))
    user.delete()
    with pytest.raises(SkipDelivery) as raised:
        deserialize_job(path, args)
    assert raised.value.reason == (
        f"{path}: argument user: auth.User with primary key {args['user']['pk']} no longer exists "
        "(delete_when_missing_models)"
    )


@pytest.mark.parametrize(
    ("reference", "reason"),
    [
        ([1], "is not a model reference (an object of exactly model, pk and db)"),
        ({"model": "auth.user", "pk": 1}, "is not a model reference (an object of exactly model, pk and db)"),
        ({"model": "auth", "pk": 1, "db": "default"}, "names a model that is not an app_label.model_name label"),
        ({"model": "shop.order", "pk": 1, "db": "default"}, "names model 'shop.order', which is not installed"),
        ({"model": "auth.group", "pk": 1, "db": "default"}, "names model auth.Group, which is not auth.User or a"),
        ({"model": "auth.user", "pk": "one", "db": "default"}, "holds a primary key its AutoField does not accept"),
        ({"model": "auth.user", "pk": 1.5, "db": "default"}, "holds a primary key that is not an int or a string"),
        ({"model": "auth.user", "pk": 1, "db": "replica"}, "names database 'replica', which this process's"),
    ],
)
def test_a_reference_the_worker_cannot_follow_is_malformed(user: User, reference: Any, reason: str) -> None:
    path, args = serialize_job(Welcome(user))
    with pytest.raises(MalformedJobArgumentError) as raised:
        deserialize_job(path, {**args, "user": reference})
    assert str(raised.value).startswith(f"{path}: argument user {reason}")


def test_uuid_and_composite_primary_keys_round_trip(tables: None) -> None:
    ticket = Ticket.objects.create(title="front row")
    seat = Seat.objects.create(row="B", number=12)
    try:
        path, args = serialize_job(Booking(ticket, seat))
        assert args["ticket"]["pk"] == str(ticket.pk)
        assert args["seat"]["pk"] == ["B", 12]
        restored = deserialize_job(path, args)
        assert isinstance(restored, Booking)
        assert restored.ticket == ticket and restored.ticket.title == "front row"
        assert restored.seat is not None and restored.seat.pk == ("B", 12)
        with pytest.raises(MalformedJobArgumentError) as raised:
            deserialize_job(path, {**args, "seat": {**args["seat"], "pk": ["B"]}})
        assert "holds a primary key that is not a list of 2 values (composite key)" in str(raised.value)
        with pytest.raises(MalformedJobArgumentError):
            deserialize_job(path, {**args, "ticket": {**args["ticket"], "pk": "not-a-uuid"}})
    finally:
        ticket.delete()
        seat.delete()


def test_a_sensitive_reference_is_redacted_and_its_key_withheld(tables: None, user: User) -> None:
    ticket = Ticket.objects.create(title="secret")
    path, args = serialize_job(Private(ticket, user))
    shown = display_args(path, args)
    assert shown == {"ticket": REDACTED, "user": args["user"]}  # a reference not Sensitive is shown as stored
    assert sensitive_values(path, args) == [str(ticket.pk)]  # its key, not "tests.ticket" nor "default"
    ticket.delete()
    with pytest.raises(MissingModelError) as raised:
        deserialize_job(path, args)
    assert str(raised.value) == (
        f"{path}: argument ticket: tests.Ticket with primary key (withheld: the argument is Sensitive) no longer exists"
    )
