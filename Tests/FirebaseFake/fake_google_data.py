"""The strict fake of Google's data APIs that rollout pulls telemetry from, served by fake_remote_config.py
(same server, same OAuth token endpoint, same faults and controls).

Written from the discovery documents google-api-python-client ships (bigquery.v2.json; read at start from the
installed package, so field names and types are checked against the document itself, not a copy):

BigQuery v2 (base /bigquery/v2/, scopes bigquery or cloud-platform[.read-only]):
- jobs.query: POST projects/{projectId}/queries with a QueryRequest. Every member must be one the document
  declares, with its type (an integer as a JSON number, an int64 as a string); useLegacySql must be false for
  standard SQL; parameterMode NAMED with queryParameters [{name, parameterType: {type}, parameterValue: {value}}];
  every @name the query uses must be declared, with the type the query needs.
- The answer is a QueryResponse: jobReference {projectId, jobId, location}, jobComplete; once complete, schema
  {fields: [{name, type, mode}]}, totalRows (a string), rows [{f: [{v}]}] with every scalar a string, pageToken
  when more rows follow (maxResults per page), totalBytesProcessed, cacheHit.
- jobs.getQueryResults: GET projects/{projectId}/queries/{jobId}?pageToken&maxResults&timeoutMs&location&startIndex;
  unknown job 404 notFound, unknown page token 400 invalid.
- Errors in Google's envelope {error: {code, message, errors: [{message, domain, reason}], status}}.

A real BigQuery runs any SQL; this fake parses every query with sqlglot's BigQuery dialect (a syntax error is 400
invalidQuery, a table outside the exports 404 notFound) and runs one: rollout's aggregation over the GA4 export and the Crashlytics
realtime export (recognised by its first line). It computes that query's result itself, from the export rows a
test loads, following the rows' documented schema (event_name, event_timestamp in microseconds, user_pseudo_id,
event_params / user_properties [{key, value: {string_value | int_value | double_value}}], platform; Crashlytics:
event_timestamp, installation_uuid, is_fatal, custom_keys [{key, value}], platform), the wildcard table
`dataset.events_*` with _TABLE_SUFFIX (a daily table replacing its day's intraday table), and the parameters;
from the query's text, whether it joins the Crashlytics export, the GA4 events it reads (`event_name IN (...)`)
and whether installations enter a cohort by their GA4 rows alone. Any other query is 400 invalidQuery.

Google Analytics Data API v1beta (analyticsdata.v1beta.json, scopes analytics[.readonly]): POST
v1beta/properties/{id}:runRealtimeReport with a RunRealtimeReportRequest checked member by member against the
document; realtime dimensions (minutesAgo, eventName, customUser:NAME read from the rows' user_properties, ...) and
metrics (eventCount, activeUsers, ...) by name, an unknown one 400; minuteRanges within the last 30 minutes; an
inListFilter on a requested dimension. Rows come from the loaded export rows whose minute is within the range of
the fake's wall clock (minutesAgo "00" is the current minute), every value a string; propertyQuota when asked,
with tokens per hour spent per request (5) and 429 RESOURCE_EXHAUSTED once none are left.

Crashlytics API v1alpha (firebasecrashlytics.v1alpha.json, scopes cloud-platform or firebase): GET
v1alpha/projects/{p}/apps/{app}/events, the query parameters the method declares (an unknown one 400, pageSize an
integer, enums checked), filter.interval.startTime/endTime as RFC 3339 (start inclusive, end exclusive), newest
first, pageSize (default 10, at most 1000) and an opaque nextPageToken; events made from the loaded "crashlytics"
rows (eventId, eventTime, installationUuid, customKeys as a map, issue.errorType FATAL / NON_FATAL, version,
operatingSystem), each checked against the document's Event schema.

Controls (plain HTTP, /_fake/data/...): POST rows {"table": "events_20260528" | "events_intraday_20260528" |
"crashlytics", "rows": [...]}; POST options {"pending_polls": n (getQueryResults answers jobComplete false n
times; -1: never complete), "pending_errors": bool (an answer that is not complete carries errors, as a failing job
reports them while it runs), "duplicate_page": bool (the second page's token leads back to the second page again),
"empty_pages": n (BigQuery: after the first page, n pages that are empty and each name a new next page;
Crashlytics: n empty pages, each naming a next one, after the last event), "page_rows": n (at most n rows a
page whatever maxResults asks, as BigQuery bounds a page by its bytes), "synthetic_per_minute": n
(the query's answer for a fleet of n events a minute, without rows: the benchmark's)}; GET stats
(queries, results calls, rows served, pages); POST realtime {"tokens_per_hour": n}. Fault matches:
bigquery_query, bigquery_results, analytics_realtime, crashlytics_events.
"""
import base64
import glob
import json
import os
import re
import secrets
import threading
import time

