"""Kedro pipelines: wiring only."""
