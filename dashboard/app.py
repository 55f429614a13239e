"""The DreamShard dashboard: `make dashboard`, or `streamlit run dashboard/app.py`.

Reads runs, artifacts and registered models from MLflow (the sidebar's tracking URI, else
$MLFLOW_TRACKING_URI, else the project's local sqlite store); it never writes them.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run` puts only dashboard/ on the path
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from dashboard import store  # noqa: E402
from dreamshard.tracking import tracking_uri  # noqa: E402

# The page scripts live in views/, not pages/: Streamlit would take a pages/ folder for its
# older multipage mode and run a page without this script (so without the path fix above).
RUNS = st.Page("views/runs.py", title="Runs", icon=":material/list:", url_path="runs")
PAGES = [
    RUNS,
    st.Page("views/placement.py", title="Placement explorer", icon=":material/grid_view:"),
    st.Page("views/compare.py", title="Compare planners", icon=":material/leaderboard:"),
    st.Page("views/cost_model.py", title="Cost model", icon=":material/scatter_plot:"),
    st.Page("views/training.py", title="Training", icon=":material/show_chart:"),
    st.Page("views/place_tables.py", title="Place tables", icon=":material/table_view:"),
    st.Page("views/evidence.py", title="Evidence", icon=":material/fact_check:"),
]


def home() -> None:
    """The root URL opens the Runs page at its own address, /runs (its `?run=` kept).

    Streamlit serves its default page at / only, never at the page's url_path, so Runs is an
    ordinary page and this hidden default page switches to it.
    """
    st.switch_page(RUNS, query_params=st.query_params.to_dict())


HOME = st.Page(home, title="Runs", url_path="home", default=True, visibility="hidden")

st.set_page_config(page_title="DreamShard", page_icon=":material/grid_view:", layout="wide")
page = st.navigation([*PAGES, HOME])

with st.sidebar:
    st.text_input(
        "MLflow tracking URI",
        value=tracking_uri(),
        key=store.URI_KEY,
        help="A team server (http://host:5000) or a sqlite:/// file. Default: "
        "$MLFLOW_TRACKING_URI, else the project's .dreamshard/mlflow.db.",
    )
    if st.button("Refresh", help=f"Read MLflow again (reads are cached for {store.TTL_S} s)"):
        store.clear()
    st.caption("Read-only: this dashboard never writes runs or models.")

page.run()
