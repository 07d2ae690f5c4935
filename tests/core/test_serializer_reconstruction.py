"""Reconstruction edges of the argument contract: stored data that the current class cannot take."""

from __future__ import annotations

from typing import Any

import pytest

from kinetis_queue.exceptions import JobReconstructionError
from kinetis_queue.job import Job, job_class_path
from kinetis_queue.payload.serializer import deserialize_job, serialize_job

type Loop = Loop  # an alias naming itself: unwrapping it must stop, not spin


class AnyArgs(Job):
    def __init__(*args: Any) -> None:  # no named self: the first parameter is *args
        pass


class LeadingDefaults(Job):
    def __init__(self, first: int = 1, second: int = 2, /) -> None:
        self.first = first
        self.second = second


class Impostor(Job):
    def __new__(cls, value: int) -> Any:  # returns a non-Job on purpose
        return object()

    def __init__(self, value: int) -> None:
        self.value = value


class Looping(Job):
    def __init__(self, value: Loop) -> None:
        self.value = value


def test_class_that_became_variadic_is_rejected_when_popped() -> None:
    """A class whose __init__ now takes *args cannot say what a stored argument map means."""
    with pytest.raises(JobReconstructionError) as raised:
        deserialize_job(job_class_path(AnyArgs), {})
    assert str(raised.value).startswith(f"{job_class_path(AnyArgs)}: ")
    assert "*args" in str(raised.value)


def test_missing_positional_only_argument_keeps_its_place() -> None:
    """An unstored positional-only parameter passes its default, so the next one lands in its own slot."""
    restored = deserialize_job(job_class_path(LeadingDefaults), {"second": 7})
    assert isinstance(restored, LeadingDefaults)
    assert (restored.first, restored.second) == (1, 7)


def test_class_that_does_not_construct_a_job_is_rejected() -> None:
    with pytest.raises(JobReconstructionError) as raised:
        deserialize_job(job_class_path(Impostor), {"value": 1})
    assert str(raised.value) == f"{job_class_path(Impostor)}: constructing the class did not return a Job"


def test_self_referencing_type_alias_is_a_plain_annotation() -> None:
    """``type Loop = Loop`` has no end; the argument still round-trips as a plain JSON value."""
    class_path, args = serialize_job(Looping([1, "two"]))
    restored = deserialize_job(class_path, args)
    assert isinstance(restored, Looping)
    assert restored.value == [1, "two"]
