"""Review r48b (659d260): the item explorer reads one item's ratings; an item of a rated run that has no rating of
its own must still say so ("None yet — rate this item on the Annotate page."), as it did when the explorer read the
run's ratings and filtered them."""

from __future__ import annotations

import pytest
from dashboard_fakes import RUN_A, FakeApi
from test_pages_apptest import open_page, texts


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_explorer_unrated_item_of_a_rated_run_still_points_to_annotate(fake_api: FakeApi) -> None:
    fake_api.ratings[RUN_A] = [r for r in fake_api.ratings[RUN_A] if r["item_id"] != "msc-5"]
    assert fake_api.ratings[RUN_A]  # the run has ratings, just none for msc-5
    at = open_page("explorer")
    at.text_input(key="ex_typed").input("msc-5").run()
    assert at.header[0].value == "Item `msc-5`"
    assert "Human ratings" in [s.value for s in at.subheader]
    assert "None yet — rate this item on the Annotate page." in texts(at, "caption")
