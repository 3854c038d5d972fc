#!/usr/bin/env python3
"""A strict local fake of the Firebase Remote Config REST API (v1) and Google's OAuth token endpoint.

Written for rollout's tests from Google's public documentation and the shapes of Google's own SDK fixtures
(see ../../../shared/docs/FIREBASE-REST.md). It binds 127.0.0.1 only and prints "PORT <n>" when ready.

  fake_remote_config.py --project ID --project-number N --client-email EMAIL --public-key PEM
                        [--key-id KID] [--template FILE] [--conflict-form 412|400] [--token-lifetime S]

Strict where Firebase is strict:
- every API call needs "Authorization: Bearer <token>" issued by /token (else 401, Google's error envelope);
- /token takes grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer and an RS256 assertion verified against
  the service account's public key (kid, iss, aud = the token URL or Google's documented audience, scope, iat/exp at most one hour, not expired);
- PUT needs If-Match ("*" forces); a stale ETag is a conflict, in the 412 or the 400 FAILED_PRECONDITION form;
- the ETag header is sent only when the request accepts gzip (and the body is then gzip-encoded);
- validateOnly=true checks and answers with an ETag ending in -0, writing nothing;
- versions are kept up to 300 (the oldest dropped); listVersions pages newest first with an opaque token;
- rollback publishes an old version again with updateType ROLLBACK and rollbackSource;
- every answer is proto3 JSON, as Google's are: fields without presence at their default value are left out (see
  proto3() below), so a template is held and read back without its "description": "" or "conditionalValues": {}.

Test controls (unauthenticated, loopback only): POST /_fake/faults {"fault": ..., "match": ..., "count": n,
"seconds": s}; POST /_fake/faults/clear; GET /_fake/state; POST /_fake/publish {"template": ..., "user": ..., "description": ...} (a
colleague publishing from the Firebase console); GET /_fake/stats; POST /_fake/clock {"offset_seconds": s} (versions published
from then on carry updateTime shifted by s: a rollout's history made in a test's minutes).
App Check (firebaseappcheck v1, projects.services): GET services, GET/PATCH services/{id} (updateMask required;
an etag that is not the current one is 409 ABORTED), POST services:batchUpdate; tokens need the firebase or
cloud-platform scope (403 otherwise). Controls: GET /_fake/appcheck, POST /_fake/appcheck {"service", "mode"}.
Fault matches: appcheck_get, appcheck_patch.
Faults: drop_before (close without answering, nothing applied), drop_after (applied, then closed),
delay_after (applied, answered after `seconds`), delay_before (waits `seconds`, then handled), unavailable
(503 UNAVAILABLE), unauthenticated (401), giant_body (applied, then a 200 whose body runs to 512 MiB with no
declared length), declared_giant (applied, then a 200 declaring 600 MiB), gzip_bomb (applied, then a 200 whose
gzip body inflates to 1 GiB of zeros), no_etag (applied, answered 200 without its ETag), invalid_json (applied,
answered 200 with a body that is not JSON), conflict_after (applied, answered 412 as if the ETag were stale),
slow_body (applied, the answer's body trickled one byte a second), redirect (not applied, 307 to another host),
html_5xx (not applied, a 502 with an HTML page, as a load balancer sends), rate_limited (not applied, 429 with
Retry-After: `seconds`), bad_request (not applied, 400 INVALID_ARGUMENT), colleague_first (a race no client can prevent: a colleague's
console publish of "template" is applied just before the request is handled, which then meets the fault named by
"then", if any). Match: publish, validate, rollback, get, list, token, any,
and bigquery_query, bigquery_results for Google's data APIs (fake_google_data.py, served by this server).

Lies (fault injection beyond the documents: a server, or something between, that answers 200 and is wrong; armed
like the faults, with "value" where one is named): ok_unapplied (publish, rollback: not applied, answered 200 with
the version it would have become and that version's ETag; appcheck_patch: not applied, answered 200 with the
service as it is, mode and etag unchanged), ok_misnumbered (publish: applied, answered 200 naming version `value`
with that version's ETag), page_loop (list, appcheck_get on the services list: a nextPageToken that never ends,
every page served from the first again; `value` "same": the same token every time, else a new one each page).

TLS (--tls DIR, certificates written by `fake_remote_config.py certs DIR`): the API and the token endpoint are
served over HTTPS as https://localhost:<port> with DIR/good.pem, and the controls over plain HTTP on a second
port (printed as "CONTROL <n>" after the PORT line). POST /_fake/tls {"cert": NAME} serves DIR/NAME.pem from the
next handshake on: good (localhost and 127.0.0.1, by the test CA), expired, otherhost (other.example only),
stranger (issued by a CA the client was not given).
"""
import argparse
import base64
import datetime
import gzip
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

import fake_google_data as google_data

MAX_VERSIONS = 300
REMOTE_CONFIG_SCOPES = {"https://www.googleapis.com/auth/firebase.remoteconfig", "https://www.googleapis.com/auth/cloud-platform"}
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
# firebaseappcheck.v1.json's auth scopes.
APP_CHECK_SCOPES = {"https://www.googleapis.com/auth/firebase", "https://www.googleapis.com/auth/cloud-platform"}
SCOPES = REMOTE_CONFIG_SCOPES | APP_CHECK_SCOPES | google_data.SCOPES
# The services App Check enforces on (projects.services ids).
APP_CHECK_SERVICES = {"firestore.googleapis.com", "firebasedatabase.googleapis.com", "firebasestorage.googleapis.com",
                      "identitytoolkit.googleapis.com", "oauth2.googleapis.com"}
