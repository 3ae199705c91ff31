"""Issue 27.6: no table on any page reads "None". Every page the app declares is rendered against the fake API, with
the values that do not apply in its data: an unnamed run still running (no ``finished_at``), single judgments (no
``system_b`` or ``order``) among the unparseable ones and in the item explorer, an adaptive ranking with a system not
compared yet, a failed generation without a message, fact-check labels. A null cell is drawn as the table's
placeholder, and Streamlit writes "None" where none is set; so each cell is checked as it is shown."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dashboard_fakes import RUN_A, RUN_B, FakeApi, install
from streamlit.testing.v1 import AppTest
from test_adaptive_runs_page import ECONOMY

from dashboard.widgets import NOT_APPLICABLE

APP = "../../dashboard/app.py"
APP_SOURCE = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
# pages whose tabs run only when open (st.tabs(..., bind="query-params")): the tabs' key
LAZY_TABS = {"views/disagreements.py": "dis_tab", "views/agreement.py": "agr_tab"}


def tab_labels(node: Any) -> list[str]:
    """The labels of the tabs drawn on the page (depth first)."""
    labels = [child.label for child in getattr(node, "children", {}).values() if getattr(child, "type", "") == "tab"]
    for child in getattr(node, "children", {}).values():
        labels += tab_labels(child)
    return labels


def declared_pages() -> list[str]:
    """The script of every ``st.Page`` in the app, once each (the hidden /runs twin shares the Runs script)."""
    scripts: list[str] = []
    for node in ast.walk(ast.parse(APP_SOURCE.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Page":
            script = node.args[0]
            assert isinstance(script, ast.Constant) and isinstance(script.value, str)
            if script.value not in scripts:
                scripts.append(script.value)
    return scripts


def with_values_that_do_not_apply(fake: FakeApi) -> FakeApi:
    fake.runs[RUN_B]["summary"].update(name=None, status="running", progress=0.5, finished_at=None)
    ranking = [*ECONOMY["pairing"]["ranking"], {"system": "newcomer", "rank": None, "strength": None,
                                                 "ci_low": None, "ci_high": None, "comparisons": 0}]  # fmt: skip
    fake.runs[RUN_A]["summary"].update(
        economy={**ECONOMY, "pairing": {**ECONOMY["pairing"], "ranking": ranking}},
        generation={
            "total": 4, "generated": 2, "failed": 2, "pending": 0, "running": 0, "items_released": 2,
            "failures": [{"item_id": "msc-0", "system": "ours", "error": None},
                         {"item_id": "msc-1", "system": "ours", "error": "http 500"}],
        },
    )  # fmt: skip
    return fake


def shown(frame: pd.DataFrame, placeholder: str | None) -> pd.DataFrame:
    """The cells as the browser draws them: a null as the placeholder, "None" when the table sets none."""
    text = frame.astype(object).where(frame.notna(), placeholder if placeholder is not None else "None")
    return text.map(lambda v: str(v).strip())


def none_cells(at: AppTest) -> list[tuple[str, Any]]:
    found = []
    for table in at.dataframe:
        placeholder = table.proto.placeholder if table.proto.HasField("placeholder") else None
        cells = shown(table.value, placeholder)
        for column in cells.columns:
            for row in cells.index[cells[column] == "None"]:
                found.append((str(column), table.value.at[row, column]))
    return found


def test_every_table_is_drawn_by_the_one_helper() -> None:
    """A page calling st.dataframe itself would draw "None" again; widgets.dataframe sets the placeholder."""
    dashboard = APP_SOURCE.parent
    direct = [
        str(path.relative_to(dashboard))
        for path in dashboard.rglob("*.py")
        if path.name != "widgets.py" and ("st.dataframe(" in path.read_text() or "st.data_editor(" in path.read_text())
    ]
    assert not direct, direct


def test_the_check_sees_none_where_streamlit_would_draw_it() -> None:
    frame = pd.DataFrame({"system_b": ["b", None], "score": [1.5, float("nan")], "label": ["ok", "None"]})
    assert shown(frame, None).values.tolist() == [["b", "1.5", "ok"], ["None", "None", "None"]]
    assert shown(frame, NOT_APPLICABLE).values.tolist() == [["b", "1.5", "ok"], ["n/a", "n/a", "None"]]


@pytest.mark.parametrize("state", ["data", "facts"])
def test_no_table_on_any_page_shows_none(monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    fake = install(monkeypatch, FakeApi(state))
    if state == "data":
        with_values_that_do_not_apply(fake)
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["run_id"] = RUN_A if state == "data" else next(iter(fake.runs))
    at.run()
    pages = declared_pages()
    assert len(pages) >= 11 and "views/runs.py" in pages
    with_nulls = set()
    for page in pages:
        at.switch_page(page).run()
        key = LAZY_TABS.get(page)
        labels: list[str | None] = [*tab_labels(at.main)] if key is not None else []
        assert key is None or state != "data" or len(labels) >= 2, (page, labels)  # the runs with ratings have tabs
        for label in labels or [None]:  # a page whose tabs run only when open: each tab in turn
            if key is not None and label is not None:
                at.session_state[key] = label
                at.run()
            assert not at.exception, (page, label, [e.value for e in at.exception])
            assert not none_cells(at), (page, label, none_cells(at))
            for table in at.dataframe:
                assert table.proto.placeholder == NOT_APPLICABLE, (page, label, list(table.value.columns))
                if table.value.isna().any().any():
                    with_nulls.add(page)
    # the check is not vacuous: these pages drew cells with no value
    expected = {"runs", "explorer", "disagreements", "agreement", "monitors"} if state == "data" else {"explorer"}
    assert {f"views/{page}.py" for page in expected} <= with_nulls, with_nulls
