"""``labsrc chunk`` and :mod:`labsrc.patterns.documents`: a folder of a team's pages becomes a valid chunks.jsonl.

Issue 59 (part 2): the team wrote a 30-line converter. Here the pages' front
matter (or a CSV naming them) gives the record fields, every bad page is an
error naming the file, line, field and value, and twelve wiki pages pass the
starter's release gate with cases written for them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path

import pytest

from labsrc.cli.main import main
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.patterns.chunking import DEFAULT_MAX_CHARS, chunk_markdown
from labsrc.patterns.documents import chunk_documents, chunk_record, page_paths, write_chunks_jsonl
from labsrc.patterns.frontmatter import parse_front_matter
from labsrc.records.loading import load_chunks
from labsrc.records.policy import PolicyChunk

#: The line of the starter's my_retriever.py that keeps a caller out of chunks whose ACL tag they lack.
ACL_FILTER = "        and chunk.acl_tag in caller.acl_tags\n"

#: A page's usual front matter: the three required fields.
FRONT = "---\nregion: emea\nacl_tag: it:staff\neffective_from: 2026-01-01\n---\n"


def write(folder: Path, rel: str, text: str) -> Path:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def refused(folder: Path, **options) -> str:
    with pytest.raises(InvalidRecord) as caught:
        chunk_documents(folder, **options)
    return str(caught.value)


# --- what becomes which chunk ---------------------------------------------------------------------


def test_headings_cut_a_page_and_every_chunk_carries_the_page_fields(tmp_path):
    body = "Read this first.\n\n# Remote access\n\nUse the client.\n\n## Setup\n\nInstall it. Then sign in.\n"
    write(tmp_path, "it/vpn.md", "---\nregion: emea\nacl_tag: it:staff\neffective_from: 2026-01-01\ntitle: VPN guide\n---\n" + body)
    chunks = chunk_documents(tmp_path, max_chars=20)
    # 3 sections, cut to at most 20 chars: "Read this first." (16) fits; "# Remote access\n\nUse the client." (32) is cut
    # at its paragraph break (15 + 15, and 15 + 2 + 15 > 20 will not pack back); "## Setup\n\nInstall it. Then sign
    # in." (35) into "## Setup" (8) and "Install it. Then sign in." (25), cut again at its sentence: 1 + 2 + 3 chunks.
    assert [(c.chunk_id, c.title, c.text) for c in chunks] == [
        ("it/vpn#chunk-0", "VPN guide", "Read this first."),  # before any heading: the page's title
        ("it/vpn#chunk-1", "Remote access", "# Remote access"),
        ("it/vpn#chunk-2", "Remote access", "Use the client."),
        ("it/vpn#chunk-3", "Remote access > Setup", "## Setup"),
        ("it/vpn#chunk-4", "Remote access > Setup", "Install it."),
        ("it/vpn#chunk-5", "Remote access > Setup", "Then sign in."),
    ]
    # The same cuts as the pattern makes on the body alone.
    assert [c.text for c in chunks] == [c["text"] for c in chunk_markdown("it/vpn", body, max_chars=20)]
    assert {(c.document_id, c.parent_id, c.version, c.region, c.acl_tag, c.effective_from, c.effective_to, c.path)
            for c in chunks} == {("it/vpn", "it/vpn", "it/vpn/2026-01-01", "emea", "it:staff", dt.date(2026, 1, 1), None, "it/vpn.md")}


def test_the_default_max_chars_is_the_patterns():
    assert DEFAULT_MAX_CHARS == 1000


def test_a_page_with_no_heading_is_one_chunk_titled_by_its_front_matter_or_its_file_stem(tmp_path):
    write(tmp_path, "titled.md", FRONT.replace("---\n", "---\ntitle: Password reset\n", 1) + "Reset it on the self-service page.\n")
    write(tmp_path, "howto/guest-wifi.markdown", FRONT + "Visitors join the Visitors network.\n")
    chunks = chunk_documents(tmp_path)
    assert [(c.chunk_id, c.title, c.text, c.path) for c in chunks] == [
        ("howto/guest-wifi#chunk-0", "guest-wifi", "Visitors join the Visitors network.", "howto/guest-wifi.markdown"),
        ("titled#chunk-0", "Password reset", "Reset it on the self-service page.", "titled.md"),
    ]


def test_a_txt_page_is_plain_text_where_a_hash_line_is_no_heading(tmp_path):
    write(tmp_path, "notes.txt", FRONT + "# of laptops per desk: one\n\nKeep it charged.\n")
    [chunk] = chunk_documents(tmp_path)
    assert (chunk.title, chunk.text) == ("notes", "# of laptops per desk: one\n\nKeep it charged.")
    assert len(chunk_documents(tmp_path, max_chars=26)) == 2  # 45 chars: cut at the paragraph


def test_front_matter_can_name_every_field(tmp_path):
    write(tmp_path, "a.md", "---\ndocument_id: vpn\nparent_id: remote-access\nversion: v7\nregion: apac\nacl_tag: it:admins\n"
                            "effective_from: 2025-01-01\neffective_to: 2025-12-31\n---\ntext\n")
    [chunk] = chunk_documents(tmp_path)
    assert chunk == PolicyChunk("a#chunk-0", "vpn", "remote-access", "v7", "apac", "it:admins", dt.date(2025, 1, 1),
                                dt.date(2025, 12, 31), "text", title="a", path="a.md")


def test_two_versions_of_one_document_share_its_id_and_never_a_chunk_id(tmp_path):
    for name, start, end in (("vpn-2025", "2025-01-01", "2025-12-31"), ("vpn-2026", "2026-01-01", "null")):
        write(tmp_path, f"{name}.md", f"---\ndocument_id: vpn\nregion: emea\nacl_tag: it:staff\neffective_from: {start}\n"
                                      f"effective_to: {end}\n---\nConnect with the client.\n")
    chunks = chunk_documents(tmp_path)
    assert [(c.chunk_id, c.document_id, c.version, c.effective_to) for c in chunks] == [
        ("vpn-2025#chunk-0", "vpn", "vpn/2025-01-01", dt.date(2025, 12, 31)),
        ("vpn-2026#chunk-0", "vpn", "vpn/2026-01-01", None),
    ]


def test_front_matter_values_quoted_commented_and_null():
    text = ("---\n# a comment line\n\na: plain value  # comment\nb: \"it:staff # not a comment\"  # one\n"
            "c: 'it''s'\nd: null\ne: ~\nf:\ng: C# guide\nh: \"tab\\tand \\u00e9\"\n---\nbody\n")
    matter = parse_front_matter(text, path="p.md")
    assert dict(matter.fields) == {
        "a": ("plain value", 4), "b": ("it:staff # not a comment", 5), "c": ("it's", 6), "d": (None, 7),
        "e": (None, 8), "f": (None, 9), "g": ("C# guide", 10), "h": ("tab\tand é", 11),
    }
    assert (matter.body, matter.body_line) == ("body\n", 13)
    assert parse_front_matter("no front matter\n---\n", path="p.md").fields == {}


# --- the metadata table ---------------------------------------------------------------------------


def test_a_metadata_table_gives_pages_their_fields_and_may_agree_with_front_matter(tmp_path):
    docs = tmp_path / "docs"
    write(docs, "emea/printing.md", "# Printing\n\nTap your badge.\n")
    write(docs, "apac/vpn.md", "---\nregion: apac  # the table says the same\n---\nUse SecureLink.\n")
    table = write(tmp_path, "pages.csv", "path,region,acl_tag,effective_from,effective_to,title\n"
                                         "./emea/printing.md,emea,it:staff,2025-03-01,,\n"
                                         "\n"
                                         "apac/vpn.md,apac,it:staff,2025-01-01,null,Remote access\n")
    chunks = chunk_documents(docs, metadata=table)
    assert [(c.chunk_id, c.region, c.effective_from, c.effective_to, c.title) for c in chunks] == [
        ("apac/vpn#chunk-0", "apac", dt.date(2025, 1, 1), None, "Remote access"),
        ("emea/printing#chunk-0", "emea", dt.date(2025, 3, 1), None, "Printing"),
    ]


# --- every error: file, line, field, value --------------------------------------------------------

PAGE_ERRORS = [
    ("a line that is not key: value", "---\nregion emea\n---\ntext\n",
     "{p}, line 2: front matter lines must be flat 'key: value' lines (no indentation, lists or nesting), got 'region emea'"),
    ("an indented line", "---\nregion: emea\n  acl_tag: x\n---\ntext\n",
     "{p}, line 3: front matter lines must be flat 'key: value' lines (no indentation, lists or nesting), got '  acl_tag: x'"),
    ("a flow list", "---\nacl_tag: [it:staff, it:admins]\n---\ntext\n",
     "{p}, line 2, field 'acl_tag': front matter holds flat values only, and '[' would start a YAML list, mapping or block; "
     "quote the value if it is text, got '[it:staff, it:admins]'"),
    ("an unclosed quote", "---\nregion: \"emea\n---\ntext\n",
     "{p}, line 2, field 'region': a double-quoted value must end with its closing \" (then only a # comment), got '\"emea'"),
    ("a key given twice", "---\nregion: emea\nregion: apac\n---\ntext\n",
     "{p}, line 3, field 'region': given twice (first on line 2), got 'region: apac'"),
    ("front matter never closed", "---\nregion: emea\n\ntext\n",
     "{p}, line 1: the front matter opened with '---' on line 1 is never closed; end it with a '---' line "
     "(or, if the page starts with a horizontal rule, put a blank line above it)"),
    ("a misspelt field", FRONT.replace("---\n", "---\nefective_to: 2026-03-01\n", 1) + "text\n",
     "{p}, line 2, field 'efective_to': unknown field; valid fields are ['acl_tag', 'document_id', 'effective_from', "
     "'effective_to', 'parent_id', 'region', 'title', 'version'] (a misspelt one would be lost silently)"),
    ("no metadata at all", "Just text.\n",
     "{p}, field 'region': missing required field; give it in the page's front matter (region: ...) or in a metadata "
     "table row whose 'path' is 'kb/page.md'"),
    ("a missing acl_tag", "---\nregion: emea\neffective_from: 2026-01-01\n---\ntext\n",
     "{p}, field 'acl_tag': missing required field; give it in the page's front matter (acl_tag: ...) or in a metadata "
     "table row whose 'path' is 'kb/page.md'"),
    ("a null required field", FRONT.replace("region: emea", "region: null") + "text\n",
     "{p}, line 2, field 'region': must not be null or empty (required)"),
    ("a blank quoted region", FRONT.replace("region: emea", "region: '  '") + "text\n",
     "{p}, line 2, field 'region': must not be empty or blank"),
    ("an impossible date", FRONT.replace("2026-01-01", "2026-02-30") + "text\n",
     "{p}, line 4, field 'effective_from': '2026-02-30' is not a calendar date (day is out of range for month); "
     "write a real date as YYYY-MM-DD"),
    ("a date in another format", FRONT.replace("2026-01-01", "01/02/2026") + "text\n",
     "{p}, line 4, field 'effective_from': expected an ISO date YYYY-MM-DD, got '01/02/2026'"),
    ("an end before the start", FRONT.replace("---\n", "---\neffective_to: 2025-12-31\n", 1) + "text\n",
     "{p}, line 2, field 'effective_to': 2025-12-31 is before effective_from 2026-01-01"),
    ("an empty page after front matter", FRONT + "\n  \n",
     "{p}, line 6, field 'text': the page holds no text after its front matter; an empty page cannot be evidence, "
     "so write its text or remove it"),
    ("a blank page", " \n\n",
     "{p}, line 1, field 'text': the page holds no text; an empty page cannot be evidence, so write its text or remove it"),
]


@pytest.mark.parametrize(("text", "message"), [(t, m) for _, t, m in PAGE_ERRORS], ids=[i for i, _, _ in PAGE_ERRORS])
def test_a_bad_page_is_refused_naming_file_line_field_and_value(tmp_path, text, message):
    page = write(tmp_path, "kb/page.md", text)
    write(tmp_path, "kb/fine.md", FRONT + "A fine page beside it.\n")
    assert refused(tmp_path) == message.format(p=page)


def test_two_pages_making_one_chunk_id_are_refused_naming_both(tmp_path):
    write(tmp_path, "faq.md", FRONT + "markdown\n")
    write(tmp_path, "faq.txt", FRONT.replace("2026-01-01", "2026-02-01") + "text\n")
    assert refused(tmp_path) == (
        f"{tmp_path / 'faq.txt'}, field 'chunk_id': chunk id 'faq#chunk-0' is also made from {tmp_path / 'faq.md'} "
        "(chunk ids are the page's path without its suffix); rename one of the two pages"
    )


def test_pages_may_share_a_document_and_its_version(tmp_path):
    # One document split over two pages, and its variant for another region: neither is a duplicate.
    write(tmp_path, "vpn.md", FRONT + "one\n")
    write(tmp_path, "vpn-part-2.md", FRONT.replace("---\n", "---\ndocument_id: vpn\n", 1) + "two\n")
    write(tmp_path, "vpn-apac.md", FRONT.replace("---\n", "---\ndocument_id: vpn\n", 1).replace("emea", "apac") + "three\n")
    chunks = chunk_documents(tmp_path)
    assert [(c.chunk_id, c.document_id, c.version, c.region) for c in chunks] == [  # path order: "-" < "."
        ("vpn-apac#chunk-0", "vpn", "vpn/2026-01-01", "apac"),
        ("vpn-part-2#chunk-0", "vpn", "vpn/2026-01-01", "emea"),
        ("vpn#chunk-0", "vpn", "vpn/2026-01-01", "emea"),
    ]


TABLE_ERRORS = [
    ("an unknown column", "path,region,acl,effective_from\n",
     "{t}, line 1, field 'acl': unknown column 'acl'; valid columns are ['acl_tag', 'document_id', 'effective_from', "
     "'effective_to', 'parent_id', 'path', 'region', 'title', 'version']"),
    ("no path column", "page,region\n",
     "{t}, line 1, field 'page': unknown column 'page'; valid columns are ['acl_tag', 'document_id', 'effective_from', "
     "'effective_to', 'parent_id', 'path', 'region', 'title', 'version']"),
    ("a header without path", "region,acl_tag\n",
     "{t}, line 1, field 'path': no 'path' column naming each page relative to {d}; the header is ['region', 'acl_tag']"),
    ("a repeated column", "path,region,region\n", "{t}, line 1, field 'region': column 'region' appears 2 times in the header"),
    ("a row naming no page", "path,region\nkb/page.md,emea\nkb/gone.md,emea\n",
     "{t}, line 3, field 'path': names no page under {d} (no such file), got 'kb/gone.md'"),
    ("a row naming a file that is no page", "path,region\nkb/image.png,emea\n",
     "{t}, line 2, field 'path': names no page under {d} (not a page: hidden, or not ending .md, .markdown, .txt), "
     "got 'kb/image.png'"),
    ("an empty path", "path,region\n,emea\n",
     "{t}, line 2, field 'path': name the page by its path relative to the folder, with '/' (such as 'it/vpn.md'), "
     "got ''"),
    ("a path outside the folder", "path,region\n../kb/page.md,emea\n",
     "{t}, line 2, field 'path': name the page by its path relative to the folder, with '/' (such as 'it/vpn.md'), "
     "got '../kb/page.md'"),
    ("a page named twice", "path,region\nkb/page.md,emea\n./kb/page.md,emea\n",
     "{t}, line 3, field 'path': page 'kb/page.md' is named again (first on line 2)"),
    ("a short row", "path,region,acl_tag\nkb/page.md,emea\n",
     "{t}, line 2: holds 2 cells but the header names 3 columns, got ['kb/page.md', 'emea']"),
    ("a value that disagrees with the front matter", "path,region,acl_tag\nkb/page.md,emea,it:admins\n",
     "{t}, line 2, field 'acl_tag': 'it:admins' differs from 'it:staff' in {p}, line 3 (the page's front matter); "
     "give the field in one place, or the same value in both"),
    ("a bad date in the table", "path,effective_to\nkb/page.md,2026-13-01\n",
     "{t}, line 2, field 'effective_to': '2026-13-01' is not a calendar date (month must be in 1..12); "
     "write a real date as YYYY-MM-DD"),
]


@pytest.mark.parametrize(("csv_text", "message"), [(c, m) for _, c, m in TABLE_ERRORS], ids=[i for i, _, _ in TABLE_ERRORS])
def test_a_bad_metadata_table_is_refused_naming_its_file_line_field_and_value(tmp_path, csv_text, message):
    docs = tmp_path / "docs"
    page = write(docs, "kb/page.md", FRONT + "text\n")
    write(docs, "kb/image.png", "not a page")
    table = write(tmp_path, "pages.csv", csv_text)
    assert refused(docs, metadata=table) == message.format(t=table, d=docs, p=page)


def test_a_folder_without_pages_and_a_missing_folder_are_refused(tmp_path):
    write(tmp_path, ".hidden/page.md", FRONT + "text\n")
    write(tmp_path, "readme.rst", "text\n")
    assert refused(tmp_path) == f"{tmp_path}: holds no pages (files ending .md, .markdown, .txt, searched recursively)"
    with pytest.raises(InvalidArgument, match="nowhere: no such folder"):
        chunk_documents(tmp_path / "nowhere")
    with pytest.raises(InvalidArgument, match="readme.rst: not a folder"):
        chunk_documents(tmp_path / "readme.rst")
    with pytest.raises(InvalidArgument, match="max_chars must be > 0, got 0"):
        chunk_documents(tmp_path, max_chars=0)


# --- determinism and the file ---------------------------------------------------------------------


def test_the_pages_are_read_in_sorted_order_whatever_order_they_were_written(tmp_path):
    names = ["b/z.md", "a.md", "b/a.MD", "c.txt", "B.md", ".git/x.md", "b/.draft.md", "chunks.jsonl"]
    for folder, order in (("one", names), ("two", names[::-1])):
        for name in order:
            write(tmp_path / folder, name, FRONT + f"Page {name}.\n")
    assert page_paths(tmp_path / "one") == ["B.md", "a.md", "b/a.MD", "b/z.md", "c.txt"]
    write_chunks_jsonl(chunk_documents(tmp_path / "one"), tmp_path / "one.jsonl")
    write_chunks_jsonl(chunk_documents(tmp_path / "two"), tmp_path / "two.jsonl")
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()


def test_the_written_file_loads_back_as_the_same_chunks(tmp_path):
    write(tmp_path, "docs/é/straße.md", FRONT.replace("---\n", "---\ntitle: \"Straße \\\"Nord\\\"\"\n", 1)
          + "# Zugang\n\nMit dem Client verbinden: „schnell“.\n")
    write(tmp_path, "docs/old.md", FRONT.replace("---\n", "---\neffective_to: 2026-03-31\n", 1) + "Old.\n")
    chunks = chunk_documents(tmp_path / "docs")
    out = write_chunks_jsonl(chunks, tmp_path / "chunks.jsonl")
    assert load_chunks(out) == chunks
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [c.path for c in chunks] == ["old.md", "é/straße.md"]  # sorted by code point: "o" < "é"
    assert json.loads(lines[1]) == chunk_record(chunks[1]) and "„schnell“" in lines[1]  # UTF-8, not \u escapes
    assert list(json.loads(lines[1])) == ["chunk_id", "document_id", "parent_id", "version", "region", "acl_tag",
                                          "effective_from", "effective_to", "text", "title", "path"]
    with pytest.raises(InvalidArgument, match="no chunks to write"):
        write_chunks_jsonl([], tmp_path / "empty.jsonl")
    assert not (tmp_path / "empty.jsonl").exists()


# --- the command ----------------------------------------------------------------------------------


def test_the_command_writes_the_file_and_prints_one_summary_line(tmp_path, capsys):
    write(tmp_path, "docs/a.md", FRONT + "# One\n\nx\n\n# Two\n\ny\n")
    write(tmp_path, "docs/b.md", FRONT.replace("---\n", "---\ndocument_id: a\n", 1).replace("2026-01-01", "2026-05-01") + "z\n")
    out = tmp_path / "docs" / "chunks.jsonl"  # inside the folder: not a page, so never read as one
    assert main(["chunk", str(tmp_path / "docs"), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"chunked 2 pages of 1 document into 3 chunks: {out}\n"
    first = out.read_bytes()
    # "# One\n\nx" (8 chars) and "# Two\n\ny" are each cut at their paragraph break: 2 + 2 + 1 chunks.
    assert main(["chunk", str(tmp_path / "docs"), "--out", str(out), "--max-chars", "5"]) == 0
    assert capsys.readouterr().out == f"chunked 2 pages of 1 document into 5 chunks: {out}\n"
    assert len(load_chunks(out)) == 5 and out.read_bytes() != first
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["a.md", "b.md", "chunks.jsonl"]  # no temp file left


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["{docs}", "--out", "{out}"], "{docs}/b.md, line 2, field 'region': must not be null or empty (required)"),
        (["{docs}", "--out", "{out}", "--max-chars", "0"], "--max-chars must be > 0, got 0"),
        (["{docs}", "--out", "{docs}/a.md"], "--out {docs}/a.md: a chunks file is JSONL, and a name ending .md would be "
                                              "read as a page (or overwrite one); give a path such as data/chunks.jsonl"),
        (["{docs}", "--out", "{out}", "--metadata", "{out}"], "--out {out} is the --metadata table; give another path for the chunks"),
        (["{docs}", "--out", "{out}", "--metadata", "{docs}/none.csv"], "{docs}/none.csv: cannot open: No such file or directory"),
        (["{docs}", "--out", "{docs}"], "--out {docs}: this is a folder; give a file path such as {docs}/chunks.jsonl"),
    ],
    ids=["a bad page", "max-chars", "out is a page", "out is the table", "no table", "out is a folder"],
)
def test_bad_input_exits_2_with_one_line_and_leaves_the_old_file(tmp_path, capsys, argv, error):
    docs = tmp_path / "docs"
    write(docs, "a.md", FRONT + "fine\n")
    write(docs, "b.md", FRONT.replace("region: emea", "region: null") + "text\n")
    out = write(tmp_path, "chunks.jsonl", "old\n")
    assert main(["chunk", *(a.format(docs=docs, out=out) for a in argv)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"labsrc: error: {error.format(docs=docs, out=out)}\n"
    assert out.read_text(encoding="utf-8") == "old\n"


def _hostile_docs(tmp_path: Path, what: str) -> str:
    """A DOCS_DIR holding one page that cannot be read as text, or a DOCS_DIR that is no folder."""
    docs = tmp_path / "docs"
    write(docs, "fine.md", FRONT + "fine\n")
    if what == "a FIFO page":
        os.mkfifo(docs / "pipe.md")
    elif what == "a dangling link":
        (docs / "dead.md").symlink_to(tmp_path / "nowhere.md")
    elif what == "a UTF-16 page":
        (docs / "wide.md").write_bytes((FRONT + "text\n").encode("utf-16"))
    elif what == "a Latin-1 page":
        (docs / "latin.md").write_bytes((FRONT + "caf\xe9\n").encode("latin-1"))
    elif what == "a name that is not UTF-8":
        (docs / os.fsdecode(b"caf\xe9.md")).write_text(FRONT + "text\n", encoding="utf-8")
    elif what == "a file for DOCS_DIR":
        return str(docs / "fine.md")
    elif what == "a missing DOCS_DIR":
        return str(tmp_path / "nowhere" / "below")
    return str(docs)


@pytest.mark.parametrize(
    ("what", "error"),
    [
        ("a FIFO page", "{docs}/pipe.md: is a FIFO (named pipe), not a regular file;"),
        ("a dangling link", "{docs}/dead.md: cannot open: No such file or directory"),
        ("a UTF-16 page", "{docs}/wide.md: the file is UTF-16"),
        ("a Latin-1 page", "{docs}/latin.md, line 6: not valid UTF-8"),
        ("a name that is not UTF-8", "{docs}: a page's path is not valid UTF-8, got 'caf\\udce9.md'; rename it"),
        ("a file for DOCS_DIR", "{docs}/fine.md: not a folder; give the folder that holds the pages"),
        ("a missing DOCS_DIR", "{tmp}/nowhere/below: no such folder; give the folder that holds the pages"),
    ],
)
def test_pages_that_cannot_be_read_exit_2_in_one_line(tmp_path, capsys, what, error):
    docs = _hostile_docs(tmp_path, what)
    assert main(["chunk", docs, "--out", str(tmp_path / "chunks.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"labsrc: error: {error.format(docs=tmp_path / 'docs', tmp=tmp_path)}") and err.count("\n") == 1, err
    assert not (tmp_path / "chunks.jsonl").exists()


def test_a_missing_out_option_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["chunk", str(tmp_path)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "labsrc chunk: error: the following arguments are required: --out (see labsrc chunk --help)\n"


# --- done when: twelve wiki pages pass the starter's gate with cases of their own -----------------

#: (path, front matter lines, body): an IT wiki in two regions under three ACL tags, one superseded
#: version pair (emea/vpn-2025 → emea/vpn-2026) and one version not yet in force (emea/passkeys).
WIKI = [
    ("emea/vpn-2025.md", "document_id: emea/vpn\nregion: emea\nacl_tag: it:staff\neffective_from: 2025-01-01\n"
     "effective_to: 2025-12-31  # replaced by vpn-2026", "# Remote access\n\nKB-901: install the OldTunnel client and type "
     "the code from your hardware token to reach the office network from home.\n"),
    ("emea/vpn-2026.md", "document_id: emea/vpn\nregion: emea\nacl_tag: \"it:staff\"\neffective_from: 2026-01-01\n"
     "effective_to: null", "# Remote access\n\nKB-902: install the GlobalConnect client and sign in with your staff "
     "account.\n\n## Approving the sign-in\n\nApprove the push prompt on your phone; the prompt expires after "
     "sixty seconds.\n"),
    ("emea/password.md", "region: emea\nacl_tag: it:staff\neffective_from: 2025-01-01\ntitle: Password reset",
     "Reset a forgotten password on the self-service page with your registered phone number; an account locks "
     "after five failed sign-in attempts.\n"),
    ("emea/printing.md", "region: emea\nacl_tag: it:staff\neffective_from: 2025-03-01",
     "# Printing\n\nKB-412: send documents to the FollowMe queue.\n\n## Releasing a job\n\nRelease the print job "
     "at any office printer by tapping your badge.\n"),
    ("emea/laptop.md", "region: emea\nacl_tag: it:staff\neffective_from: 2025-01-01",
     "# Laptop repair\n\nA broken screen, keyboard or battery is repaired under warranty; raise a hardware ticket "
     "with the asset tag.\n"),
    ("emea/software.md", "region: emea\nacl_tag: it:staff\neffective_from: 2025-01-01",
     "# Software requests\n\nRequest new software from the self-service catalogue; paid licences need your "
     "manager's approval.\n"),
    ("emea/admin-rights.md", "region: emea\nacl_tag: it:admins\neffective_from: 2025-01-01",
     "# Local administrator rights\n\nKB-610: the endpoint team grants temporary administrator rights on a "
     "laptop for 24 hours.\n"),
    ("emea/break-glass.md", "region: emea\nacl_tag: it:admins\neffective_from: 2025-06-01",
     "# Break-glass access\n\nTwo administrators together open the vault holding the root passwords of the "
     "production servers.\n"),
    ("emea/passkeys.md", "region: emea\nacl_tag: it:staff\neffective_from: 2026-09-01",
     "# Passkeys\n\nKB-950: from September every staff account signs in with a passkey stored on the ZeroGate "
     "portal.\n"),
    ("apac/vpn.md", "region: apac\nacl_tag: it:staff\neffective_from: 2025-01-01",
     "# Remote access\n\nStaff in the APAC offices connect with the SecureLink client and a six-digit "
     "authenticator code.\n"),
    ("apac/password.md", "region: apac\nacl_tag: it:staff\neffective_from: 2025-01-01",
     "# Password reset\n\nPhone the Singapore service desk on extension 4400 to reset a forgotten password.\n"),
    ("apac/admin-rights.md", "region: apac\nacl_tag: it:admins\neffective_from: 2025-01-01",
     "# Local administrator rights\n\nIn APAC, administrator rights are granted only to named engineers by "
     "the regional security office.\n"),
]

#: Cases of every kind the starter has, for the starter's callers (dana: emea staff; eli: emea admin;
#: kim: apac staff; vic: emea, no tags), on the starter's date 2026-06-15.
CASES = [
    {"name": "vpn-client", "query": "GlobalConnect client staff account", "caller": "dana", "kind": "positive", "expected": ["emea/vpn-2026#chunk-0"]},
    {"name": "push-prompt", "query": "approve the push prompt on my phone", "caller": "dana", "kind": "positive", "expected": ["emea/vpn-2026#chunk-1"]},
    {"name": "password", "query": "forgotten password self-service page", "caller": "dana", "kind": "positive", "expected": ["emea/password#chunk-0"]},
    {"name": "print-release", "query": "release the print job with my badge", "caller": "dana", "kind": "positive", "expected": ["emea/printing#chunk-1"]},
    {"name": "code-lookup", "query": "KB-412", "caller": "dana", "kind": "positive", "expected": ["emea/printing#chunk-0"]},
    {"name": "broken-screen", "query": "broken screen repaired under warranty", "caller": "dana", "kind": "positive", "expected": ["emea/laptop#chunk-0"]},
    {"name": "software", "query": "request new software from the catalogue", "caller": "dana", "kind": "positive", "expected": ["emea/software#chunk-0"]},
    {"name": "admin-rights", "query": "temporary administrator rights for 24 hours", "caller": "eli", "kind": "positive", "expected": ["emea/admin-rights#chunk-0"]},
    {"name": "apac-vpn", "query": "SecureLink client authenticator code", "caller": "kim", "kind": "positive", "expected": ["apac/vpn#chunk-0"]},
    {"name": "apac-password", "query": "phone the service desk to reset a password", "caller": "kim", "kind": "positive", "expected": ["apac/password#chunk-0"]},
    {"name": "admin-rights-as-staff", "query": "temporary administrator rights on a laptop", "caller": "dana", "kind": "restricted", "forbidden": ["emea/admin-rights#chunk-0"]},
    {"name": "root-passwords", "query": "root passwords of the production servers", "caller": "dana", "kind": "restricted", "forbidden": ["emea/break-glass#chunk-0"]},
    {"name": "no-tags", "query": "reset a forgotten password", "caller": "vic", "kind": "restricted", "forbidden": ["emea/password#chunk-0"]},
    {"name": "old-vpn", "query": "OldTunnel client hardware token KB-901", "caller": "dana", "kind": "superseded", "forbidden": ["emea/vpn-2025#chunk-0"]},
    {"name": "passkeys", "query": "sign in with a passkey on the ZeroGate portal", "caller": "dana", "kind": "not_yet_effective", "forbidden": ["emea/passkeys#chunk-0"]},
    {"name": "printing-from-apac", "query": "release a print job by tapping my badge", "caller": "kim", "kind": "wrong_region", "forbidden": ["emea/printing#chunk-1"]},
    {"name": "apac-admin-from-emea", "query": "administrator rights in the APAC offices", "caller": "dana", "kind": "absent", "forbidden": ["apac/admin-rights#chunk-0"]},
]


def test_twelve_wiki_pages_become_chunks_that_pass_the_starters_gate(tmp_path, monkeypatch, capsys):
    wiki = tmp_path / "wiki"
    for path, front, body in WIKI:
        write(wiki, path, f"---\n{front}\n---\n{body}")
    starter = tmp_path / "my-gate"
    assert main(["init", str(starter)]) == 0
    data = starter / "data"
    gate_config = (data / "gate.json").read_bytes()
    capsys.readouterr()
    assert main(["chunk", str(wiki), "--out", str(data / "chunks.jsonl")]) == 0
    assert capsys.readouterr().out == f"chunked 12 pages of 11 documents into 14 chunks: {data / 'chunks.jsonl'}\n"
    chunks = load_chunks(data / "chunks.jsonl")
    assert [c.chunk_id for c in chunks][:4] == ["apac/admin-rights#chunk-0", "apac/password#chunk-0", "apac/vpn#chunk-0",
                                                "emea/admin-rights#chunk-0"]
    by_id = {c.chunk_id: c for c in chunks}
    assert by_id["emea/vpn-2026#chunk-1"].title == "Remote access > Approving the sign-in"
    assert by_id["emea/password#chunk-0"].title == "Password reset"  # no heading: the front matter's title
    assert {c.acl_tag for c in chunks} == {"it:staff", "it:admins"} and {c.region for c in chunks} == {"emea", "apac"}
    for case in CASES:  # every case names chunks the wiki made
        assert set(case.get("expected", [])) | set(case.get("forbidden", [])) <= set(by_id), case["name"]
    (data / "cases.jsonl").write_text("".join(json.dumps(case) + "\n" for case in CASES), encoding="utf-8")
    assert (data / "gate.json").read_bytes() == gate_config and json.loads(gate_config)["require_cases"] is True
    # No --vectors: the starter's retriever makes its dense lane from the chunks' text with labsrc's HashingEncoder
    # (word overlap, a stand-in for an embedding model), so its dense recall here says nothing about meaning.
    gate = ["gate", "--chunks", str(data / "chunks.jsonl"), "--callers", str(data / "callers.json"),
            "--cases", str(data / "cases.jsonl"), "--retriever", f"{starter / 'my_retriever.py'}:build",
            "--config", str(data / "gate.json"), "--no-progress"]
    monkeypatch.delitem(sys.modules, "labsrc_plugin_my_retriever", raising=False)  # a path import's module, removed after
    status = main(gate)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "NOT TESTED" not in out and "FAIL" not in out and out.rstrip().endswith("all gates pass")
    for name in ("recall@2 bm25", "recall@2 dense", "recall@2 hybrid", "restricted exclusion", "superseded exclusion",
                 "not_yet_effective exclusion", "wrong_region exclusion", "abstention"):
        assert f"PASS  {name}" in out
    # The cases have teeth: without its ACL filter the same retriever fails them on the wiki's admin pages.
    retriever = starter / "my_retriever.py"
    source = retriever.read_text(encoding="utf-8")
    assert source.count(ACL_FILTER) == 1
    retriever.write_text(source.replace(ACL_FILTER, ""), encoding="utf-8")
    monkeypatch.delitem(sys.modules, "labsrc_plugin_my_retriever", raising=False)
    assert main([*gate, "--probe-budget", "10", "--repetitions", "1"]) == 1  # the cases alone catch it: few probes, one timing
    out = capsys.readouterr().out
    assert "FAIL  restricted exclusion" in out and "'emea/admin-rights#chunk-0'" in out
