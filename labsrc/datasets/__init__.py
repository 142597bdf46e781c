"""Datasets: the offline data the lab ships or points to.

Takes a folder; returns records. The lesson's policy fixtures live here.
"""

from labsrc.datasets.beir import (
    BeirDataset,
    BeirDocument,
    DEFAULT_DATASET,
    ENV_VAR,
    Qrels,
    Run,
    UNIVERSE_CALLER,
    as_chunks,
    beir_search_dirs,
    default_beir_root,
    find_dataset_dir,
    load_beir,
    load_corpus,
    load_qrels,
    load_queries,
    missing_data_reason,
    resolve_dataset_dir,
    universe_caller,
    user_beir_dir,
)
from labsrc.datasets.course_links import CourseLink, course_link, course_roots
from labsrc.datasets.fetch import (
    BEIR_BASE_URL,
    BEIR_REGISTRY,
    default_fetch_dir,
    fetch_beir,
)
from labsrc.datasets.permissions import (
    AUDIT_DATE,
    CALLERS,
    PermissionedCollection,
    permissioned,
)
from labsrc.datasets.lesson import (
    EVAL_DATE,
    Lesson,
    fixtures_dir,
    lesson,
)

__all__ = [
    "CourseLink",
    "course_link",
    "course_roots",
    "AUDIT_DATE",
    "CALLERS",
    "PermissionedCollection",
    "permissioned",
    "BEIR_BASE_URL",
    "BEIR_REGISTRY",
    "BeirDataset",
    "BeirDocument",
    "DEFAULT_DATASET",
    "ENV_VAR",
    "EVAL_DATE",
    "Lesson",
    "Qrels",
    "Run",
    "UNIVERSE_CALLER",
    "as_chunks",
    "beir_search_dirs",
    "default_beir_root",
    "default_fetch_dir",
    "fetch_beir",
    "find_dataset_dir",
    "fixtures_dir",
    "lesson",
    "load_beir",
    "load_corpus",
    "load_qrels",
    "load_queries",
    "missing_data_reason",
    "resolve_dataset_dir",
    "universe_caller",
    "user_beir_dir",
]
