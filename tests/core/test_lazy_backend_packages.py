"""The backend packages that load their queue classes on first use (module ``__getattr__``).

Only the names they export are loaded; any other attribute is the ordinary AttributeError, so
``hasattr`` and ``getattr(..., default)`` keep working and a typo is not mistaken for a lazy name.
"""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("package", ["kinetis_queue.backends.sql", "kinetis_queue.backends.sqs"])
def test_an_unknown_attribute_of_a_lazy_backend_package_is_an_attribute_error(package: str) -> None:
    module = importlib.import_module(package)
    with pytest.raises(AttributeError, match=rf"module '{package}' has no attribute 'NoSuchQueue'"):
        module.NoSuchQueue  # noqa: B018  the lookup is the test
    assert not hasattr(module, "NoSuchQueue")
    assert getattr(module, "NoSuchQueue", None) is None
    for name in module.__all__:  # the exported names do load
        assert getattr(module, name).__name__ == name
