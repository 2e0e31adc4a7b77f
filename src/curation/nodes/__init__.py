"""Kedro nodes: thin adapters from catalog entries and params to the algorithm core."""