ENFORCEMENT_MODES = {"OFF", "UNENFORCED", "ENFORCED"}
VALUE_TYPES = {"PARAMETER_VALUE_TYPE_UNSPECIFIED", "STRING", "BOOLEAN", "NUMBER", "JSON"}
KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")
# Fault injection: answers of 200 that are wrong (see "Lies" above); each handler checks `self.lied(name)`.
LIES = {"ok_unapplied", "ok_misnumbered", "page_loop"}


# Firebase holds a template as a protocol buffer and answers in proto3's JSON mapping (ProtoJSON,
# https://protobuf.dev/programming-guides/json/): a field without presence that holds its default value ("", 0, false,
# an enum's zero value, an empty list or map) is left out of every answer, and null is read as the default. The field
# kinds are those of Google's discovery document for firebaseremoteconfig v1 (revision 20240611; a condition's
# description is a string in revision 20171129). Sub-messages have presence, and so have the members of
# RemoteConfigParameterValue's union value_option (value, useInAppDefault, personalizationValue, rolloutValue: the
# REST reference's "Union field value_option"), so {"value": ""} is kept. Members no schema names are kept as sent.
STRING, DOUBLE, BOOL = ("scalar", "string"), ("scalar", "double"), ("scalar", "bool")


def enum(zero):
    return ("scalar", zero)


PERSONALIZATION_VALUE = {"personalizationId": STRING}
ROLLOUT_VALUE = {"rolloutId": STRING, "value": STRING, "percent": DOUBLE}
PARAMETER_VALUE = {"value": ("present", None), "useInAppDefault": ("present", None),
                   "personalizationValue": ("present", PERSONALIZATION_VALUE), "rolloutValue": ("present", ROLLOUT_VALUE)}
PARAMETER = {"defaultValue": ("present", PARAMETER_VALUE), "conditionalValues": ("map", PARAMETER_VALUE),
             "description": STRING, "valueType": enum("PARAMETER_VALUE_TYPE_UNSPECIFIED")}
PARAMETER_GROUP = {"description": STRING, "parameters": ("map", PARAMETER)}
CONDITION = {"name": STRING, "expression": STRING, "description": STRING,
             "tagColor": enum("CONDITION_DISPLAY_COLOR_UNSPECIFIED")}
VERSION = {"versionNumber": STRING, "updateTime": STRING, "updateUser": ("present", {"email": STRING, "name": STRING, "imageUrl": STRING}),
           "description": STRING, "updateOrigin": enum("REMOTE_CONFIG_UPDATE_ORIGIN_UNSPECIFIED"),
           "updateType": enum("REMOTE_CONFIG_UPDATE_TYPE_UNSPECIFIED"), "rollbackSource": STRING, "isLegacy": BOOL}
REMOTE_CONFIG = {"conditions": ("list", CONDITION), "parameters": ("map", PARAMETER),
                 "parameterGroups": ("map", PARAMETER_GROUP), "version": ("present", VERSION)}


def is_default(v, kind):
    if kind == "string":
        return v == ""
    if kind == "bool":
        return v is False
    number = isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind == "double":
        return number and v == 0
    return v == kind or (number and v == 0)  # an enum: its zero value, by name or number


def proto3(value, schema=REMOTE_CONFIG):
    """`value` as Firebase holds and answers it: members without presence at their default value left out."""
    if not isinstance(value, dict):
        return value
    out = {}
    for key, member in value.items():
        kind = schema.get(key)
        if kind is None:
            out[key] = member
            continue
        if member is None:
            continue
        tag, inner = kind
        if tag == "scalar":
            if not is_default(member, inner):
                out[key] = member
        elif tag == "present":
            out[key] = proto3(member, inner) if inner else member
        elif tag == "map":
            if isinstance(member, dict) and not member:
                continue
            out[key] = {k: proto3(v, inner) for k, v in member.items()} if isinstance(member, dict) else member
        elif tag == "list":
            if isinstance(member, list) and not member:
                continue
            out[key] = [proto3(v, inner) for v in member] if isinstance(member, list) else member
    return out


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class Fail(Exception):
    def __init__(self, code, status, message, headers=None):
        super().__init__(message)
        self.code, self.status, self.message, self.headers = code, status, message, headers or {}


