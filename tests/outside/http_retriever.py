"""A retriever that calls a search service over HTTP: the README's worked example of a plug-in.

Point ``LAB_RETRIEVER_URL`` at the service (tests/outside/http_service.py);
``LAB_RETRIEVER_TIMEOUT`` (seconds, default 10) bounds each search request.
"""

import json
import os
import urllib.request


FIELDS = ("chunk_id", "document_id", "parent_id", "version", "region", "acl_tag", "text")


def as_json(chunk):
    record = {field: getattr(chunk, field) for field in FIELDS}
    record["effective_from"] = chunk.effective_from.isoformat()
    record["effective_to"] = chunk.effective_to and chunk.effective_to.isoformat()
    return record


def post(url, body, timeout):
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


class HttpRetriever:
    def __init__(self, url, index):
        self.url, self.index = url, index
        self.timeout = float(os.environ.get("LAB_RETRIEVER_TIMEOUT", "10"))

    def search(self, query, caller, on_date, top_k):
        who = {"actor_id": caller.actor_id, "region": caller.region, "acl_tags": sorted(caller.acl_tags)}
        body = {"index": self.index, "query": query, "caller": who, "on_date": on_date.isoformat(), "top_k": top_k}
        return [(chunk_id, score) for chunk_id, score in post(self.url + "/search", body, self.timeout)["results"]]


def http_retriever(chunks, vectors):
    url = os.environ["LAB_RETRIEVER_URL"].rstrip("/")
    index = post(url + "/index", {"chunks": [as_json(c) for c in chunks]}, timeout=10)["index"]
    return HttpRetriever(url, index)
