"""dialogue-judge dashboard: ``streamlit run dashboard/app.py`` (``dialogue-judge up`` starts it).

Reads everything through the service's HTTP API at ``DJ_API_URL`` (default http://127.0.0.1:8000; configuration
only) with the key in ``DJ_API_KEY``, or, without one, the key a visitor signs in with (dashboard/state.py).
One module per page under ``views/`` (not ``pages/``: Streamlit switches to its legacy multipage mode, bypassing
``st.navigation``, whenever a ``pages/`` folder sits beside the entry script).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run dashboard/app.py` puts dashboard/ (not the repo) on the path
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from dashboard import state  # noqa: E402

PAGES = [
    # the default page is served at "/" whatever its url_path; "/runs" is its hidden twin below
    st.Page("views/runs.py", title="Runs", icon=":material/list:", url_path="home", default=True),
    st.Page("views/leaderboard.py", title="Leaderboard", icon=":material/leaderboard:", url_path="leaderboard"),
    st.Page("views/winrates.py", title="Win / tie / loss", icon=":material/stacked_bar_chart:", url_path="wins"),
    st.Page("views/agreement.py", title="Human agreement", icon=":material/handshake:", url_path="agreement"),
    st.Page("views/calibrated.py", title="Calibrated", icon=":material/tune:", url_path="calibrated"),
    st.Page("views/bias.py", title="Bias", icon=":material/balance:", url_path="bias"),
    st.Page("views/explorer.py", title="Item explorer", icon=":material/forum:", url_path="explorer"),
    st.Page("views/disagreements.py", title="Disagreements", icon=":material/rule:", url_path="disagreements"),
    st.Page("views/contradictions.py", title="Contradictions", icon=":material/fact_check:", url_path="contradictions"),
    st.Page("views/memory.py", title="Memory audit", icon=":material/psychology:", url_path="memory-audit"),
    st.Page("views/annotate.py", title="Annotate", icon=":material/edit_note:", url_path="annotate"),
    st.Page("views/compare.py", title="Compare runs", icon=":material/compare_arrows:", url_path="compare"),
    st.Page("views/monitors.py", title="Monitors", icon=":material/monitor_heart:", url_path="monitors"),
    # every page opens from its own URL (a shared link /runs?run=... showed "Page not found"); not in the menu
    st.Page("views/runs.py", title="Runs", icon=":material/list:", url_path="runs", visibility="hidden"),
]

# an emoji favicon is drawn in the page (an inline SVG); a ":material/...:" page icon is fetched from an outside font
# host, which a self-hosted service must not depend on (the pages' own Material icons ship in Streamlit's bundle)
st.set_page_config(page_title="dialogue-judge", page_icon="⚖️", layout="wide")
page = st.navigation(PAGES)
if not state.signed_in():
    st.stop()
state.sidebar()
try:
    page.run()
except Exception as exc:  # a page bug must not show a traceback; the server log keeps it
    logging.getLogger("dashboard").exception("page %s failed", page.title)
    st.error(f"This page failed: {type(exc).__name__}: {exc}", icon="🚫")