class State:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.project = args.project
        self.number = args.project_number
        self.email = args.client_email
        self.kid = args.key_id
        with open(args.public_key, "rb") as f:
            self.public_key = serialization.load_pem_public_key(f.read())
        self.conflict_form = args.conflict_form
        self.token_lifetime = args.token_lifetime
        self.tokens = {}  # token -> (expiry in epoch seconds, its scopes)
        self.appcheck = {}  # service id -> {"enforcementMode", "replayProtection"?, "etag", "updateTime"}
        self.versions = []  # [(version dict, template dict)] oldest first
        self.faults = []
        self.data = google_data.DataState()  # Google's data APIs (fake_google_data.py)
        self.stats = {"publish": 0, "validate": 0, "rollback": 0, "get": 0, "list": 0, "token": 0, "unauthenticated": 0, "conflict": 0}
        template = {"conditions": [], "parameters": {}, "parameterGroups": {}}
        if args.template:
            with open(args.template, encoding="utf-8") as f:
                template = json.load(f)
        template.pop("version", None)
        template.pop("etag", None)
        self._append(template, "console-user@example.com", "CONSOLE", "INCREMENTAL_UPDATE", "initial template", None)

    # Versions

    def now_text(self, n):
        t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=getattr(self, "clock_offset", 0))
        # Google sends both precisions; alternate so clients meet both.
        return t.strftime("%Y-%m-%dT%H:%M:%S.") + (f"{t.microsecond:06d}" if n % 2 else f"{t.microsecond // 1000:03d}") + "Z"

    def _append(self, template, user, origin, update_type, description, rollback_source):
        version, template = self.would_be(template, user, origin, update_type, description, rollback_source)
        self.versions.append((version, template))
        del self.versions[:-MAX_VERSIONS]
        return int(version["versionNumber"])

    def would_be(self, template, user, origin, update_type, description, rollback_source):
        """The next version, not stored."""
        n = (int(self.versions[-1][0]["versionNumber"]) + 1) if self.versions else 1
        version = {
            "versionNumber": str(n),
            "updateTime": self.now_text(n),
            "updateUser": {"email": user},
            "description": description,
            "updateOrigin": origin,
            "updateType": update_type,
        }
        if rollback_source is not None:
            version["rollbackSource"] = str(rollback_source)
        return proto3(version, VERSION), proto3(json.loads(json.dumps(template)))

    def etag(self, n):
        return f"etag-{self.number}-{n}"

    def head(self):
        return self.versions[-1]

    def find(self, n):
        for v, t in self.versions:
            if v["versionNumber"] == str(n):
                return v, t
        return None

    def document(self, version, template):
        doc = json.loads(json.dumps(template))
        doc["version"] = dict(version)
        return doc

    # Validation, as the documented limits say

    def validate(self, t):
        if not isinstance(t, dict):
            raise Fail(400, "INVALID_ARGUMENT", "[VALIDATION_ERROR]: The template must be a JSON object")
        conditions = t.get("conditions", [])
        if not isinstance(conditions, list):
            raise Fail(400, "INVALID_ARGUMENT", "Invalid JSON payload received. 'conditions' must be a list.")
        names = set()
        for c in conditions:
            name = c.get("name") if isinstance(c, dict) else None
            if not name or len(name) > 100:
                raise Fail(400, "INVALID_ARGUMENT", "[VALIDATION_ERROR]: Condition names must be 1 to 100 characters")
            if name in names:
                raise Fail(400, "INVALID_ARGUMENT", f"[VALIDATION_ERROR]: Duplicate condition name {name}")
            if not isinstance(c.get("expression"), str) or not c["expression"].strip():
                raise Fail(400, "INVALID_ARGUMENT", f"[VALIDATION_ERROR]: Condition {name} has no expression")
            names.add(name)
        if len(names) > 2000:
            raise Fail(400, "INVALID_ARGUMENT", "[VALIDATION_ERROR]: Too many conditions")
        params = dict(t.get("parameters") or {})
        for g, group in (t.get("parameterGroups") or {}).items():
            for k, p in (group.get("parameters") or {}).items():
                if k in params:
                    raise Fail(400, "INVALID_ARGUMENT", f"[VALIDATION_ERROR]: Parameter key {k} is used twice")
                params[k] = p
        if len(params) > 3000:
            raise Fail(400, "INVALID_ARGUMENT", "[VALIDATION_ERROR]: Too many parameters")
        total = 0
        for k, p in params.items():
            if not KEY_RE.match(k):
                raise Fail(400, "INVALID_ARGUMENT", f"[VALIDATION_ERROR]: Invalid parameter key {k}")
            vt = p.get("valueType", "STRING")
            if vt not in VALUE_TYPES:
                raise Fail(400, "INVALID_ARGUMENT", f"[VALIDATION_ERROR]: Parameter {k} has an unknown value type {vt}")
            values = [p.get("defaultValue")] + list((p.get("conditionalValues") or {}).values())
            for cname, cv in (p.get("conditionalValues") or {}).items():
                # Firebase's own features key their values by their id (a Rollout's "rollout_1"), which need not be
                # a condition of the template; a plain value needs a condition of that name.
                managed = isinstance(cv, dict) and any(
                    m in cv for m in ("rolloutValue", "experimentValue", "personalizationValue"))
                if cname not in names and not managed:
                    raise Fail(400, "INVALID_ARGUMENT", f"[VALIDATION_ERROR]: Parameter {k} has a value for the unknown condition {cname}")
            for v in values:
                if not v:
                    continue
                text = v.get("value")
                if text is None and "rolloutValue" in v:
                    text = v["rolloutValue"].get("value")
                if text is None:
                    continue
                total += len(text)
                if vt == "BOOLEAN" and text not in ("true", "false"):
                    raise Fail(400, "INVALID_ARGUMENT", f"[VALIDATION_ERROR]: Parameter {k} is BOOLEAN but has the value {text!r}")
        if total > 1_000_000:
            raise Fail(400, "INVALID_ARGUMENT", "[VALIDATION_ERROR]: Values are too long")
        description = (t.get("version") or {}).get("description", "")
        if len(description) > 1024:
            raise Fail(400, "INVALID_ARGUMENT", "[VALIDATION_ERROR]: The version description is longer than 1024 characters")

    def conflict(self, expected):
        self.stats["conflict"] += 1
        m = re.match(r"^etag-\d+-(\d+)$", expected or "")
        seen = m.group(1) if m else "unknown"
        message = f"[VERSION_MISMATCH]: Expected version {seen}, found {self.head()[0]['versionNumber']} for project: {self.number}"
        if self.conflict_form == "412":
            return Fail(412, "FAILED_PRECONDITION", message)
        return Fail(400, "FAILED_PRECONDITION", message)


class Dropped(Exception):
    pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that gave up (timeout) before a held answer: expected under the delay faults.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


