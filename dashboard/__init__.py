"""The Streamlit dashboard: runs, placements, comparisons, cost-model accuracy, placing tables."""
