#!/usr/bin/env python3
"""Drives Google's own client (google-api-python-client, built from its shipped firebasecrashlytics.v1alpha.json,
with google-auth's service-account credentials fetching the token from the fake) against the fake's
projects.apps.events.list, and prints what it saw as JSON.

  crashlytics_client_check.py ORIGIN KEY_FILE PARENT START END
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
    origin, key_file, parent, start, end = sys.argv[1:6]
    doc_path = os.path.join(os.path.dirname(discovery.__file__), "discovery_cache", "documents", "firebasecrashlytics.v1alpha.json")
    with open(doc_path) as f:
        doc = f.read()
    creds = service_account.Credentials.from_service_account_file(
        key_file, scopes=["https://www.googleapis.com/auth/cloud-platform"])
    http = google_auth_httplib2.AuthorizedHttp(creds, http=httplib2.Http())
    api = discovery.build_from_document(doc, http=http, client_options={"api_endpoint": origin + "/"})
    events = api.projects().apps().events()
    out = {"ids": [], "pages": 0}
    request = events.list(parent=parent, pageSize=7, **{"filter_interval_startTime": start, "filter_interval_endTime": end})
    while request is not None:
        page = request.execute()
        out["pages"] += 1
        out["ids"] += [e["eventId"] for e in page.get("events", [])]
        out.setdefault("first", page.get("events", [None])[0])
        request = events.list_next(request, page)
    try:
        events.list(parent=parent, **{"filter_interval_startTime": "yesterday"}).execute()
        out["bad_time"] = "accepted"
    except HttpError as e:
        out["bad_time"] = {"status": e.resp.status}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
