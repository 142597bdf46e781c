"""Records: the lab's typed inputs.

Takes JSON/JSONL files (chunks, callers, cases) and returns frozen records:
:class:`PolicyChunk`, :class:`Caller`, :class:`Case`. Every load error names the
file, line, field and value.
"""

from labsrc.records.cases import (
    CASE_KINDS,
    Case,
    NEGATIVE_KINDS,
    case_format_problems,
    cases_digest,
    iter_cases,
    load_cases,
)
from labsrc.records.checks import (
    check_caller,
    check_chunks,
)
from labsrc.records.files import (
    as_path,
    atomic_write_bytes,
    commit_dir,
    fsync_dir,
    load_npy,
    reading,
    refuse_foreign_files,
    stage_dir,
    write_durable,
    writing,
)
from labsrc.records.loading import (
    Field,
    iter_jsonl,
    load_callers,
    load_chunks,
    load_json,
    parse_date,
    read_text,
)
from labsrc.records.policy import (
    Caller,
    PolicyChunk,
    chunk_lookup,
)

__all__ = [
    "CASE_KINDS",
    "Caller",
    "Case",
    "Field",
    "NEGATIVE_KINDS",
    "PolicyChunk",
    "as_path",
    "atomic_write_bytes",
    "case_format_problems",
    "cases_digest",
    "check_caller",
    "check_chunks",
    "chunk_lookup",
    "commit_dir",
    "fsync_dir",
    "iter_cases",
    "iter_jsonl",
    "load_callers",
    "load_cases",
    "load_chunks",
    "load_json",
    "load_npy",
    "parse_date",
    "read_text",
    "reading",
    "refuse_foreign_files",
    "stage_dir",
    "write_durable",
    "writing",
]
