"""The stored class field meets the same rule at push and at pop (issue 12, item 5).

push() stores ``module.QualName`` of a real class, so a stored class that is not a dotted path of
Python identifiers (a NUL, a control character, a lone surrogate, a space) or is longer than the
column cannot have come from push(): decoding reports it as malformed data, and the message is
removed instead of reaching the failed-job table. The argument names obey push's rule the same way.
"""

from __future__ import annotations

import pytest

from kinetis_queue import Job
from kinetis_queue.exceptions import MalformedQueuedJobDataError, UnserializableJobError
from kinetis_queue.job import MAX_CLASS_PATH, is_class_path
from kinetis_queue.payload.envelope import decode_envelope, dumps, new_envelope
from kinetis_queue.payload.serializer import serialize_job

BAD_PATHS = {
    "empty": "",
    "no-dot": "Records",
    "nul": "tests.jobs.Records\x00",
    "lone-surrogate": "tests.jobs.Rec\ud800ords",
    "escape-sequence": "tests.jobs.Records\x1b[31m",
    "newline": "tests.jobs.Records\nforged log line",
    "space": "tests.jobs.Records ",
    "empty-part": "tests..Records",
    "leading-dot": ".tests.jobs.Records",
    "trailing-dot": "tests.jobs.",
    "leading-digit": "tests.jobs.1Records",
    "hyphen": "tests.my-jobs.Records",
    "locals-first": "<locals>.Records",
    "locals-last": "tests.f.<locals>",
    "rtl-override": "tests.jobs.Rec\u202eords",
    "too-long": "tests." + "a" * (MAX_CLASS_PATH - 5),
}
GOOD_PATHS = {
    "plain": "tests.jobs.Records",
    "nested-class": "tests.jobs.Outer.Inner",
    "function-local": "tests.test_x.test_y.<locals>.Job",
    "non-ascii-identifiers": "tests.café.Über",
    "longest": "tests." + "a" * (MAX_CLASS_PATH - 6),
}


@pytest.mark.parametrize("path", BAD_PATHS.values(), ids=BAD_PATHS.keys())
def test_a_stored_class_outside_the_push_rule_is_malformed(path: str) -> None:
    assert not is_class_path(path)
    text = new_envelope("tests.jobs.Records", {"label": "x"}, None, {}).to_json()
    with pytest.raises(MalformedQueuedJobDataError, match="class is not a dotted path"):
        decode_envelope(text.replace('"tests.jobs.Records"', dumps(path)))


@pytest.mark.parametrize("path", GOOD_PATHS.values(), ids=GOOD_PATHS.keys())
def test_a_class_path_push_can_write_decodes(path: str) -> None:
    assert is_class_path(path)
    assert decode_envelope(new_envelope(path, {}, None, {}).to_json()).job_class == path


@pytest.mark.parametrize("key", ["", "1x", "a b", "x\x00", "x-y", "\ud800"])
def test_an_argument_name_push_could_not_write_is_malformed(key: str) -> None:
    text = new_envelope("tests.jobs.Records", {key: 1}, None, {}).to_json()
    with pytest.raises(MalformedQueuedJobDataError):
        decode_envelope(text)


@pytest.mark.parametrize("qualname", ["Bad Name", "Bad\x00Name", "Bad\nName", "Bad..Name"])
def test_push_refuses_a_class_whose_path_a_worker_could_not_read_back(qualname: str) -> None:
    class Renamed(Job):
        def handle(self) -> None:
            pass

    Renamed.__qualname__ = qualname
    with pytest.raises(UnserializableJobError, match="not a dotted path of Python identifiers"):
        serialize_job(Renamed())
