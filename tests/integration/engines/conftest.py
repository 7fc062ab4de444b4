"""The fake engine servers, for the adapter tests."""

from tests.fakes.plugin import *  # noqa: F403
