"""A small retrieval service on 127.0.0.1, as a team would run one beside its application.

The web layer is the standard library (``http.server``, ``json``); ranking is
rank-bm25, as in the other outside retrievers. Two endpoints, JSON in and out:

* ``POST /index``  ``{"chunks": [chunk, ...]}`` (dates as ISO strings, null for
  an open end) creates an index holding those chunks → ``{"index": "<id>"}``.
* ``POST /search`` ``{"index", "query", "caller": {"actor_id", "region",
  "acl_tags"}, "on_date", "top_k"}`` filters first (the caller's visible chunks
  in that index on that date), ranks them with BM25 over those chunks only →
  ``{"results": [[chunk_id, score], ...]}``.

``ignore_index_requests=True`` models a service whose index endpoint is broken:
``/index`` drops the chunks it is sent and returns the id of the default index
built from ``default_chunks``. ``delay_s`` slows every ``/search`` down.
"""

import datetime as dt
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rank_bm25 import BM25Okapi

DEFAULT_INDEX = "default"


def _words(text):
    return [w.strip(".,:;()?!'\"").lower() for w in text.split() if w.strip(".,:;()?!'\"")]


def _parse_chunk(record):
    chunk = dict(record)
    chunk["effective_from"] = dt.date.fromisoformat(chunk["effective_from"])
    chunk["effective_to"] = chunk.get("effective_to") and dt.date.fromisoformat(chunk["effective_to"])
    return chunk


def _visible(chunk, caller, day):
    return (
        chunk["region"] == caller["region"]
        and chunk["acl_tag"] in caller["acl_tags"]
        and chunk["effective_from"] <= day
        and (chunk["effective_to"] is None or day <= chunk["effective_to"])
    )


class _Server(ThreadingHTTPServer):
    # The default listen backlog (5) resets connections when the gate's 16 threads arrive at once.
    request_queue_size = 128
    daemon_threads = True


class RetrievalService:
    """The service: ``start()`` serves on 127.0.0.1 (a free port) in a daemon thread and sets ``.url``."""

    def __init__(self, *, default_chunks=(), ignore_index_requests=False, delay_s=0.0):
        self.ignore_index_requests = ignore_index_requests
        self.delay_s = delay_s
        self.indexes = {DEFAULT_INDEX: [_parse_chunk(c) for c in default_chunks]}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server = None
        self._thread = None
        self.url = None

    # --- the two operations -------------------------------------------------
    def create_index(self, records):
        if self.ignore_index_requests:
            return DEFAULT_INDEX
        chunks = [_parse_chunk(r) for r in records]
        with self._lock:
            index_id = f"ix-{next(self._ids)}"
            self.indexes[index_id] = chunks
        return index_id

    def search(self, index_id, query, caller, on_date, top_k):
        if self.delay_s:
            threading.Event().wait(self.delay_s)
        chunks = self.indexes[index_id]  # KeyError → 404
        day = dt.date.fromisoformat(on_date)
        caller = {**caller, "acl_tags": set(caller["acl_tags"])}
        mine = [c for c in chunks if _visible(c, caller, day)]
        if not mine:
            return []
        scores = BM25Okapi([_words(c["text"]) for c in mine]).get_scores(_words(query))
        pairs = [(c["chunk_id"], float(s)) for c, s in zip(mine, scores) if s > 0]
        return [list(p) for p in sorted(pairs, key=lambda p: (-p[1], p[0]))[: int(top_k)]]

    # --- serving -------------------------------------------------------------
    def start(self):
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):  # quiet
                pass

            def reply(self, status, payload):
                body = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (its timeout): nothing to answer

            def do_POST(self):
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if self.path == "/index":
                        self.reply(200, {"index": service.create_index(body["chunks"])})
                    elif self.path == "/search":
                        results = service.search(
                            body["index"], body["query"], body["caller"], body["on_date"], body["top_k"]
                        )
                        self.reply(200, {"results": results})
                    else:
                        self.reply(404, {"error": f"no endpoint {self.path}"})
                except KeyError as exc:
                    self.reply(404 if self.path == "/search" else 400, {"error": f"unknown or missing {exc}"})
                except (ValueError, TypeError) as exc:
                    self.reply(400, {"error": str(exc)})

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="retrieval-service", daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self.url

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = self._thread = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
