"""MLflow tracking glue: store set-up, a Kedro hook, a Hydra sweep callback."""