BIGQUERY_SCOPES = {
    "https://www.googleapis.com/auth/bigquery",
    "https://www.googleapis.com/auth/cloud-platform",
    "https://www.googleapis.com/auth/cloud-platform.read-only",
}
# Every scope a token may be asked for by the data APIs' clients (bigquery.v2.json, analyticsdata.v1beta.json,
# firebasecrashlytics.v1alpha.json).
SCOPES = BIGQUERY_SCOPES | {"https://www.googleapis.com/auth/analytics.readonly", "https://www.googleapis.com/auth/analytics"}
MARKER = "-- rollout: telemetry counts per minute x cohort x kind"
KINDS = {"session_start": "session", "AppAttestSuccess": "attestationSuccess", "AppAttestFailure": "attestationFailure",
         "app_exception": "crash", "AppAttestConfigFetch": "configFetch"}
DC_CLASSES = ["unknownSystemFailure", "featureUnsupported", "invalidInput", "invalidKey", "serverUnavailable"]


class Fail(Exception):
    def __init__(self, code, status, message, reason, headers=None):
        super().__init__(message)
        self.code, self.status, self.message, self.reason, self.headers = code, status, message, reason, headers


def discovery(name):
    import googleapiclient
    base = os.path.join(os.path.dirname(googleapiclient.__file__), "discovery_cache", "documents")
    with open(os.path.join(base, name)) as f:
        return json.load(f)


class DataState:
    def __init__(self):
        self.lock = threading.Lock()
        self.bigquery = discovery("bigquery.v2.json")
        self.analytics = discovery("analyticsdata.v1beta.json")
        self.crashlytics = discovery("firebasecrashlytics.v1alpha.json")
        self.realtime = Realtime()
        self.tables = {}  # "events_YYYYMMDD" / "events_intraday_YYYYMMDD" / "crashlytics" -> [rows]
        self.jobs = {}
        self.pending_polls = 0
        self.synthetic_rate = 0
        self.duplicate_page = False
        self.empty_pages = 0
        self.pending_errors = False
        self.page_rows = 0
        self.stats = {"queries": 0, "results": 0, "rows_served": 0, "pages": 0}

    def schema(self, name):
        return self.bigquery["schemas"][name]["properties"]


def check_members(state, obj, schema_name, where):
    """Every member declared by the document's schema, with its JSON type."""
    props = state.schema(schema_name)
    if not isinstance(obj, dict):
        raise Fail(400, "INVALID_ARGUMENT", f"Invalid JSON payload received. {where} is not an object.", "invalid")
    for k, v in obj.items():
        if k not in props:
            raise Fail(400, "INVALID_ARGUMENT", f'Invalid JSON payload received. Unknown name "{k}" at \'{where}\': Cannot find field.', "invalid")
        p = props[k]
        t = p.get("type")
        ok = {"string": isinstance(v, str), "boolean": isinstance(v, bool),
              "integer": isinstance(v, int) and not isinstance(v, bool), "array": isinstance(v, list),
              "object": isinstance(v, dict), None: isinstance(v, dict)}.get(t, True)
        if t == "string" and p.get("format") in ("int64", "uint64") and isinstance(v, int) and not isinstance(v, bool):
            ok = True  # Google's JSON mapping accepts an int64 as a number too
        if not ok:
            raise Fail(400, "INVALID_ARGUMENT", f"Invalid value at '{where}.{k}' ({t}): {json.dumps(v)[:60]}", "invalid")
        if "$ref" in p and isinstance(v, dict):
            check_members(state, v, p["$ref"], f"{where}.{k}")
        if t == "array" and "$ref" in p.get("items", {}):
            for i, item in enumerate(v):
                check_members(state, item, p["items"]["$ref"], f"{where}.{k}[{i}]")


def param(row, key, props="event_params"):
    for p in row.get(props) or []:
        if p.get("key") == key:
            return p.get("value") or {}
    return None


def string_param(row, key, props="event_params"):
    v = param(row, key, props)
    return None if v is None else v.get("string_value")


