"""Fixtures of the dashboard tests (the fake API itself lives in ``dashboard_fakes.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import streamlit as st
from dashboard_fakes import FakeApi, install


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    st.cache_data.clear()
    yield
    st.cache_data.clear()


@pytest.fixture
def fake_api(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    """Parametrise indirectly with "data", "empty" or "error"."""
    return install(monkeypatch, FakeApi(getattr(request, "param", "data")))
