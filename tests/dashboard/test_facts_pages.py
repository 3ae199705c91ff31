"""Fact-check in the dashboard (AppTest against the fake API's ``facts`` run): the Contradictions page lists every
contradicted fact, filtered by system and by the kind of the fact's source; the item explorer shows each fact with its
label and the evidence highlighted in the response."""

from __future__ import annotations

import pytest
from dashboard_fakes import FakeApi
from streamlit.testing.v1 import AppTest

from dashboard.analysis import contradiction_counts, highlight_evidence, source_kind

APP = "../../dashboard/app.py"


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def metric(at: AppTest, label: str) -> str:
    return str(next(m.value for m in at.metric if m.label == label))


def rows(at: AppTest) -> set[tuple[str, str, str]]:
    table = at.dataframe[0].value
    return set(zip(table["item_id"], table["system"], table["fact_id"], strict=True))


@pytest.mark.parametrize("fake_api", ["facts"], indirect=True)
def test_contradictions_page_lists_and_filters(fake_api: FakeApi) -> None:
    at = open_page("contradictions")
    assert at.title[0].value == "Contradictions"
    assert metric(at, "Contradicted facts") == "4" and metric(at, "Items") == "2"
    assert rows(at) == {
        ("msc-f0", "breaker", "user.1"),
        ("msc-f0", "breaker", "bot.1"),
        ("msc-f1", "breaker", "rex"),
        ("msc-f1", "keeper", "bot.1"),
    }
    table = at.dataframe[0].value
    assert table.loc[table["fact_id"] == "rex", "evidence"].item() == "your cat Rex"
    assert table.loc[table["fact_id"] == "rex", "text"].item() == "The user has a dog called Rex."
    assert len(at.get("vega_lite_chart")) == 1 and len(at.download_button) == 1

    at.selectbox(key="ct_system").select("keeper").run()
    assert metric(at, "Contradicted facts") == "1"
    assert rows(at) == {("msc-f1", "keeper", "bot.1")}

    at.selectbox(key="ct_system").select("(all systems)").run()
    at.selectbox(key="ct_source").select("session").run()
    assert rows(at) == {("msc-f1", "breaker", "rex")}
    at.selectbox(key="ct_source").select("persona.bot").run()
    assert rows(at) == {("msc-f0", "breaker", "bot.1"), ("msc-f1", "keeper", "bot.1")}

    at.selectbox(key="ct_system").select("keeper").run()
    at.selectbox(key="ct_source").select("persona.user").run()
    assert metric(at, "Contradicted facts") == "0"
    assert "No contradiction matches these filters" in " ".join(str(i.value) for i in at.info)


@pytest.mark.parametrize("fake_api", ["facts"], indirect=True)
def test_explorer_shows_each_fact_with_label_and_highlighted_evidence(fake_api: FakeApi) -> None:
    at = open_page("explorer")
    at.text_input(key="ex_typed").input("msc-f0").run()
    assert not at.exception and not at.error
    shown = " ".join(str(m.value) for m in at.markdown)
    assert "How is :green-background[your dog Rex]? :green-background[I like animals] too\\." in shown
    assert "How is :red-background[your cat Rex]? :red-background[I never liked animals]\\." in shown
    tables = [d.value for d in at.dataframe if "evidence" in d.value.columns and "fact" in d.value.columns]
    assert len(tables) == 2  # one per fact-check judgment (keeper, breaker)
    labelled = {(r["fact"], r["label"], r["text"], r["source"]) for t in tables for r in t.to_dict("records")}
    assert ("user.1", "❌ contradicted", "I have a dog called Rex.", "persona.user") in labelled
    assert ("bot.1", "✅ supported", "I like animals.", "persona.bot") in labelled
    assert "contradiction rate 1.00 · retention rate 0.00" in " ".join(str(c.value) for c in at.caption)


@pytest.mark.parametrize(
    ("response", "facts", "markdown"),
    [
        ("I have two dogs.", [], "I have two dogs\\."),
        ("I have two dogs.", [{"label": "supported", "evidence": "two  DOGS"}],
         "I have :green-background[two dogs]\\."),
        ("Not addressed.", [{"label": "not_addressed", "evidence": "Not"}], "Not addressed\\."),
        ("Quote [x] *y*", [{"label": "contradicted", "evidence": "[x]"}], "Quote :red-background[\\[x\\]] \\*y\\*"),
        ("ab cd", [{"label": "supported", "evidence": "ab cd"}, {"label": "contradicted", "evidence": "cd"}],
         ":green-background[ab] :red-background[cd]"),
        ("gone", [{"label": "supported", "evidence": "not there"}], "gone"),
    ],
)  # fmt: skip
def test_highlight_evidence(response: str, facts: list[dict[str, str]], markdown: str) -> None:
    assert highlight_evidence(response, facts) == markdown


def test_source_kinds_and_counts() -> None:
    import pandas as pd

    assert [source_kind(s) for s in ("persona.user", "session 2", "session 1 turn 3", "memory")] == [
        "persona.user",
        "session",
        "session",
        "memory",
    ]
    labels = pd.DataFrame({"system": ["a", "a", "b"], "source": ["session 1", "session 2 turn 1", "memory"]})
    counts = contradiction_counts(labels)
    assert counts.to_dict("records") == [
        {"system": "a", "source_kind": "session", "contradictions": 2},
        {"system": "b", "source_kind": "memory", "contradictions": 1},
    ]
