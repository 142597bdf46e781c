"""Gate config: defaults, validation, JSON and TOML files, and errors that point at the line."""

from __future__ import annotations

import builtins
import datetime as dt
import json
import sys
from pathlib import Path

import pytest

from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import InvalidArgument, InvalidRecord, MissingDependency
from labsrc.evaluation.budgets import RETRIEVAL_BUDGET_MS
from labsrc.gate.config import HYBRID_RULES, GateConfig, load_gate_config

LESSON_CONFIG = fixtures_dir() / "lesson" / "gate.json"


def test_defaults_are_the_lessons_numbers() -> None:
    config = GateConfig()
    assert (config.top_k, config.rrf_k) == (2, 60)
    assert dict(config.p50_budget_ms) == {"authorize": 10, "bm25": 12, "dense": 40, "fusion": 8}
    assert dict(config.p95_budget_ms) == dict(RETRIEVAL_BUDGET_MS)
    assert dict(config.min_recall) == {"hybrid": 1.0}
    assert config.hybrid_rule == "at_least"
    assert (config.warmup, config.repetitions, config.on_date) == (3, 20, None)


def test_lesson_config_pins_the_strict_rule_and_the_date() -> None:
    config = load_gate_config(LESSON_CONFIG)
    assert config.hybrid_rule == "strict"
    assert config.on_date == dt.date(2026, 5, 27)
    assert config.eval_date() == dt.date(2026, 5, 27)
    assert config.top_k == 2 and config.rrf_k == 60


def test_eval_date_defaults_to_today() -> None:
    assert GateConfig().eval_date() == dt.date.today()


def test_budget_tables_merge_over_the_defaults_and_none_removes() -> None:
    config = GateConfig(p95_budget_ms={"dense": 80, "fusion": None})
    assert dict(config.p95_budget_ms) == {"authorize": 10, "bm25": 12, "dense": 80}
    assert dict(config.p50_budget_ms) == dict(RETRIEVAL_BUDGET_MS)


def test_config_does_not_keep_a_reference_to_the_callers_dict() -> None:
    thresholds = {"bm25": 0.5}
    config = GateConfig(min_recall=thresholds)
    thresholds["bm25"] = 0.9
    assert config.min_recall["bm25"] == 0.5
    with pytest.raises(TypeError):
        config.min_recall["bm25"] = 0.1  # type: ignore[index]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.0}, "top_k"),
        ({"rrf_k": 0}, "rrf_k"),
        ({"min_recall": {"sparse": 0.5}}, "valid lanes"),
        ({"min_recall": {"bm25": 1.5}}, r"\[0, 1\]"),
        ({"hybrid_rule": "better"}, "hybrid_rule"),
        ({"p50_budget_ms": {"rerank": 5}}, "valid stages"),
        ({"p95_budget_ms": {"dense": -1}}, "positive number"),
        ({"p95_budget_ms": {"dense": True}}, "positive number"),
        ({"warmup": -1}, "warmup"),
        ({"repetitions": 0}, "repetitions"),
        ({"on_date": "2026-05-27"}, "on_date"),
    ],
)
def test_bad_values_are_invalid_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        GateConfig(**kwargs)


def test_hybrid_rules_are_documented() -> None:
    assert sorted(HYBRID_RULES) == ["at_least", "off", "strict"]


def test_to_dict_round_trips_through_json(tmp_path: Path) -> None:
    config = GateConfig(top_k=5, rrf_k=10, min_recall={"bm25": 0.5, "hybrid": 0.9}, hybrid_rule="strict",
                        p95_budget_ms={"dense": 80}, warmup=0, repetitions=3, on_date=dt.date(2026, 1, 2))
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(config.to_dict()), encoding="utf-8")
    assert load_gate_config(path) == config


def test_an_empty_file_object_gives_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "gate.json"
    path.write_text("{}", encoding="utf-8")
    assert load_gate_config(path) == GateConfig()


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_json_errors_name_file_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, "gate.json", '{\n  "top_k": 2,\n  "min_recall": {\n    "hybrid": 1.0,\n    "bm25": 7\n  }\n}\n')
    with pytest.raises(InvalidRecord, match=r"\[0, 1\]") as info:
        load_gate_config(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 5, "min_recall.bm25")


def test_unknown_key_is_an_error_listing_valid_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "gate.json", '{\n  "top_k": 2,\n  "topk": 3\n}\n')
    with pytest.raises(InvalidRecord, match="valid settings") as info:
        load_gate_config(path)
    assert (info.value.line, info.value.field) == (3, "topk")


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "gate.json", '{\n  "top_k": 2,\n  "rrf_k": \n}\n')
    with pytest.raises(InvalidRecord, match="malformed JSON") as info:
        load_gate_config(path)
    assert info.value.line == 4


def test_a_list_is_not_a_config(tmp_path: Path) -> None:
    with pytest.raises(InvalidRecord, match="object of settings"):
        load_gate_config(write(tmp_path, "gate.json", "[1, 2]"))


def test_bad_date_names_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, "gate.json", '{"on_date": "May 27"}')
    with pytest.raises(InvalidRecord, match="ISO date") as info:
        load_gate_config(path)
    assert (info.value.line, info.value.field) == (1, "on_date")


def test_other_suffixes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidRecord, match=r"\.json or \.toml"):
        load_gate_config(write(tmp_path, "gate.yaml", "top_k: 2"))


def test_missing_file_is_an_invalid_record(tmp_path: Path) -> None:
    with pytest.raises(InvalidRecord, match="cannot open"):
        load_gate_config(tmp_path / "nope.json")


TOML = """\
top_k = 3
rrf_k = 60
hybrid_rule = "strict"
on_date = 2026-05-27

[min_recall]
bm25 = 0.5
hybrid = 1.0

[p95_budget_ms]
dense = 80
"""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")
def test_toml_config_reads_tables_and_native_dates(tmp_path: Path) -> None:
    config = load_gate_config(write(tmp_path, "gate.toml", TOML))
    assert config.top_k == 3 and config.hybrid_rule == "strict"
    assert dict(config.min_recall) == {"bm25": 0.5, "hybrid": 1.0}
    assert config.p95_budget_ms["dense"] == 80 and config.p95_budget_ms["bm25"] == 12
    assert config.on_date == dt.date(2026, 5, 27)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")
def test_toml_errors_point_at_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "gate.toml", TOML.replace("dense = 80", "dense = -5"))
    with pytest.raises(InvalidRecord, match="positive number") as info:
        load_gate_config(path)
    assert (info.value.line, info.value.field) == (11, "p95_budget_ms.dense")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")
def test_malformed_toml_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidRecord, match="malformed TOML") as info:
        load_gate_config(write(tmp_path, "gate.toml", "top_k = 2\nrrf_k = = 3\n"))
    assert info.value.line == 2


def test_toml_without_a_parser_says_how_to_fix_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_toml(name: str, *args: object, **kwargs: object):
        if name in ("tomllib", "tomli"):
            raise ModuleNotFoundError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_toml)
    with pytest.raises(MissingDependency, match=r"Python 3\.11\+.*\.json"):
        load_gate_config(write(tmp_path, "gate.toml", TOML))
