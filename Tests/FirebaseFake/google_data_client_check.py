#!/usr/bin/env python3
"""Drives Google's own client (google-api-python-client, built from its shipped bigquery.v2.json, with
google-auth's service-account credentials fetching the token from the fake) against the fake's BigQuery, and
prints what it saw as JSON.

  google_data_client_check.py ORIGIN KEY_FILE PROJECT SQL_FILE PARAMS_JSON

The query's text and parameters are rollout's own (written by the test); the client runs jobs.query with a small
maxResults, polls jobs.getQueryResults while jobComplete is false, and pages with pageToken.
"""
import json
import os
import sys

import google_auth_httplib2
import httplib2
from google.oauth2 import service_account
from googleapiclient import discovery
from googleapiclient.errors import HttpError


def main():
    origin, key_file, project, sql_file, params = sys.argv[1:6]
    doc_path = os.path.join(os.path.dirname(discovery.__file__), "discovery_cache", "documents", "bigquery.v2.json")
    with open(doc_path) as f:
        doc = f.read()
    with open(sql_file) as f:
        sql = f.read()
    creds = service_account.Credentials.from_service_account_file(
        key_file, scopes=["https://www.googleapis.com/auth/bigquery"])
    http = google_auth_httplib2.AuthorizedHttp(creds, http=httplib2.Http())
    api = discovery.build_from_document(doc, http=http, client_options={"api_endpoint": origin + "/bigquery/v2/"})
    jobs = api.jobs()
    out = {}
    first = jobs.query(projectId=project, body={
        "query": sql, "useLegacySql": False, "parameterMode": "NAMED", "queryParameters": json.loads(params),
        "timeoutMs": 1000, "maxResults": 3}).execute()
    out["first_complete"] = first["jobComplete"]
    job = first["jobReference"]["jobId"]
    location = first["jobReference"].get("location")
    page = first
    polls = 0
    while not page["jobComplete"]:
        polls += 1
        page = jobs.getQueryResults(projectId=project, jobId=job, location=location, timeoutMs=1000, maxResults=3).execute()
    out["polls"] = polls
    out["schema"] = [f["name"] for f in page["schema"]["fields"]]
    out["totalRows"] = page["totalRows"]
    rows = [[c["v"] for c in r["f"]] for r in page.get("rows", [])]
    pages = 1
    while page.get("pageToken"):
        page = jobs.getQueryResults(projectId=project, jobId=job, location=location, pageToken=page["pageToken"], maxResults=3).execute()
        rows += [[c["v"] for c in r["f"]] for r in page.get("rows", [])]
        pages += 1
    out["pages"] = pages
    out["rows"] = rows
    try:
        jobs.getQueryResults(projectId=project, jobId="job_nobody_made").execute()
        out["unknown_job"] = "found"
    except HttpError as e:
        out["unknown_job"] = {"status": e.resp.status, "reason": json.loads(e.content)["error"]["errors"][0]["reason"]}
    try:
        jobs.query(projectId=project, body={"query": sql, "queryParameters": json.loads(params), "parameterMode": "NAMED"}).execute()
        out["legacy"] = "accepted"
    except HttpError as e:
        out["legacy"] = {"status": e.resp.status, "reason": json.loads(e.content)["error"]["errors"][0]["reason"]}
    try:
        jobs.query(projectId=project, body={"query": sql, "useLegacySql": False, "parameterMode": "NAMED",
                                            "queryParameters": json.loads(params)[1:]}).execute()
        out["missing_parameter"] = "accepted"
    except HttpError as e:
        out["missing_parameter"] = {"status": e.resp.status, "message": json.loads(e.content)["error"]["message"]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
