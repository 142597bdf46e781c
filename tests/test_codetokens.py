import pytest

import labsrc
from labsrc.patterns.codetokens import code_tokens, split_identifier


def test_camel_case_yields_its_words():
    tokens = code_tokens("getUserName")
    assert tokens == ["getusername", "get", "user", "name"]
    assert {"get", "user", "name"} <= set(tokens)


def test_snake_case_splits_the_same_way():
    assert code_tokens("get_user_name") == ["get_user_name", "get", "user", "name"]


def test_acronyms_digits_and_mixed_queries():
    assert split_identifier("HTTPServerError") == ["http", "server", "error"]
    assert split_identifier("parseJSON2Html") == ["parse", "json", "2", "html"]
    assert code_tokens("why does getUserName fail") == ["why", "does", "getusername", "get", "user", "name", "fail"]


def test_no_duplicates_and_deterministic():
    assert code_tokens("user userName user_name") == ["user", "username", "name", "user_name"]


def test_usable_as_a_bm25_analyzer():
    index = labsrc.BM25Index.build([("a", "def getUserName(self): ..."), ("b", "user account settings")], analyzer=code_tokens)
    assert [doc for doc, _ in index.search("user name", 2)] == ["a", "b"]


def test_rejects_non_strings():
    with pytest.raises(labsrc.InvalidArgument):
        code_tokens(42)  # type: ignore[arg-type]
