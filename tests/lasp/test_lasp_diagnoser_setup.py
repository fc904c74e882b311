"""Which diagnoser ``[lasp] diagnoser`` gives, for ``robot-app lasp`` and the onboard task jobs alike
(robot_app.jobs.lasp_setup): offline by default, ``auto`` = the constrained ``llm-pmi`` when the LLM is
installed, an LLM choice without a model refused on the command line and offline (logged) on the robot."""

from __future__ import annotations

import dataclasses
import logging
import typing

import pytest

from core.lasp.diagnosis import OfflineDiagnoser
from core.lasp.similarity import lexical_similarity
from robot_app.cli import main
from robot_app.cli.lasp_cmd import make_diagnoser
from robot_app.config import Config, LaspConfig
from robot_app.errors import UsageError
from robot_app.jobs.lasp_setup import DIAGNOSERS, LLM_DIAGNOSERS, build_diagnoser, resolve_diagnoser


def test_the_config_offers_every_diagnoser_and_defaults_to_offline():
    field = {f.name: f for f in dataclasses.fields(LaspConfig)}["diagnoser"]
    assert tuple(field.metadata["choices"]) == DIAGNOSERS
    assert Config().lasp.diagnoser == "offline"
    assert Config().llm.landmark_parser == "rules"


@pytest.mark.parametrize("choice, available, expected", [
    ("auto", True, "llm-pmi"), ("auto", False, "offline"), ("offline", True, "offline"),
    ("llm-score", False, "llm-score"), ("llm", True, "llm")])
def test_resolve(choice, available, expected):
    assert resolve_diagnoser(choice, available) == expected


def test_bad_choices_are_refused():
    with pytest.raises(ValueError, match="unknown diagnoser 'gpt'"):
        resolve_diagnoser("gpt", True)
    for choice in LLM_DIAGNOSERS:
        with pytest.raises(ValueError, match=f"the {choice} diagnoser needs the LLM"):
            build_diagnoser(Config(), choice, lexical_similarity, None)
    assert isinstance(build_diagnoser(Config(), "auto", lexical_similarity, None), OfflineDiagnoser)


def _config(models_dir, **lasp) -> Config:
    base = Config()
    return dataclasses.replace(base, paths=dataclasses.replace(base.paths, models_dir=str(models_dir)),
                               lasp=dataclasses.replace(base.lasp, similarity="lexical", **lasp),
                               llm=dataclasses.replace(base.llm, worker=False, n_ctx=4096))


def test_without_a_model(tmp_path, caplog):
    cfg = _config(tmp_path)
    for choice in (None, "auto", "offline"):
        factory, desc, close = make_diagnoser(cfg, choice)
        assert isinstance(factory(), OfflineDiagnoser) and desc.startswith("offline")
        close()
    with pytest.raises(UsageError, match="--diagnoser llm-pmi: cannot open .*llm.gguf"):
        make_diagnoser(cfg, "llm-pmi")


def test_eval_lasp_diagnose_refuses_an_llm_choice_without_a_model(tmp_path, capsys):
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{tmp_path}"\n')
    assert main(["--config", str(conf), "eval", "lasp-diagnose", "--diagnoser", "llm-choice"]) == 2
    err = capsys.readouterr().err
    assert "cannot open" in err and "reaching the failures" not in err  # refused before any planning


class _Registry(typing.NamedTuple):
    """The onboard model registry's one method the task job's diagnoser uses (robot_app.service.models)."""

    client: object

    def llm(self):
        return self.client


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from models.llm import make_tiny_gguf
    from models.llm.sidecar import write_llm_sidecar

    models = tmp_path_factory.mktemp("models")
    make_tiny_gguf(models / "llm.gguf", seed=2)
    write_llm_sidecar(models / "llm.gguf")
    return models


@pytest.mark.llm
def test_auto_takes_the_constrained_pmi_diagnoser_when_the_model_is_installed(tiny_models):
    from models.lasp_choice import ChoiceLlmDiagnoser

    factory, desc, close = make_diagnoser(_config(tiny_models), "auto")
    try:
        d = factory()
        assert isinstance(d, ChoiceLlmDiagnoser) and d.mode == "pmi" and desc.startswith("llm-pmi (llm.gguf)")
    finally:
        close()


@pytest.mark.llm
def test_the_task_job_follows_the_configured_diagnoser(tiny_models, caplog):
    from models.lasp_choice import ChoiceLlmDiagnoser
    from models.lasp_llm import LlmDiagnoser
    from robot_app.jobs.task_jobs import TaskJobs
    from robot_app.route.landmark_parsing import open_configured_llm

    cfg = _config(tiny_models)
    with open_configured_llm(cfg) as llm:
        def diagnoser(choice, client):
            job = TaskJobs.__new__(TaskJobs)   # only its configuration and model registry are used here
            job.config = dataclasses.replace(cfg, lasp=dataclasses.replace(cfg.lasp, diagnoser=choice))
            job.models = _Registry(client)
            from robot_app.jobs.lasp_setup import make_similarity
            return job._diagnoser(make_similarity)

        assert isinstance(diagnoser("offline", llm), OfflineDiagnoser)
        assert isinstance(diagnoser("auto", llm), ChoiceLlmDiagnoser)
        assert diagnoser("llm-score", llm).mode == "score"
        assert isinstance(diagnoser("llm", llm), LlmDiagnoser)
        assert isinstance(diagnoser("auto", None), OfflineDiagnoser)
        with caplog.at_level(logging.WARNING):
            assert isinstance(diagnoser("llm-choice", None), OfflineDiagnoser)
        assert "the LLM is not usable; using the offline diagnoser" in caplog.text
