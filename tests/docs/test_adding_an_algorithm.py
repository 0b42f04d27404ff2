"""docs/adding-an-algorithm.md walks through a real protocol: the files it names exist, and the declaration it quotes
is the registered one."""

import pathlib
import re

from dpadmm.protocol import find_protocol

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "adding-an-algorithm.md").read_text()


def test_every_file_the_page_names_exists():
    names = set(re.findall(r"`((?:src/dpadmm/|algorithms/|estimators/|cli/|tests/|docs/)[\w/{},.]+\.(?:py|md))", DOC))
    paths = []
    for n in names:
        m = re.match(r"(.*)\{(.*)\}(.*)", n)
        paths += [m.group(1) + part + m.group(3) for part in m.group(2).split(",")] if m else [n]
    missing = [p for p in paths if not any((base / p).exists() for base in (ROOT, ROOT / "src" / "dpadmm"))]
    assert paths and not missing, missing


def test_the_quoted_declaration_is_the_registered_one():
    proto = find_protocol("vertical-experts")
    assert proto.step.__module__ == "dpadmm.algorithms.experts.party"
    assert set(proto.handlers) == {"logit"} and proto.data_fields == ("train", "score", "model")
    assert [t.__name__ for t in proto.types] == ["FitRequest"]
    assert 'data_fields=("train", "score", "model")' in DOC and 'handlers={"logit": logit}' in DOC
