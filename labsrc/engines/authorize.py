"""Request tokens: the caller and date a request runs under, signed so the reader role cannot forge them.

Row-level security needs to know *who* is asking. Settings such as
``SET LOCAL lab.region = 'EU'`` are the usual channel (PostgREST, Supabase),
but a setting is writable by the very role it restricts: any SQL the reader
role runs (a lane's bug, an injection, a ``connect_as`` audit) could widen its
own boundary with ``SET LOCAL`` or ``set_config``. So the engine does not
trust a setting's *value*; it trusts a *signature*.

Per request, inside the request's transaction, the retriever:

1. asks the server for the session's backend pid and the transaction's start
   time (``transaction_timestamp()``, to the microsecond);
2. signs ``{pid, transaction start, region, tags, date}`` with HMAC-SHA256
   (RFC 2104) under a key that only the retriever process and the store's
   owner hold (it lives in a table the reader role has no privilege on);
3. writes the token with ``set_config('lab.request', token, true)``.

The policies call ``lab_request()``, a ``SECURITY DEFINER`` function owned by
the owner, which recomputes the HMAC with the key, and returns the claims only
if the signature holds *and* the pid and transaction start are those of the
session and transaction asking. Otherwise it returns nothing and the session
sees no rows (fail closed). The reader can overwrite the setting, but it cannot
produce a valid token for any other caller, date, session or transaction: a
token copied from another session names another pid; one kept from an earlier
transaction of this session names another start time.

Why this design over the alternatives (see the threat model in docs/postgres.md):

* A grant table written by a separate, trusted connection before each request
  would need a write (and a commit) per request on the primary, a second pool
  of privileged connections, and cleanup of stale grants; tokens need no write
  at all, so requests stay read-only and can be served by read replicas.
* A role per permission set cannot carry the date, needs ``CREATEROLE`` and a
  cluster-wide role per caller combination, and leaks roles if the process dies.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import secrets
from typing import Any

from labsrc.engines.errors import check_storable
from labsrc.errors import InvalidArgument
from labsrc.records.policy import Caller

__all__ = ["REQUEST_SETTING", "RequestSigner", "check_caller_text"]

#: The one setting a request writes; the policies accept its value only if the signature holds.
REQUEST_SETTING = "lab.request"

# HMAC's pads (RFC 2104): the SQL side computes sha256(key ^ opad || sha256(key ^ ipad || message)).
_BLOCK = 64


def _check_text(value: str, what: str) -> None:
    if not value.strip():
        raise InvalidArgument(f"{what} must be a non-blank string, not {value!r}")
    check_storable(value, f"{what} {value[:40]!r}")


def check_caller_text(caller: Caller) -> None:
    """Refuse a caller PostgreSQL cannot represent, or one whose region or tag is blank (as the records do)."""
    _check_text(caller.region, "caller region")
    for tag in sorted(caller.acl_tags):
        _check_text(tag, "caller acl tag")


class RequestSigner:
    """Holds the store's signing key and signs one request's claims for one session and transaction."""

    def __init__(self, key: bytes | None = None) -> None:
        key = secrets.token_bytes(32) if key is None else bytes(key)
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(_BLOCK, b"\x00")
        self._key = key
        #: The two padded keys the SQL function stores (never sent after the store is built).
        self.inner_pad = bytes(b ^ 0x36 for b in key)
        self.outer_pad = bytes(b ^ 0x5C for b in key)

    def token(self, backend_pid: int, transaction_start: str, caller: Caller, on_date: dt.date) -> str:
        """``payload.hexmac``: JSON claims (ASCII, sorted keys) and their HMAC-SHA256."""
        payload = json.dumps(
            {
                "pid": int(backend_pid),
                "xact": str(transaction_start),
                "region": caller.region,
                "acl_tags": sorted(caller.acl_tags),
                "on_date": on_date.isoformat(),
            },
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
        )
        mac = hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).hexdigest()
        return f"{payload}.{mac}"

    def authorize(self, conn: Any, caller: Caller, on_date: dt.date) -> None:
        """Sign ``caller`` and ``on_date`` for the open transaction on ``conn`` and write the token (``SET LOCAL``)."""
        if not isinstance(caller, Caller):
            raise InvalidArgument(f"caller must be a Caller, not {type(caller).__name__}")
        if not isinstance(on_date, dt.date) or isinstance(on_date, dt.datetime):
            raise InvalidArgument(f"on_date must be a datetime.date, not {type(on_date).__name__}")
        check_caller_text(caller)
        pid, start = conn.execute(
            "SELECT pg_catalog.pg_backend_pid(), extract(epoch FROM pg_catalog.transaction_timestamp())::text"
        ).fetchone()
        conn.execute(
            "SELECT pg_catalog.set_config(%s, %s, true)", (REQUEST_SETTING, self.token(pid, start, caller, on_date))
        )

    def __repr__(self) -> str:
        return "RequestSigner(key=<hidden>)"
