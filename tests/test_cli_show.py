"""``lra-run ... --cfg run``: the resolved settings a run saves as config.yaml and the parameter count of the model
it trains, printed without reading, generating or writing anything."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import CONF, SHORT_LISTOPS_OVERRIDES, read_json
from test_bad_input import cli
from test_image import make_official
from test_pathfinder import write_fixture
from test_retrieval import write_release
from test_text import make_acl

from repro.run.footprint import task_shape
from repro.tasks import get_task_builder

FACTS = ("name", "num_classes", "vocab_size", "max_len", "two_tower", "pad_id")


def settings(tmp_path: Path) -> list[str]:
    out, cache = tmp_path / "out", tmp_path / "cache"
    return [f"output_dir={out}", f"cache_dir={cache}", "progress=false", "workers=1", "+train.max_steps=2"]


@pytest.mark.parametrize(
    "run, record",
    [
        (["arm=locality_k5", "task=listops", *SHORT_LISTOPS_OVERRIDES], "locality_k5/listops/smoke/seed0"),
        (  # the follow-up's masked-token objective adds a vocabulary entry and a head; the text is the tests' own
            ["arm=locality_k5", "task=text", "techniques=followup", "task.max_len=64", "+train.batch_size=2", "DATA"],
            "locality_k5+followup/text/smoke/seed0",
        ),
    ],
)
def test_cfg_run_prints_the_saved_config_and_the_trained_models_parameter_count(
    run, record, tmp_path, monkeypatch, capsys
):
    data = f"data_dir={make_acl(tmp_path / 'data')}"
    typed = ["profile=smoke", *(data if item == "DATA" else item for item in run), *settings(tmp_path)]
    status, shown, err = cli(monkeypatch, capsys, *typed, "--cfg", "run")
    assert status == 0, err[-3000:]
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()  # nothing written, no data read
    status, _, err = cli(monkeypatch, capsys, *typed)
    assert status == 0, err[-3000:]
    folder = tmp_path / "out" / "runs" / record
    parameters = read_json(folder / "metrics.json")["parameters"]  # sum(p.numel()) of the model the run trained
    saved = (folder / "config.yaml").read_text()
    settings_part, fingerprint, _ = saved.partition("\nfingerprint:\n")  # the identity, last: it needs the data
    assert fingerprint and shown == settings_part + f"\nparameters: {parameters}\n"


def test_cfg_run_of_an_arm_shows_each_of_its_tasks_and_refuses_bad_input_as_a_run_does(tmp_path, monkeypatch, capsys):
    status, shown, err = cli(monkeypatch, capsys, "arm=lra_transformer", "profile=paper", "--cfg", "run")
    assert status == 0, err[-3000:]
    documents = list(yaml.safe_load_all(shown))
    assert [d["task"]["name"] for d in documents] == ["listops", "text", "retrieval", "image", "pathfinder", "pathx"]
    assert all(d["profile"] == "paper" and d["parameters"] > 0 for d in documents)
    status, shown, err = cli(monkeypatch, capsys, "arm=lra_transformer", "task=listops", "seed=-1", "--cfg", "run")
    assert (status, shown) == (2, "") and err.startswith("error: seed=-1"), err
    status, _, err = cli(monkeypatch, capsys, "-m", "arm=lra_transformer", "task=listops", "--cfg", "run")
    assert status == 2
    said = "--cfg run shows the settings of one run (or of each task of an arm); leave out -m"
    assert err == f"experiments/run.py: error: {said}\n"


def test_a_tasks_shape_is_what_its_builder_builds(tmp_path):
    """task_shape gives each task module's facts (classes, vocabulary, length, towers, padding, an example's stored
    shape, the batch hook) as the builder does for its task config, here on the tests' small data."""
    data = tmp_path / "data"
    make_acl(data)
    write_release(data)
    make_official(data)
    write_fixture(data, "hard", 20)
    configs = {name: yaml.safe_load((CONF / "task" / f"{name}.yaml").read_text()) for name in ("listops", "text")}
    configs["listops"]["generate"] = {**configs["listops"]["generate"], "n_train": 8, "n_val": 4, "n_test": 4}
    configs["listops"]["generate"].update(min_len=20, max_len=100)
    configs["listops"]["source"] = "generated"
    configs["text"]["val_fraction"] = 0.25
    for name in ("retrieval", "image", "pathfinder"):
        configs[name] = yaml.safe_load((CONF / "task" / f"{name}.yaml").read_text())
    configs["pathfinder"].update(source="official", difficulty="hard")
    for name, cfg in configs.items():
        built = get_task_builder(cfg["builder"])(cfg, data, tmp_path / "cache", 1)
        shape = task_shape(cfg)
        assert [getattr(shape, f) for f in FACTS] == [getattr(built, f) for f in FACTS], name
        assert shape.train.inputs.shape[1:] == built.train.inputs.shape[1:] and shape.prepare is built.prepare, name
        assert len(shape.train) == len(shape.val) == len(shape.test) == 0