def int_param(row, key):
    v = param(row, key)
    if v is None:
        return None
    if v.get("int_value") is not None:
        return int(v["int_value"])
    if v.get("string_value") is not None:
        try:
            return int(v["string_value"])
        except ValueError:
            return None
    return None


def normalise(cohort):
    c = (cohort or "").lower()
    return {"exposed": "enabled", "": "none"}.get(c, c)


SYNTHETIC_SHARES = [("session", "", "", 0.30), ("attestationSuccess", "appAttest", "", 0.38),
                    ("attestationSuccess", "deviceCheck", "", 0.02), ("configFetch", "", "", 0.25),
                    ("crash", "", "fatal", 0.002), ("crash", "", "nonfatal", 0.001),
                    ("usersEntered", "", "", 0.001), ("usersCrashed", "", "", 0.0002)] + [
    ("attestationFailure", "appAttest", c, 0.004) for c in DC_CLASSES] + [
    ("attestationFailure", "appAttest", "rejected:nonceMismatch", 0.001)]


def synthetic(rate, params):
    """What the aggregation returns for a fleet sending `rate` events a minute (the benchmark's BigQuery: the
    answer of a pushed-down aggregation, whose size depends on minutes, cohorts and kinds, not on the rate)."""
    rows = []
    for minute in range(params["from_us"] // 60_000_000, params["through_us"] // 60_000_000):
        for cohort, share in (("enabled", 0.1), ("control", 0.1), ("none", 0.8)):
            for kind, provider, detail, part in SYNTHETIC_SHARES:
                n = int(rate * share * part)
                if n > 0:
                    rows.append([str(minute), cohort, kind, provider, detail, str(n)])
    return rows, int(rate * 300 * (params["through_us"] - params["from_us"]) // 60_000_000)


def aggregate(state, tables, params):
    """rollout's aggregation query, computed from the loaded rows."""
    if state.synthetic_rate:
        return synthetic(state.synthetic_rate, params)
    origin, start, through = params["origin_us"], params["from_us"], params["through_us"]
    first_day, last_day = params["first_day"], params["last_day"]
    daily = {t[7:] for t in state.tables if re.fullmatch(r"events_[0-9]{8}", t) and first_day <= t[7:] <= last_day}
    events, scanned = [], 0
    for table, rows in state.tables.items():
        m = re.fullmatch(r"events_(intraday_)?([0-9]{8})", table)
        if not m or not (first_day <= m.group(2) <= last_day) or (m.group(1) and m.group(2) in daily):
            continue
        for r in rows:
            scanned += len(json.dumps(r))
            name, t = r.get("event_name"), int(r["event_timestamp"])
            if name not in KINDS or name not in tables["ga4_events"] or not (origin <= t < through) or r.get("platform") not in (None, "IOS"):
                continue
            kind = KINDS[name]
            cohort = string_param(r, "AppAttestCohort")
            if cohort is None:
                cohort = string_param(r, "AppAttestCohort", "user_properties")
            provider = (string_param(r, "provider") or "") if kind in ("attestationSuccess", "attestationFailure") else ""
            detail = ""
            if kind == "attestationFailure":
                cls, code, reason = string_param(r, "error_class"), int_param(r, "error_code"), string_param(r, "reason")
                if cls == "rejected":
                    detail = "rejected:" + (reason or "")
                elif cls is not None:
                    detail = cls
                elif code is not None:
                    detail = DC_CLASSES[code] if 0 <= code < len(DC_CLASSES) else str(code)
                else:
                    detail = "rejected:" + (reason or "")
            elif kind == "crash":
                detail = "nonfatal" if int_param(r, "fatal") == 0 else "fatal"
            events.append((t, r.get("user_pseudo_id"), normalise(cohort), kind, provider, detail, "ga4"))
    if tables.get("crashlytics"):
        for r in state.tables.get("crashlytics", []):
            scanned += len(json.dumps(r))
            t = int(r["event_timestamp"])
            if not (origin <= t < through) or r.get("platform") not in (None, "IOS"):
                continue
            cohort = next((k.get("value") for k in r.get("custom_keys") or [] if k.get("key") == "AppAttestCohort"), None)
            events.append((t, r["installation_uuid"], normalise(cohort), "crash", "", "fatal" if r["is_fatal"] else "nonfatal", "crashlytics"))
    counts, entered, crashed = {}, {}, {}
    for t, inst, cohort, kind, provider, detail, src in events:
        if t >= start:
            key = (t // 60_000_000, cohort, kind, provider, detail)
            counts[key] = counts.get(key, 0) + 1
        k = (inst, cohort)
        if src == "ga4" or not tables["entered_from_ga4"]:
            entered[k] = min(entered.get(k, t), t)
        if kind == "crash" and detail == "fatal":
            crashed[k] = min(crashed.get(k, t), t)
    for firsts, kind in ((entered, "usersEntered"), (crashed, "usersCrashed")):
        for (inst, cohort), t in firsts.items():
            if t >= start:
                key = (t // 60_000_000, cohort, kind, "", "")
                counts[key] = counts.get(key, 0) + 1
    rows = [[str(k[0]), k[1], k[2], k[3], k[4], str(n)] for k, n in sorted(counts.items())]
    return rows, scanned


SCHEMA = {"fields": [
    {"name": "minute", "type": "INTEGER", "mode": "NULLABLE"}, {"name": "cohort", "type": "STRING", "mode": "NULLABLE"},
    {"name": "kind", "type": "STRING", "mode": "NULLABLE"}, {"name": "provider", "type": "STRING", "mode": "NULLABLE"},
    {"name": "detail", "type": "STRING", "mode": "NULLABLE"}, {"name": "n", "type": "INTEGER", "mode": "NULLABLE"}]}
PARAMETER_TYPES = {"origin_us": "INT64", "from_us": "INT64", "through_us": "INT64", "first_day": "STRING", "last_day": "STRING"}


def query(state, project, body):
    check_members(state, body, "QueryRequest", "query_request")
    if body.get("useLegacySql", True) is not False:
        raise Fail(400, "INVALID_ARGUMENT", "Query parameters cannot be used in legacy SQL queries.", "invalidQuery")
    sql = body.get("query") or ""
    if not sql.startswith(MARKER):
        raise Fail(400, "INVALID_ARGUMENT", "This fake runs only rollout's aggregation query.", "invalidQuery")
    tables_read = parse_standard_sql(sql)
    for t in tables_read:
        if not (re.fullmatch(r"[A-Za-z0-9_:-]+\.[A-Za-z0-9_-]+\.events_\*", t) or re.fullmatch(r"[A-Za-z0-9_:-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+", t)):
            raise Fail(404, "NOT_FOUND", f"Not found: Table {t}", "notFound")
    if body.get("parameterMode") != "NAMED":
        raise Fail(400, "INVALID_ARGUMENT", "Named parameters need parameterMode NAMED.", "invalidQuery")
    declared = {}
    for p in body.get("queryParameters") or []:
        name, ptype, pvalue = p.get("name"), (p.get("parameterType") or {}).get("type"), (p.get("parameterValue") or {}).get("value")
        if not name or not ptype or pvalue is None:
            raise Fail(400, "INVALID_ARGUMENT", "Query parameter lacks a name, a type or a value.", "invalidQuery")
        if name in declared:
            raise Fail(400, "INVALID_ARGUMENT", f"Duplicate query parameter name {name}.", "invalidQuery")
        if ptype == "INT64":
            if not re.fullmatch(r"-?[0-9]+", pvalue):
                raise Fail(400, "INVALID_ARGUMENT", f"Invalid INT64 value {pvalue!r} of query parameter {name}.", "invalidQuery")
            declared[name] = (ptype, int(pvalue))
        else:
            declared[name] = (ptype, pvalue)
    for used in sorted(set(re.findall(r"@([A-Za-z_][A-Za-z0-9_]*)", sql))):
        if used not in declared:
            raise Fail(400, "INVALID_ARGUMENT", f"Query parameter '{used}' not found at [1:1]", "invalidQuery")
        if PARAMETER_TYPES.get(used) != declared[used][0]:
            raise Fail(400, "INVALID_ARGUMENT", f"No matching signature for query parameter {used} of type {declared[used][0]}", "invalidQuery")
    for day in ("first_day", "last_day"):
        if not re.fullmatch(r"[0-9]{8}", str(declared.get(day, ("", "x"))[1])):
            raise Fail(400, "INVALID_ARGUMENT", f"{day} is not a table suffix", "invalidQuery")
    # What the query's text says on the points that vary: whether it joins the Crashlytics export, which GA4
    # events it reads (its `event_name IN (...)` list), and whether installations enter a cohort by their GA4 rows
    # alone.
    names = re.search(r"event_name IN \(([^)]*)\)", sql)
    tables = {"crashlytics": "UNNEST(custom_keys)" in sql,
              "ga4_events": set(re.findall(r"'([A-Za-z_]+)'", names.group(1))) if names else set(KINDS),
              "entered_from_ga4": "MIN(IF(src = 'ga4', t, NULL)) AS entered" in sql}
    rows, scanned = aggregate(state, tables, {k: v for k, (_, v) in declared.items()})
    job = "job_" + secrets.token_urlsafe(12).replace("-", "_")
    state.jobs[job] = {"project": project, "rows": rows, "polls": state.pending_polls, "bytes": scanned,
                       "page": body.get("maxResults") or 100_000, "served_pages": set()}
    state.stats["queries"] += 1
    return answer(state, job, None, body.get("maxResults"), first=True)


def parse_standard_sql(sql):
    """The query parsed as GoogleSQL (sqlglot's BigQuery dialect): a syntax error is 400 invalidQuery, as BigQuery
    answers it; returns the tables read (project.dataset.table, without the CTEs the query defines)."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError
    try:
        tree = sqlglot.parse_one(sql, read="bigquery")
    except ParseError as e:
        raise Fail(400, "INVALID_ARGUMENT", f"Syntax error: {str(e)[:200]}", "invalidQuery")
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    tables = set()
    for t in tree.find_all(exp.Table):
        name = ".".join(p for p in (t.catalog, t.db, t.name) if p)
        if name and name not in ctes and not isinstance(t.this, exp.Unnest):
            tables.add(name)
    return tables


def page_token(job, offset):
    return base64.urlsafe_b64encode(f"{job}:{offset}".encode()).decode().rstrip("=")


def answer(state, job, token, max_results, first=False):
    j = state.jobs[job]
    reference = {"projectId": j["project"], "jobId": job, "location": "US"}
    kind = "bigquery#queryResponse" if first else "bigquery#getQueryResultsResponse"
    if j["polls"] != 0:
        if not first and j["polls"] > 0:
            j["polls"] -= 1
        out = {"kind": kind, "jobReference": reference, "jobComplete": False}
        if state.pending_errors:
            out["errors"] = [{"reason": "invalidQuery", "location": "query", "message": "Division by zero: 1 / 0"}]
        check_members(state, out, "QueryResponse" if first else "GetQueryResultsResponse", "response")
        return out
    offset = 0
    if token is not None:
        try:
            name, at = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode().split(":")
            offset = int(at)
            assert name == job
        except Exception:
            raise Fail(400, "INVALID_ARGUMENT", "Invalid page token.", "invalid")
    size = int(max_results or j["page"])
    if state.page_rows:
        # BigQuery may answer fewer rows than maxResults (a page is also bounded by its size in bytes).
        size = min(size, state.page_rows)
    empty = state.empty_pages and offset > 0
    rows = [] if empty else j["rows"][offset:offset + size]
    out = {"kind": kind, "jobReference": reference, "jobComplete": True, "schema": SCHEMA,
           "totalRows": str(len(j["rows"])), "rows": [{"f": [{"v": v} for v in r]} for r in rows],
           "totalBytesProcessed": str(j["bytes"]), "cacheHit": False}
    nxt = offset + size
    if state.duplicate_page and offset > 0:
        nxt = offset  # the same page's token again: a broken answer the client must refuse
    if empty:
        nxt = offset + 1  # a new token every time, never a row: a broken answer the client must stop
        j["empty_served"] = j.get("empty_served", 0) + 1
    if nxt < len(j["rows"]) or (state.duplicate_page and offset > 0) or (empty and j["empty_served"] < state.empty_pages):
        out["pageToken"] = page_token(job, nxt)
    state.stats["rows_served"] += len(rows)
    state.stats["pages"] += 1
    check_members(state, out, "QueryResponse" if first else "GetQueryResultsResponse", "response")
    return out


def results(state, project, job, query):
    method = state.bigquery["resources"]["jobs"]["methods"]["getQueryResults"]
    for k, values in query.items():
        if k not in method["parameters"] and k not in state.bigquery["parameters"]:
            raise Fail(400, "INVALID_ARGUMENT", f"Unknown query parameter {k}.", "invalid")
        p = method["parameters"].get(k) or state.bigquery["parameters"][k]
        if p.get("type") == "integer" and not re.fullmatch(r"[0-9]+", values[0]):
            raise Fail(400, "INVALID_ARGUMENT", f"Invalid value for {k}: {values[0]}", "invalid")
    if job not in state.jobs or state.jobs[job]["project"] != project:
        raise Fail(404, "NOT_FOUND", f"Not found: Job {project}:US.{job}", "notFound")
    state.stats["results"] += 1
    token = (query.get("pageToken") or [None])[0]
    return answer(state, job, token, (query.get("maxResults") or [None])[0])


def route(handler, state, method, path, query, raw):
    """Serves a BigQuery path; returns False for a path that is not one."""
    m = re.match(r"^/bigquery/v2/projects/([^/]+)/queries(?:/([^/]+))?$", path)
    if not m:
        return False
    project, job = m.group(1), m.group(2)
    handler.authenticate(BIGQUERY_SCOPES)
    with state.data.lock:
        if method == "POST" and job is None:
            try:
                body = json.loads(raw.decode() or "{}")
            except ValueError:
                raise Fail(400, "INVALID_ARGUMENT", "Invalid JSON payload received.", "invalid")
            handler.send(200, query_checked(state.data, project, body))
        elif method == "GET" and job is not None:
            handler.send(200, results(state.data, project, job, query))
        else:
            raise Fail(404, "NOT_FOUND", f"Method not found: {method} {path}", "notFound")
    return True


def query_checked(data, project, body):
    return query(data, project, body)


def control(handler, state, method, path, body):
    data = state.data
    with data.lock:
        if path == "/_fake/data/rows" and method == "POST":
            data.tables.setdefault(body["table"], []).extend(body["rows"])
            return handler.send(200, {"ok": True, "rows": len(data.tables[body["table"]])})
        if path == "/_fake/data/realtime" and method == "POST":
            data.realtime.tokens_per_hour = int(body.get("tokens_per_hour", data.realtime.tokens_per_hour))
            return handler.send(200, {"ok": True})
        if path == "/_fake/data/options" and method == "POST":
            data.pending_polls = int(body.get("pending_polls", data.pending_polls))
            data.duplicate_page = bool(body.get("duplicate_page", data.duplicate_page))
            data.empty_pages = int(body.get("empty_pages", data.empty_pages))
            data.pending_errors = bool(body.get("pending_errors", data.pending_errors))
            data.page_rows = int(body.get("page_rows", data.page_rows))
            data.synthetic_rate = int(body.get("synthetic_per_minute", data.synthetic_rate))
            return handler.send(200, {"ok": True})
        if path == "/_fake/data/stats":
            return handler.send(200, dict(data.stats, realtime_requests=data.realtime.requests, tokens_per_hour=data.realtime.tokens_per_hour))
    return None


# Google Analytics Data API v1beta, realtime (analyticsdata.v1beta.json, properties.runRealtimeReport).

ANALYTICS_SCOPES = {"https://www.googleapis.com/auth/analytics.readonly", "https://www.googleapis.com/auth/analytics"}
# The realtime dimensions and metrics this fake knows (a subset of the API's realtime schema; customUser:* is any
# user-scoped custom dimension, read from the rows' user_properties).
REALTIME_DIMENSIONS = {"minutesAgo", "eventName", "platform", "appVersion", "country", "city", "deviceCategory", "unifiedScreenName"}
REALTIME_METRICS = {"eventCount", "activeUsers", "keyEvents", "screenPageViews"}


class Realtime:
    def __init__(self):
        self.tokens_per_hour = 5000
        self.tokens_per_day = 25000
        self.cost = 5
        self.requests = 0


def realtime_report(state, prop, body):
    rt = state.realtime
    doc = state.analytics
    check_members_in(doc, body, "RunRealtimeReportRequest", "request")
    dims = [d.get("name", "") for d in body.get("dimensions") or []]
    mets = [m.get("name", "") for m in body.get("metrics") or []]
    for d in dims:
        if d not in REALTIME_DIMENSIONS and not re.fullmatch(r"customUser:[A-Za-z0-9_]{1,40}", d):
            raise Fail(400, "INVALID_ARGUMENT", f"Field {d} is not a valid dimension. For a list of valid dimensions and metrics, see https://developers.google.com/analytics/devguides/reporting/data/v1/realtime-api-schema ", "badRequest")
    for m in mets:
        if m not in REALTIME_METRICS:
            raise Fail(400, "INVALID_ARGUMENT", f"Field {m} is not a valid metric.", "badRequest")
    if not mets:
        raise Fail(400, "INVALID_ARGUMENT", "At least one metric is required.", "badRequest")
    start, end = 29, 0
    for r in body.get("minuteRanges") or []:
        start, end = r.get("startMinutesAgo", 29), r.get("endMinutesAgo", 0)
        if not (0 <= end <= start <= 29):
            raise Fail(400, "INVALID_ARGUMENT", "minuteRanges must be within the last 30 minutes (0 to 29 minutes ago) with start >= end.", "badRequest")
    names = None
    f = ((body.get("dimensionFilter") or {}).get("filter") or {})
    if f:
        if f.get("fieldName") not in dims:
            raise Fail(400, "INVALID_ARGUMENT", "Filter fieldName must be a requested dimension.", "badRequest")
        names = set((f.get("inListFilter") or {}).get("values") or [])
    if rt.tokens_per_hour < rt.cost:
        raise Fail(429, "RESOURCE_EXHAUSTED", "Exhausted property tokens per hour for a property.", "rateLimitExceeded")
    rt.tokens_per_hour -= rt.cost
    rt.tokens_per_day -= rt.cost
    rt.requests += 1
    now_minute = int(time.time()) // 60
    groups, users = {}, {}
    for table, rows in state.tables.items():
        if not table.startswith("events_"):
            continue
        for r in rows:
            ago = now_minute - int(r["event_timestamp"]) // 60_000_000
            if not (end <= ago <= start) or r.get("platform") not in (None, "IOS"):
                continue
            if names is not None and r.get("event_name") not in names:
                continue
            values = []
            for d in dims:
                if d == "minutesAgo":
                    values.append(f"{ago:02d}")
                elif d == "eventName":
                    values.append(r.get("event_name"))
                elif d.startswith("customUser:"):
                    values.append(string_param(r, d[len("customUser:"):], "user_properties") or "(not set)")
                elif d == "platform":
                    values.append("iOS")
                else:
                    values.append("(not set)")
            key = tuple(values)
            groups[key] = groups.get(key, 0) + 1
            users.setdefault(key, set()).add(r.get("user_pseudo_id"))
    out_rows = []
    for key in sorted(groups):
        metric_values = []
        for m in mets:
            metric_values.append({"value": str(groups[key] if m == "eventCount" else len(users[key]) if m == "activeUsers" else 0)})
        out_rows.append({"dimensionValues": [{"value": v} for v in key], "metricValues": metric_values})
    limit = int(body.get("limit") or 10000)
    answer = {"dimensionHeaders": [{"name": d} for d in dims],
              "metricHeaders": [{"name": m, "type": "TYPE_INTEGER"} for m in mets],
              "rows": out_rows[:limit], "rowCount": len(out_rows), "kind": "analyticsData#runRealtimeReport"}
    if not out_rows:
        del answer["rows"]
    if body.get("returnPropertyQuota"):
        answer["propertyQuota"] = {
            "tokensPerDay": {"consumed": rt.cost, "remaining": rt.tokens_per_day},
            "tokensPerHour": {"consumed": rt.cost, "remaining": rt.tokens_per_hour},
            "concurrentRequests": {"consumed": 0, "remaining": 10},
            "serverErrorsPerProjectPerHour": {"consumed": 0, "remaining": 10},
            "potentiallyThresholdedRequestsPerHour": {"consumed": 0, "remaining": 120},
            "tokensPerProjectPerHour": {"consumed": rt.cost, "remaining": rt.tokens_per_hour},
        }
    check_members_in(doc, answer, "RunRealtimeReportResponse", "response")
    return answer


def check_members_in(doc, obj, schema_name, where):
    """check_members against another discovery document."""
    class View:
        def schema(self, name):
            return doc["schemas"][name]["properties"]
    check_members(View(), obj, schema_name, where)


def route_analytics(handler, state, method, path, raw):
    m = re.match(r"^/v1beta/(properties/[0-9]+):runRealtimeReport$", path)
    if not m:
        return False
    handler.authenticate(ANALYTICS_SCOPES)
    if method != "POST":
        raise Fail(404, "NOT_FOUND", f"Method not found: {method} {path}", "notFound")
    try:
        body = json.loads(raw.decode() or "{}")
    except ValueError:
        raise Fail(400, "INVALID_ARGUMENT", "Invalid JSON payload received.", "badRequest")
    with state.data.lock:
        handler.send(200, realtime_report(state.data, m.group(1), body))
    return True


# Crashlytics API v1alpha (firebasecrashlytics.v1alpha.json, projects.apps.events.list).

CRASHLYTICS_SCOPES = {"https://www.googleapis.com/auth/cloud-platform", "https://www.googleapis.com/auth/firebase"}


def rfc3339(micros):
    import datetime
    t = datetime.datetime.fromtimestamp(micros / 1e6, tz=datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text, name):
    import datetime
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise Fail(400, "INVALID_ARGUMENT", f"Invalid value at '{name}' (type.googleapis.com/google.protobuf.Timestamp), \"{text}\"", "badRequest")
    return int(t.timestamp() * 1_000_000)


def crashlytics_event(parent, r):
    import hashlib
    micros = int(r["event_timestamp"])
    eid = hashlib.sha256(f"{r['installation_uuid']}:{micros}".encode()).hexdigest()[:32]
    event = {
        "name": f"{parent}/events/{eid}", "eventId": eid, "eventTime": rfc3339(micros), "receivedTime": rfc3339(micros + 2_000_000),
        "installationUuid": r["installation_uuid"], "platform": "IOS",
        "issue": {"id": "issue-" + str(r.get("issue_id", "1")), "errorType": "FATAL" if r["is_fatal"] else "NON_FATAL"},
        "version": {"displayVersion": (r.get("application") or {}).get("display_version", "1.0")},
        "operatingSystem": {"displayVersion": (r.get("operating_system") or {}).get("display_version", "17.4")},
    }
    keys = {k["key"]: k["value"] for k in r.get("custom_keys") or []}
    if keys:
        event["customKeys"] = keys
    return micros, event


def route_crashlytics(handler, state, method, path, query):
    m = re.match(r"^/v1alpha/(projects/[^/]+/apps/[^/]+)/events$", path)
    if not m:
        return False
    handler.authenticate(CRASHLYTICS_SCOPES)
    if method != "GET":
        raise Fail(404, "NOT_FOUND", f"Method not found: {method} {path}", "notFound")
    data = state.data
    doc = data.crashlytics
    method_doc = doc["resources"]["projects"]["resources"]["apps"]["resources"]["events"]["methods"]["list"]
    for k, values in query.items():
        p = method_doc["parameters"].get(k) or doc["parameters"].get(k)
        if p is None or p.get("location") == "path":
            raise Fail(400, "INVALID_ARGUMENT", f"Invalid JSON payload received. Unknown name \"{k}\": Cannot bind query parameter.", "badRequest")
        if p.get("type") == "integer" and not re.fullmatch(r"[0-9]+", values[0]):
            raise Fail(400, "INVALID_ARGUMENT", f"Invalid value at '{k}' (TYPE_INT32), \"{values[0]}\"", "badRequest")
        if "enum" in p and any(v not in p["enum"] for v in values):
            raise Fail(400, "INVALID_ARGUMENT", f"Invalid value at '{k}'", "badRequest")
    start = parse_rfc3339(query["filter.interval.startTime"][0], "filter.interval.start_time") if "filter.interval.startTime" in query else None
    end = parse_rfc3339(query["filter.interval.endTime"][0], "filter.interval.end_time") if "filter.interval.endTime" in query else None
    size = min(int((query.get("pageSize") or ["10"])[0]) or 10, 1000)
    offset = 0
    token = (query.get("pageToken") or [None])[0]
    if token:
        try:
            offset = int(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode().split(":")[1])
        except Exception:
            raise Fail(400, "INVALID_ARGUMENT", "Invalid page token.", "badRequest")
    with data.lock:
        events = []
        for r in data.tables.get("crashlytics", []):
            micros, event = crashlytics_event(m.group(1), r)
            if (start is None or micros >= start) and (end is None or micros < end):
                events.append((micros, event["eventId"], event))
        events.sort(key=lambda e: (-e[0], e[1]))  # newest first
        page = [e[2] for e in events[offset:offset + size]]
        out = {"events": page} if page else {}
        past_end = max(0, offset - len(events)) // size  # the empty pages already served past the last event
        if offset + size < len(events) or past_end < data.empty_pages:
            out["nextPageToken"] = base64.urlsafe_b64encode(f"events:{offset + size}".encode()).decode().rstrip("=")
        data.stats["crashlytics_pages"] = data.stats.get("crashlytics_pages", 0) + 1
        check_members_in(doc, out, "ListEventsResponse", "response")
        for i, e in enumerate(page):
            check_members_in(doc, e, "Event", f"events[{i}]")
    handler.send(200, out)
    return True
