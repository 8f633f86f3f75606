"""llmb.shared.errors: every error of the package derives from one base carrying the exit status."""

from __future__ import annotations

import inspect
import pkgutil
from importlib import import_module

import llmb
import pytest
from llmb.shared.errors import EXIT_FAILED, EXIT_USAGE, LlmbError, UsageError

# A local run's stop signal: Ctrl-C and SIGTERM handling, not an error for people; a record
# check's signal on its way out of the record, turned into a BadRecord at the top; SIGTERM or
# SIGHUP to a front, a KeyboardInterrupt as Ctrl-C is.
NOT_ERRORS = {"llmb.launch.local.Interrupted", "llmb.shared.records._Bad",
              "llmb.shared.front.Stopped"}


def test_status_defaults_and_overrides():
    assert LlmbError("x").status == EXIT_FAILED == 1
    assert UsageError("x").status == EXIT_USAGE == 2
    assert LlmbError("x", status=3).status == 3 and str(LlmbError("one line")) == "one line"


@pytest.mark.parametrize("name", [m.name for m in pkgutil.walk_packages(llmb.__path__, "llmb.")])
def test_every_exception_class_derives_from_the_base(name):
    module = import_module(name)
    for cls in vars(module).values():
        if (inspect.isclass(cls) and issubclass(cls, BaseException)
                and cls.__module__ == name and f"{name}.{cls.__name__}" not in NOT_ERRORS):
            assert issubclass(cls, LlmbError), f"{name}.{cls.__name__}"
