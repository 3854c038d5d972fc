#!/usr/bin/env python3
"""Drives Google's own client (google-api-python-client, built from its shipped analyticsdata.v1beta.json, with
google-auth's service-account credentials fetching the token from the fake) against the fake's realtime report,
and prints what it saw as JSON.

  realtime_client_check.py ORIGIN KEY_FILE PROPERTY REQUEST_JSON

REQUEST_JSON is rollout's own request body (written by the test).
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
    origin, key_file, prop, request = sys.argv[1:5]
    doc_path = os.path.join(os.path.dirname(discovery.__file__), "discovery_cache", "documents", "analyticsdata.v1beta.json")
    with open(doc_path) as f:
        doc = f.read()
    creds = service_account.Credentials.from_service_account_file(
        key_file, scopes=["https://www.googleapis.com/auth/analytics.readonly"])
    http = google_auth_httplib2.AuthorizedHttp(creds, http=httplib2.Http())
    api = discovery.build_from_document(doc, http=http, client_options={"api_endpoint": origin + "/"})
    out = {}
    body = json.loads(request)
    out["report"] = api.properties().runRealtimeReport(property=prop, body=body).execute()
    wrong = dict(body, dimensions=[{"name": "minutesAgo"}, {"name": "customEvent:error_class"}])
    try:
        api.properties().runRealtimeReport(property=prop, body=wrong).execute()
        out["bad_dimension"] = "accepted"
    except HttpError as e:
        out["bad_dimension"] = {"status": e.resp.status, "message": json.loads(e.content)["error"]["message"]}
    try:
        api.properties().runRealtimeReport(property=prop, body=dict(body, minuteRanges=[{"startMinutesAgo": 45}])).execute()
        out["too_far_back"] = "accepted"
    except HttpError as e:
        out["too_far_back"] = {"status": e.resp.status}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
