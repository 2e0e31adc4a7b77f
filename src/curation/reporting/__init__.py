"""Tables and figures from pipeline outputs and MLflow runs (matplotlib, headless)."""
