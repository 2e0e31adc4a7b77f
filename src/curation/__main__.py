"""``python -m curation <hydra overrides>`` is ``curate``."""

from curation.hydra_app import cli

cli()