def make_handler(state, token_url_holder):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        # Plumbing

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def send(self, code, obj, headers=None):
            raw = json.dumps(obj).encode()
            gz = "gzip" in (self.headers.get("Accept-Encoding") or "")
            if gz:
                raw = gzip.compress(raw)
            self.send_response(code)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            if gz:
                self.send_header("Content-Encoding", "gzip")
            for k, v in (headers or {}).items():
                if k.lower() == "etag" and not gz:
                    continue  # documented: the ETag comes reliably only with Accept-Encoding: gzip
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def error(self, f):
            if urllib.parse.urlsplit(self.path).path == "/token":
                # Google's OAuth endpoint answers in RFC 6749's shape, not the API's error envelope.
                oauth = {400: "invalid_request", 401: "invalid_client"}.get(f.code, "internal_failure")
                return self.send(f.code, {"error": oauth, "error_description": f.message}, f.headers)
            self.send(f.code, {"error": {"code": f.code, "message": f.message, "status": f.status}}, f.headers)

        def drop(self):
            self.close_connection = True
            try:
                import socket
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            raise Dropped()

        lie = None

        def lied(self, name):
            """Whether this request is to be answered with the lie `name` (fault injection)."""
            return self.lie is not None and self.lie["fault"] == name

        def take_fault(self, kind):
            with state.lock:
                for f in state.faults:
                    if f["count"] > 0 and f["match"] in (kind, "any"):
                        f["count"] -= 1
                        return dict(f)
            return None

        # Routing

        def do_GET(self):
            self.route("GET")

        def do_PUT(self):
            self.route("PUT")

        def do_POST(self):
            self.route("POST")

        def do_PATCH(self):
            self.route("PATCH")

        def route(self, method):
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            raw = self.body()
            try:
                if url.path.startswith("/_fake/"):
                    return self.control(method, url.path, raw)
                if url.path == "/token" and method == "POST":
                    return self.faulted("token", lambda: self.token(raw))
                if url.path.startswith("/v1alpha/projects/"):
                    return self.faulted("crashlytics_events", lambda: self.google_data(method, url.path, query, raw))
                if url.path.startswith("/v1beta/properties/"):
                    return self.faulted("analytics_realtime", lambda: self.google_data(method, url.path, query, raw))
                if url.path.startswith("/bigquery/"):
                    kind = "bigquery_query" if method == "POST" else "bigquery_results"
                    return self.faulted(kind, lambda: self.google_data(method, url.path, query, raw))
                a = re.match(r"^/v1/projects/([^/:]+)/services(?:/([^/:]+)|:batchUpdate)?$", url.path)
                if a:
                    kind = "appcheck_patch" if method in ("PATCH", "POST") else "appcheck_get"
                    return self.faulted(kind, lambda: self.appcheck(method, a.group(1), a.group(2), url.path, query, raw))
                m = re.match(r"^/v1/projects/([^/:]+)/remoteConfig(:listVersions|:rollback)?$", url.path)
                if not m:
                    raise Fail(404, "NOT_FOUND", f"Method not found: {method} {url.path}")
                project, verb = m.group(1), m.group(2)
                if method == "GET" and verb is None:
                    kind = "get"
                elif method == "GET" and verb == ":listVersions":
                    kind = "list"
                elif method == "PUT" and verb is None:
                    validate = (query.get("validateOnly") or query.get("validate_only") or ["false"])[0] == "true"
                    kind = "validate" if validate else "publish"
                elif method == "POST" and verb == ":rollback":
                    kind = "rollback"
                else:
                    raise Fail(404, "NOT_FOUND", f"Method not found: {method} {url.path}")
                self.faulted(kind, lambda: self.api(kind, project, query, raw))
            except Dropped:
                return
            except Fail as f:
                self.error(f)

        def google_data(self, method, path, query, raw):
            try:
                if not (google_data.route(self, state, method, path, query, raw)
                        or google_data.route_analytics(self, state, method, path, raw)
                        or google_data.route_crashlytics(self, state, method, path, query)):
                    raise Fail(404, "NOT_FOUND", f"Method not found: {method} {path}")
            except google_data.Fail as f:
                detail = {"message": f.message, "domain": "global", "reason": f.reason}
                self.send(f.code, {"error": {"code": f.code, "message": f.message, "errors": [detail], "status": f.status}}, f.headers)

        def faulted(self, kind, handle):
            fault = self.take_fault(kind)
            name = fault and fault["fault"]
            if name == "colleague_first":
                # Another editor's publish is applied first; then this request meets `then` (or nothing).
                with state.lock:
                    theirs = {k: v for k, v in fault["template"].items() if k not in ("version", "etag")}
                    state._append(theirs, "bob@example.com", "CONSOLE", "INCREMENTAL_UPDATE", "console edit (race)", None)
                name = fault.get("then")
                fault = dict(fault, fault=name)
            self.lie = fault if name in LIES else None
            if name == "drop_before":
                self.drop()
            if name == "delay_before":
                time.sleep(fault["seconds"])
            if name == "unavailable":
                raise Fail(503, "UNAVAILABLE", "The service is currently unavailable.")
            if name == "unauthenticated":
                raise Fail(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
            if name == "redirect":
                self.send_response(307)
                self.send_header("Location", "https://elsewhere.invalid" + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if name == "html_5xx":
                page = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"
                self.send_response(502)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                return
            if name == "rate_limited":
                raise Fail(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", {"Retry-After": str(int(fault["seconds"]))})
            if name == "bad_request":
                # "value", when given, is the message (a hostile server's words, for tests of what is shown).
                raise Fail(400, "INVALID_ARGUMENT", fault.get("value") or "Request contains an invalid argument.")
            if name in ("no_etag", "invalid_json", "conflict_after", "slow_body"):
                saved = self.wfile
                import io
                self.wfile = io.BytesIO()
                try:
                    handle()
                except Fail as f:
                    self.error(f)
                answer = self.wfile.getvalue()
                self.wfile = saved
                head, _, body = answer.partition(b"\r\n\r\n")
                self.close_connection = True
                if name == "conflict_after":
                    raise Fail(412, "FAILED_PRECONDITION", "The ETag is stale.")
                if name == "no_etag":
                    lines = [l for l in head.split(b"\r\n") if not l.lower().startswith(b"etag:")]
                    self.wfile.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
                    return
                if name == "invalid_json":
                    page = b"<!doctype html><p>not json"
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json; charset=UTF-8")
                    self.send_header("Content-Length", str(len(page)))
                    self.end_headers()
                    self.wfile.write(page)
                    return
                # slow_body: the head at once, then a byte a second.
                self.wfile.write(head + b"\r\n\r\n")
                try:
                    for i in range(len(body)):
                        self.wfile.write(body[i:i + 1])
                        self.wfile.flush()
                        time.sleep(1)
                except OSError:
                    pass
                return
            if name in ("giant_body", "declared_giant", "gzip_bomb"):
                # Apply, then answer with a body no client should hold.
                saved = self.wfile
                import io
                self.wfile = io.BytesIO()
                try:
                    handle()
                except Fail as f:
                    self.error(f)
                self.wfile = saved
                return self.oversized(name)
            if name in ("drop_after", "delay_after"):
                # Apply, then lose (or hold back) the answer.
                saved = self.wfile
                import io
                self.wfile = io.BytesIO()
                try:
                    handle()
                except Fail as f:
                    self.error(f)
                answer = self.wfile.getvalue()
                self.wfile = saved
                if name == "drop_after":
                    self.drop()
                time.sleep(fault["seconds"])
                self.wfile.write(answer)
                return
            handle()

        def oversized(self, name):
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Connection", "close")
            try:
                if name == "gzip_bomb":
                    raw = gzip_bomb()
                    self.send_header("Content-Encoding", "gzip")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                if name == "declared_giant":
                    self.send_header("Content-Length", str(600 << 20))
                    self.end_headers()
                    self.wfile.write(b"{" + b" " * (1 << 20))
                    return
                self.end_headers()
                chunk = b" " * (1 << 20)
                self.wfile.write(b"{")
                for _ in range(512):
                    self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass

        # OAuth

        def token(self, raw):
            with state.lock:
                state.stats["token"] += 1
            form = urllib.parse.parse_qs(raw.decode())

            def refuse(description):
                raise Fail(400, "invalid_grant", description)

            if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
                self.send(400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type"})
                return
            assertion = (form.get("assertion") or [""])[0]
            try:
                parts = assertion.split(".")
                if len(parts) != 3:
                    refuse("Invalid JWT: not three parts")
                header, claims = json.loads(b64url_decode(parts[0])), json.loads(b64url_decode(parts[1]))
                signature = b64url_decode(parts[2])
                if header.get("alg") != "RS256" or header.get("typ", "JWT") != "JWT":
                    refuse("Invalid JWT: unsupported algorithm")
                if header.get("kid") != state.kid:
                    refuse("Invalid JWT Signature.")
                try:
                    state.public_key.verify(signature, (parts[0] + "." + parts[1]).encode(), padding.PKCS1v15(), hashes.SHA256())
                except InvalidSignature:
                    refuse("Invalid JWT Signature.")
                if claims.get("iss") != state.email:
                    refuse("Invalid JWT: unknown issuer")
                # Google documents the audience as always https://oauth2.googleapis.com/token (google-auth sends
                # that whatever the key's token_uri); the key file's token_uri names the same endpoint.
                if claims.get("aud") not in (token_url_holder[0], GOOGLE_TOKEN_AUDIENCE):
                    refuse("Invalid JWT: audience is not the token URL")
                scopes = set(str(claims.get("scope", "")).split())
                if not scopes & SCOPES:
                    raise Fail(400, "invalid_scope", "Invalid OAuth scope or ID token audience provided.")
                now = time.time()
                iat, exp = claims.get("iat"), claims.get("exp")
                if not isinstance(iat, int) or not isinstance(exp, int) or exp - iat > 3600 or exp <= iat or iat > now + 300 or exp < now:
                    refuse("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
            except Fail as f:
                self.send(400, {"error": f.status, "error_description": f.message})
                return
            except (ValueError, KeyError, TypeError):
                self.send(400, {"error": "invalid_grant", "error_description": "Invalid JWT: malformed"})
                return
            token = "ya29.fake-" + secrets.token_urlsafe(24)
            with state.lock:
                state.tokens[token] = (time.time() + state.token_lifetime, scopes)
            self.send(200, {"access_token": token, "expires_in": state.token_lifetime, "token_type": "Bearer"})

        def authenticate(self, scopes=REMOTE_CONFIG_SCOPES):
            auth = self.headers.get("Authorization") or ""
            token = auth[7:] if auth.startswith("Bearer ") else None
            with state.lock:
                expiry, granted = state.tokens.get(token) or (None, set())
                if expiry is None or expiry < time.time():
                    state.stats["unauthenticated"] += 1
                    raise Fail(
                        401, "UNAUTHENTICATED",
                        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
                if not granted & scopes:
                    raise Fail(403, "PERMISSION_DENIED", "Request had insufficient authentication scopes.")

        # The App Check API (projects.services, firebaseappcheck v1)

        def appcheck(self, method, project, service, path, query, raw):
            self.authenticate(APP_CHECK_SCOPES)
            if project not in (state.project, str(state.number)):
                raise Fail(403, "PERMISSION_DENIED", f"Permission denied on resource project {project}.")
            with state.lock:
                state.stats["appcheck_" + method.lower()] = state.stats.get("appcheck_" + method.lower(), 0) + 1
            if path.endswith(":batchUpdate"):
                if method != "POST":
                    raise Fail(404, "NOT_FOUND", f"Method not found: {method} {path}")
                body = self.json_body(raw)
                mask = self.mask(body.get("updateMask"))
                requests = body.get("requests")
                if not isinstance(requests, list) or not requests or len(requests) > 100:
                    raise Fail(400, "INVALID_ARGUMENT", "requests must hold 1 to 100 UpdateServiceRequests")
                with state.lock:
                    updates = []
                    for r in requests:
                        sv = (r or {}).get("service") or {}
                        sid = self.service_id(project, sv.get("name", ""))
                        updates.append((sid, sv, self.mask(r.get("updateMask")) if r.get("updateMask") else mask))
                    for sid, sv, m in updates:
                        self.check_update(sid, sv, m)
                    out = [self.apply_update(project, sid, sv, m) for sid, sv, m in updates]
                return self.send(200, {"services": out})
            if service is None:
                if method != "GET":
                    raise Fail(404, "NOT_FOUND", f"Method not found: {method} {path}")
                size = int((query.get("pageSize") or ["0"])[0] or 0)
                if size < 0:
                    raise Fail(400, "INVALID_ARGUMENT", "pageSize must not be negative")
                size = min(size or 100, 100)
                with state.lock:
                    ids = sorted(state.appcheck)
                start = int(b64url_decode((query.get("pageToken") or [""])[0]).decode().split(":")[0] or 0) if query.get("pageToken") else 0
                page = ids[start:start + size]
                # proto3 JSON: an empty repeated field is left out.
                out = {"services": [self.service_doc(project, i) for i in page]} if page else {}
                if start + size < len(ids):
                    out["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode().rstrip("=")
                if self.lied("page_loop"):
                    again = "0" if self.lie["value"] == "same" else f"0:{secrets.token_hex(4)}"
                    out["nextPageToken"] = base64.urlsafe_b64encode(again.encode()).decode().rstrip("=")
                return self.send(200, out)
            sid = self.service_id(project, f"projects/{project}/services/{service}")
            if method == "GET":
                return self.send(200, self.service_doc(project, sid))
            if method != "PATCH":
                raise Fail(404, "NOT_FOUND", f"Method not found: {method} {path}")
            mask = self.mask((query.get("updateMask") or [None])[0])
            body = self.json_body(raw)
            if body.get("name") not in (None, f"projects/{project}/services/{sid}"):
                raise Fail(400, "INVALID_ARGUMENT", "the service's name does not match the URL")
            with state.lock:
                self.check_update(sid, body, mask)
                if self.lied("ok_unapplied"):
                    return self.send(200, self.service_doc(project, sid))
                return self.send(200, self.apply_update(project, sid, body, mask))

        def json_body(self, raw):
            try:
                body = json.loads(raw.decode() or "{}")
            except ValueError:
                raise Fail(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
            if not isinstance(body, dict):
                raise Fail(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
            return body

        def mask(self, text):
            if not text:
                raise Fail(400, "INVALID_ARGUMENT", "update_mask is required")
            fields = set()
            for f in str(text).split(","):
                f = {"enforcement_mode": "enforcementMode", "replay_protection": "replayProtection"}.get(f.strip(), f.strip())
                if f not in ("enforcementMode", "replayProtection"):
                    raise Fail(400, "INVALID_ARGUMENT", f"Invalid field mask path: {f}")
                fields.add(f)
            return fields

        def service_id(self, project, name):
            m = re.match(r"^projects/([^/]+)/services/([^/]+)$", name or "")
            if not m or m.group(1) not in (state.project, str(state.number)):
                raise Fail(400, "INVALID_ARGUMENT", f"Invalid service name: {name}")
            if m.group(2) not in APP_CHECK_SERVICES:
                raise Fail(404, "NOT_FOUND", f"Service {m.group(2)} is not supported by App Check.")
            return m.group(2)

        def current(self, sid):
            return state.appcheck.get(sid) or {"enforcementMode": "OFF", "etag": f"W/\"{sid}-0\"", "updateTime": None}

        def check_update(self, sid, body, mask):
            cur = self.current(sid)
            if body.get("etag") not in (None, cur["etag"]):
                raise Fail(409, "ABORTED", "The provided etag does not match the current etag of the resource.")
            for f in mask:
                if body.get(f) not in ENFORCEMENT_MODES:
                    raise Fail(400, "INVALID_ARGUMENT", f"Invalid value at '{f}': {body.get(f)!r}")
                if f == "replayProtection" and sid != "firestore.googleapis.com":
                    raise Fail(400, "INVALID_ARGUMENT", "replay protection is only available for Cloud Firestore")

        def apply_update(self, project, sid, body, mask):
            cur = dict(self.current(sid))
            for f in mask:
                cur[f] = body[f]
            n = int(cur["etag"].rsplit("-", 1)[1].rstrip('"')) + 1
            cur["etag"] = f"W/\"{sid}-{n}\""
            cur["updateTime"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            state.appcheck[sid] = cur
            return self.service_doc(project, sid)

        def service_doc(self, project, sid):
            cur = self.current(sid)
            doc = {"name": f"projects/{project}/services/{sid}", "enforcementMode": cur["enforcementMode"], "etag": cur["etag"]}
            if cur.get("updateTime"):
                doc["updateTime"] = cur["updateTime"]
            if sid == "firestore.googleapis.com":
                doc["replayProtection"] = cur.get("replayProtection", "OFF")
            return doc

        # The Remote Config API

        def api(self, kind, project, query, raw):
            self.authenticate()
            if project not in (state.project, str(state.number)):
                raise Fail(403, "PERMISSION_DENIED", f"Permission 'cloudconfig.configs.get' denied on resource 'projects/{project}' (or it may not exist).")
            with state.lock:
                state.stats[kind] += 1
                if kind == "get":
                    return self.get(query)
                if kind == "list":
                    return self.list_versions(query)
                if kind in ("validate", "publish"):
                    return self.put(kind == "validate", raw)
                return self.rollback(query, raw)

        def get(self, query):
            wanted = (query.get("versionNumber") or [None])[0]
            if wanted is None:
                v, t = state.head()
            else:
                found = state.find(wanted)
                if not found:
                    raise Fail(404, "NOT_FOUND", f"[VERSION_NOT_FOUND]: Version {wanted} not found for project: {state.number}")
                v, t = found
            self.send(200, state.document(v, t), {"ETag": state.etag(v["versionNumber"])})

        def put(self, validate_only, raw):
            if_match = self.headers.get("If-Match")
            if not if_match:
                raise Fail(400, "FAILED_PRECONDITION", "[VERSION_MISMATCH]: No If-Match header found on UpdateRemoteConfig call")
            try:
                t = json.loads(raw.decode() or "null")
            except ValueError:
                raise Fail(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
            forced = if_match == "*"
            if not forced and if_match != state.etag(state.head()[0]["versionNumber"]):
                raise state.conflict(if_match)
            state.validate(t)
            description = (t.get("version") or {}).get("description", "")
            t = {k: v for k, v in t.items() if k not in ("version", "etag")}
            if validate_only:
                self.send(200, proto3(t), {"ETag": f"etag-{state.number}-0"})
                return
            update_type = "FORCED_UPDATE" if forced else "INCREMENTAL_UPDATE"
            if self.lied("ok_unapplied"):
                v, t = state.would_be(t, state.email, "REST_API", update_type, description, None)
                return self.send(200, state.document(v, t), {"ETag": state.etag(v["versionNumber"])})
            n = state._append(t, state.email, "REST_API", update_type, description, None)
            v, t = state.head()
            if self.lied("ok_misnumbered"):
                v, n = dict(v, versionNumber=str(self.lie["value"])), self.lie["value"]
            self.send(200, state.document(v, t), {"ETag": state.etag(n)})

        def rollback(self, query, raw):
            try:
                body = json.loads(raw.decode() or "{}")
            except ValueError:
                raise Fail(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
            wanted = body.get("versionNumber") or (query.get("versionNumber") or [None])[0]
            if wanted is None or not str(wanted).isdigit():
                raise Fail(400, "INVALID_ARGUMENT", "[VALIDATION_ERROR]: versionNumber is required")
            found = state.find(wanted)
            if not found:
                raise Fail(404, "NOT_FOUND", f"[VERSION_NOT_FOUND]: Version {wanted} not found for project: {state.number}")
            if self.lied("ok_unapplied"):
                v, t = state.would_be(found[1], state.email, "REST_API", "ROLLBACK", f"Rollback to version {wanted}", wanted)
                return self.send(200, state.document(v, t), {"ETag": state.etag(v["versionNumber"])})
            n = state._append(found[1], state.email, "REST_API", "ROLLBACK", f"Rollback to version {wanted}", wanted)
            v, t = state.head()
            self.send(200, state.document(v, t), {"ETag": state.etag(n)})

        def list_versions(self, query):
            size = int((query.get("pageSize") or ["300"])[0])
            if not 1 <= size <= 300:
                raise Fail(400, "INVALID_ARGUMENT", "[VALIDATION_ERROR]: pageSize must be between 1 and 300")
            end = (query.get("endVersionNumber") or [None])[0]
            newest = [v for v, _ in reversed(state.versions) if end is None or int(v["versionNumber"]) <= int(end)]
            first = newest[0]["versionNumber"] if newest else "0"
            token = (query.get("pageToken") or [None])[0]
            if token:
                try:
                    below = int(b64url_decode(token).decode().split(":")[1])
                except (ValueError, IndexError):
                    raise Fail(400, "INVALID_ARGUMENT", "[VALIDATION_ERROR]: Invalid page token")
                newest = [v for v in newest if int(v["versionNumber"]) <= below]
            page, rest = newest[:size], newest[size:]
            out = {"versions": page}
            if rest:
                out["nextPageToken"] = base64.urlsafe_b64encode(f"next:{rest[0]['versionNumber']}".encode()).decode().rstrip("=")
            if self.lied("page_loop"):
                again = f"next:{first}" if self.lie["value"] == "same" else f"next:{first}:{secrets.token_hex(4)}"
                out["nextPageToken"] = base64.urlsafe_b64encode(again.encode()).decode().rstrip("=")
            self.send(200, out)

        # Test controls

        def control(self, method, path, raw):
            body = json.loads(raw.decode() or "{}") if raw else {}
            if path.startswith("/_fake/data/"):
                if google_data.control(self, state, method, path, body) is None:
                    raise Fail(404, "NOT_FOUND", path)
                return
            with state.lock:
                if path == "/_fake/faults" and method == "POST":
                    fault = {"fault": body["fault"], "match": body.get("match", "any"), "count": body.get("count", 1), "seconds": body.get("seconds", 0), "value": body.get("value"),
                             "then": body.get("then"), "template": body.get("template")}
                    state.faults.append(fault)
                    return self.send(200, {"ok": True})
                if path == "/_fake/state":
                    return self.send(200, {
                        "versions": [state.document(v, t) for v, t in state.versions],
                        "etag": state.etag(state.head()[0]["versionNumber"]),
                    })
                if path == "/_fake/appcheck" and method == "GET":
                    return self.send(200, {sid: dict(v) for sid, v in state.appcheck.items()})
                if path == "/_fake/appcheck" and method == "POST":
                    # A colleague changing enforcement in the Firebase console.
                    self.check_update(body["service"], {}, set())
                    self.apply_update(state.project, body["service"], {"enforcementMode": body["mode"]}, {"enforcementMode"})
                    return self.send(200, {"ok": True})
                if path == "/_fake/faults/clear" and method == "POST":
                    state.faults.clear()
                    return self.send(200, {"ok": True})
                if path == "/_fake/tls" and method == "POST":
                    name = body["cert"]
                    state.tls.load_cert_chain(os.path.join(state.tls_dir, name + ".pem"), os.path.join(state.tls_dir, name + ".key"))
                    return self.send(200, {"ok": True})
                if path == "/_fake/clock" and method == "POST":
                    state.clock_offset = float(body["offset_seconds"])
                    return self.send(200, {"ok": True})
                if path == "/_fake/stats":
                    return self.send(200, dict(state.stats, faults_pending=sum(f["count"] for f in state.faults)))
                if path == "/_fake/publish" and method == "POST":
                    t = body["template"]
                    t = {k: v for k, v in t.items() if k not in ("version", "etag")}
                    n = state._append(t, body.get("user", "colleague@example.com"), "CONSOLE", "INCREMENTAL_UPDATE", body.get("description", ""), None)
                    return self.send(200, {"versionNumber": str(n), "etag": state.etag(n)})
            raise Fail(404, "NOT_FOUND", path)

    return Handler


_bomb = []


def gzip_bomb():
    """A gzip member that inflates to 1 GiB of zeros (about 1 MiB on the wire), made once."""
    if not _bomb:
        import zlib
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        zeros = bytes(1 << 20)
        parts = [c.compress(zeros) for _ in range(1024)]
        parts.append(c.flush())
        _bomb.append(b"".join(parts))
    return _bomb[0]


def certs(directory):
    """Writes a test CA and the server certificates the TLS tests switch between (see the module's notes)."""
    import ipaddress
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    day = datetime.timedelta(days=1)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def ca(cn):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn)).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - day).not_valid_after(now + 30 * day)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
                .sign(key, hashes.SHA256()))
        return key, cert

    def leaf(issuer, hosts, ips, start, end):
        issuer_key, issuer_cert = issuer
        key = ec.generate_private_key(ec.SECP256R1())
        names = [x509.DNSName(h) for h in hosts] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        cert = (x509.CertificateBuilder().subject_name(name(hosts[0])).issuer_name(issuer_cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(issuer_key, hashes.SHA256()))
        return key, cert

    def write(stem, pair, chain=()):
        key, cert = pair
        with open(os.path.join(directory, stem + ".key"), "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        with open(os.path.join(directory, stem + ".pem"), "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))

    test_ca = ca("rollout test CA")
    rogue_ca = ca("a CA nobody trusts")
    write("ca", test_ca)
    write("good", leaf(test_ca, ["localhost"], ["127.0.0.1"], now - day, now + 30 * day))
    write("expired", leaf(test_ca, ["localhost"], ["127.0.0.1"], now - 30 * day, now - day))
    write("otherhost", leaf(test_ca, ["other.example"], [], now - day, now + 30 * day))
    write("stranger", leaf(rogue_ca, ["localhost"], ["127.0.0.1"], now - day, now + 30 * day))


def keygen(private_path, public_path):
    """Writes a throwaway RSA-2048 key pair (PKCS#8 PEM, as Google's key files carry it) for a test."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with open(private_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with open(public_path, "wb") as f:
        f.write(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def main():
    # A test spawns us from a worker thread whose signals are blocked, and we inherit that mask: unblock them, so
    # that the SIGTERM the test sends when it is done stops us.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    if sys.argv[1:2] == ["keygen"]:
        return keygen(sys.argv[2], sys.argv[3])
    if sys.argv[1:2] == ["certs"]:
        return certs(sys.argv[2])
    p = argparse.ArgumentParser()
    p.add_argument("--project", required=True)
    p.add_argument("--project-number", required=True)
    p.add_argument("--client-email", required=True)
    p.add_argument("--public-key", required=True)
    p.add_argument("--key-id", required=True)
    p.add_argument("--template")
    p.add_argument("--conflict-form", choices=["412", "400"], default="400")
    p.add_argument("--token-lifetime", type=int, default=3599)
    p.add_argument("--tls")
    args = p.parse_args()
    state = State(args)
    holder = [None]
    server = Server(("127.0.0.1", 0), make_handler(state, holder))
    port = server.server_address[1]
    servers = [server]
    if args.tls:
        import ssl
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(os.path.join(args.tls, "good.pem"), os.path.join(args.tls, "good.key"))
        state.tls, state.tls_dir = context, args.tls
        server.socket = context.wrap_socket(server.socket, server_side=True)
        holder[0] = f"https://localhost:{port}/token"
        servers.append(Server(("127.0.0.1", 0), make_handler(state, holder)))
        print(f"PORT {port}", flush=True)
        print(f"CONTROL {servers[1].server_address[1]}", flush=True)
    else:
        holder[0] = f"http://127.0.0.1:{port}/token"
        print(f"PORT {port}", flush=True)
    # Stop when the test that started us goes away (stdin closes).
    threading.Thread(target=lambda: (sys.stdin.read(), [s.shutdown() for s in servers]), daemon=True).start()
    for extra in servers[1:]:
        threading.Thread(target=extra.serve_forever, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
