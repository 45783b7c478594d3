"""The software's CITATION.cff: valid CFF 1.2.0 keys, the package's version and licence, the two papers cited."""

from __future__ import annotations

import pytest
import yaml
from conftest import ROOT

import repro


def test_citation_cff_cites_this_version_of_the_software_and_both_papers():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert (cff["cff-version"], cff["type"]) == ("1.2.0", "software")
    assert cff["version"] == project["version"] == repro.__version__
    assert cff["license"] == project["license"]["text"] == "Apache-2.0"
    assert cff["title"] and cff["message"] and all(author.get("name") for author in cff["authors"])
    titles = [ref["title"] for ref in cff["references"]]
    assert titles == [
        "Long Range Arena: A Benchmark for Efficient Transformers",
        "You Can Train from Scratch: Further Discussion on the Long Range Arena",
    ]
    assert all(ref["type"] and ref["authors"] and ref["url"].startswith("https://") for ref in cff["references"])
