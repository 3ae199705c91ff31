"""The in-process API fixtures of tests/api (the real app over a real database) for the imported-verdicts tests."""

from tests.api.conftest import api, api_factory  # noqa: F401 - fixtures
