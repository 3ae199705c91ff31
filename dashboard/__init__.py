"""Streamlit dashboard: reads everything through the service's HTTP API (``DJ_API_URL``)."""
