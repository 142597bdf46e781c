import json

import pytest

import labsrc
from labsrc.patterns.expansion import SUPPORT_POLICY_EXPANSIONS, QueryExpander


def test_expansion_that_fires():
    text, fired = QueryExpander().expand("swap a broken reconditioned notebook")
    assert fired == ("swap", "broken", "reconditioned", "notebook")
    assert text == "swap a broken reconditioned notebook replacement exchange damaged defective refurbished laptop"


def test_expansion_that_does_not_fire_returns_query_unchanged():
    assert QueryExpander().expand("RPL-14") == ("RPL-14", ())
    assert QueryExpander().expand("") == ("", ())


def test_phrases_fire_on_consecutive_tokens_only():
    expander = QueryExpander()
    assert expander.expand("I want my money back")[1] == ("money back",)
    assert expander.expand("back my money")[1] == ()


def test_terms_already_in_the_query_are_not_added_twice():
    text, fired = QueryExpander({"broken": ["damaged", "defective"]}).expand("broken and damaged")
    assert fired == ("broken",)
    assert text == "broken and damaged defective"


def test_default_table_is_the_support_policy_table_and_read_only():
    expander = QueryExpander()
    assert dict(expander.table) == dict(SUPPORT_POLICY_EXPANSIONS)
    with pytest.raises(TypeError):
        expander.table["new"] = ("x",)  # type: ignore[index]


def test_from_json(tmp_path):
    path = tmp_path / "expansions.json"
    path.write_text(json.dumps({"vip": ["merchant"], "rpl": ["replacement", "policy"]}), encoding="utf-8")
    expander = QueryExpander.from_json(path)
    assert expander.expand("vip rpl") == ("vip rpl merchant replacement policy", ("vip", "rpl"))


def test_from_json_errors_name_file_and_term(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"vip": "merchant"}), encoding="utf-8")
    with pytest.raises(labsrc.InvalidRecord) as err:
        QueryExpander.from_json(path)
    assert err.value.field == "vip" and str(path) in str(err.value)
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(labsrc.InvalidRecord, match="line 1"):
        QueryExpander.from_json(path)


def test_caller_table_is_copied():
    table = {"broken": ["damaged"]}
    expander = QueryExpander(table)
    table["broken"].append("defective")
    assert expander.expand("broken")[0] == "broken damaged"
