"""Records: the lab's typed inputs.

Takes JSON/JSONL files (chunks, callers, cases) and returns frozen records:
:class:`PolicyChunk`, :class:`Caller`, :class:`Case`. Every load error names the
file, line, field and value.
"""

from labsrc.records.caller_hints import caller_hint, within_one_edit
from labsrc.records.cases import (
    CASE_KINDS,
    Case,
    NEGATIVE_KINDS,
    case_format_problems,
    cases_digest,
    iter_cases,
    load_cases,
    padded_id_hint,
)
from labsrc.records.checks import (
    check_caller,
    check_chunks,
    check_utf8,
)
from labsrc.records.checksums import (
    CHECKSUMS_FILE,
    checksum_table,
    checksums_json,
    digest_mismatch,
    is_file_name,
    listed_but_missing,
    verify_checksums,
)
from labsrc.records.files import (
    as_path,
    atomic_write_bytes,
    commit_dir,
    file_sha256,
    fsync_dir,
    load_npy,
    open_regular,
    reading,
    refuse_foreign_files,
    remove_stale_staging,
    stage_dir,
    write_durable,
    writing,
)
from labsrc.records.loading import (
    MAX_JSON_DEPTH,
    Field,
    iter_jsonl,
    load_callers,
    load_chunks,
    load_json,
    parse_date,
    parse_json,
    read_text,
    too_deep,
)
from labsrc.records.pinned import (
    RACE_ATTEMPTS,
    UNCHECKED_PREFIX,
    PinnedFolder,
    UncheckedFolderWarning,
    read_pinned,
)
from labsrc.records.policy import (
    Caller,
    PolicyChunk,
    chunk_lookup,
)

__all__ = [
    "CASE_KINDS",
    "CHECKSUMS_FILE",
    "Caller",
    "Case",
    "Field",
    "MAX_JSON_DEPTH",
    "NEGATIVE_KINDS",
    "PinnedFolder",
    "PolicyChunk",
    "RACE_ATTEMPTS",
    "UNCHECKED_PREFIX",
    "as_path",
    "atomic_write_bytes",
    "case_format_problems",
    "cases_digest",
    "check_caller",
    "check_chunks",
    "check_utf8",
    "checksum_table",
    "checksums_json",
    "chunk_lookup",
    "commit_dir",
    "digest_mismatch",
    "file_sha256",
    "fsync_dir",
    "is_file_name",
    "iter_cases",
    "iter_jsonl",
    "listed_but_missing",
    "load_callers",
    "load_cases",
    "padded_id_hint",
    "load_chunks",
    "load_json",
    "load_npy",
    "open_regular",
    "parse_date",
    "parse_json",
    "read_pinned",
    "read_text",
    "reading",
    "refuse_foreign_files",
    "remove_stale_staging",
    "stage_dir",
    "too_deep",
    "UncheckedFolderWarning",
    "verify_checksums",
    "write_durable",
    "writing",
    "caller_hint",
    "within_one_edit",
]
