"""Every ``params:`` input of every registered pipeline resolves in a Kedro session made from the base config, as
Kedro-Viz makes it (no runtime parameters): ``kedro viz`` opens without "Cannot find parameter" warnings (issue #53).

The blocks only an experiment sets (``decide:``, ``table2:``) are in the catalog as a note naming those
experiments; they stay out of ``context.params`` (a run's MLflow params), and a run that reads them without its
experiment is still refused (tests/foundation/test_plain_corpus_pipelines.py).
"""

from __future__ import annotations

from kedro.framework.project import configure_project


def test_every_params_input_of_every_pipeline_is_in_the_base_catalog(project):
    configure_project("curation")
    from kedro.framework.project import pipelines
    from kedro.framework.session import KedroSession

    with KedroSession.create(project_path=project) as session:
        context = session.load_context()
        catalog, params = context.catalog, context.params
        wanted = {(name, ds) for name, pipeline in dict(pipelines).items() for ds in pipeline.inputs()
                  if ds.startswith("params:")}
        assert {"decide", "table2"} <= {name for name, _ in wanted}  # the experiment-only blocks are read
        assert sorted((name, ds) for name, ds in wanted if ds not in catalog) == []
        assert catalog.load("params:decide") == ("not set in this config: experiment=decide (or decide_ladder, "
                                                 "decide_ladder8, decide_smoke, table2_tokens) sets it")
        assert catalog.load("params:table2") == "not set in this config: experiment=table2_tiny sets it"
    assert "decide" not in params and "table2" not in params


def test_kedro_viz_shows_no_upgrade_banner_offline(monkeypatch):
    """Offline, kedro-viz 12.5's /api/version said latest "None", outdated: a "Kedro-Viz None is here!" banner.
    Under `kedro viz` the settings answer its update check with the installed version, asking no one."""
    import kedro_viz.api.rest.responses.version as version
    import kedro_viz.integrations.pypi as pypi
    from kedro_viz import __version__

    from curation.settings import no_kedro_viz_update_check

    def offline():
        return None  # what get_latest_version returns when PyPI cannot be reached

    monkeypatch.setattr(pypi, "get_latest_version", offline)
    monkeypatch.setattr(version, "get_latest_version", offline)
    assert version.get_version_response().latest == "None"  # the banner's cause, kedro-viz's own answer
    no_kedro_viz_update_check()
    answer = version.get_version_response()
    assert (answer.installed, answer.latest, answer.is_outdated) == (__version__, __version__, False)


def test_kedro_viz_opens_without_its_own_fastapi_deprecation_warning(monkeypatch):
    """kedro-viz 12.5 subclasses FastAPI's deprecated ORJSONResponse: importing its app printed a
    FastAPIDeprecationWarning. Under `kedro viz` the settings ignore that one warning in the server process it
    spawns (PYTHONWARNINGS, inherited), and no other."""
    import os
    import subprocess
    import sys

    from curation.settings import quiet_kedro_viz_orjson_warning

    code = "import warnings; import kedro_viz.api.apps; warnings.warn('other_warning', UserWarning)"

    def output(env):  # Kedro's logging may print a warning on stdout (rich), Python on stderr
        return subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=120).stdout

    monkeypatch.setenv("PYTHONWARNINGS", "default::DeprecationWarning")
    before = output(dict(os.environ))
    assert "FastAPIDeprecationWarning" in before and "ORJSONResponse" in before  # kedro-viz's own, without the filter
    monkeypatch.setattr("warnings.filters", list(__import__("warnings").filters))  # this process's filters restored
    quiet_kedro_viz_orjson_warning()
    quiet_kedro_viz_orjson_warning()  # once in the variable however often the settings load
    assert os.environ["PYTHONWARNINGS"] == ("default::DeprecationWarning,"
                                            "ignore:ORJSONResponse is deprecated:UserWarning:kedro_viz.api.apps")
    after = output(dict(os.environ))
    assert "ORJSONResponse" not in after and "other_warning" in after
