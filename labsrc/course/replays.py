"""The runs exercises 5 and 6 save their artifacts from, which the rubric replays to judge the learner's own files.

Exercise 5 replays the course's thirty reference cases at ``top_k = 1``, where
RRF ties make cases fail on purpose, and saves a compact trace of each failed
case to ``step5_traces.jsonl``; exercise 6 replays them at ``top_k = 4`` and
saves the fused candidates to ``step6_candidates.jsonl``. Both runs are
deterministic in everything but time (ids, ranks, RRF scores), so the rubric
rebuilds them here and holds the learner's files to them at full precision,
whether or not any of the learner's own cases failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labsrc.course.submission import MODEL_FOLDER
from labsrc.datasets.lesson import EVAL_DATE
from labsrc.gate.config import GateConfig
from labsrc.gate.gates import GateRun, release_gate
from labsrc.lanes.embed import load_embeddings
from labsrc.records.cases import load_cases
from labsrc.records.loading import load_callers, load_chunks
from labsrc.records.policy import Caller, PolicyChunk
from labsrc.retriever.policy import PolicyRetriever

__all__ = ["EXERCISE_ARTIFACTS", "ExerciseArtifact", "Replay", "replay_exercise"]


@dataclass(frozen=True)
class ExerciseArtifact:
    """A file an exercise saves into the submission, and the run it is saved from."""

    exercise: int
    file: str
    top_k: int

    def missing(self) -> str:
        return f"no {self.file}: run exercise {self.exercise} to the end; its last cell saves it to your submission"


#: Exercise 5's traces and exercise 6's candidates, by file name.
EXERCISE_ARTIFACTS = {
    "traces": ExerciseArtifact(5, "step5_traces.jsonl", top_k=1),
    "candidates": ExerciseArtifact(6, "step6_candidates.jsonl", top_k=4),
}


@dataclass(frozen=True)
class Replay:
    """The course's cases replayed as an exercise ran them: the run, and the corpus and callers it ran on."""

    run: GateRun
    chunks: tuple[PolicyChunk, ...]
    callers: dict[str, Caller]


def replay_exercise(course: str | Path, artifact: ExerciseArtifact) -> Replay:
    """``course``'s cases, chunks, callers and stored MiniLM vectors, at the exercise's ``top_k``, on ``EVAL_DATE``.

    Latency is not measured: a replay's timings could never equal the exercise's.
    """
    course = Path(course)
    chunks = load_chunks(course / "chunks.jsonl")
    callers = {c.actor_id: c for c in load_callers(course / "callers.json")}
    cases = load_cases(course / "cases.jsonl", chunk_ids={c.chunk_id for c in chunks}, caller_ids=set(callers))
    source = load_embeddings(course / "vectors" / MODEL_FOLDER, chunks=chunks, allow_live=False)
    config = GateConfig(top_k=artifact.top_k, on_date=EVAL_DATE)
    retriever = PolicyRetriever(chunks, source, rrf_k=config.rrf_k)
    return Replay(release_gate(retriever, cases, callers, config, measure=False), tuple(chunks), callers)
