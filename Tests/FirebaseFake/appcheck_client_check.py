#!/usr/bin/env python3
"""Drives Google's own client (google-api-python-client, from its shipped firebaseappcheck.v1.json, with
google-auth's service-account credentials) against the fake's App Check API, and prints what it saw as JSON.

  appcheck_client_check.py ORIGIN KEY_FILE PROJECT
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
    origin, key_file, project = sys.argv[1:4]
    doc_path = os.path.join(os.path.dirname(discovery.__file__), "discovery_cache", "documents", "firebaseappcheck.v1.json")
    with open(doc_path) as f:
        doc = f.read()
    creds = service_account.Credentials.from_service_account_file(
        key_file, scopes=["https://www.googleapis.com/auth/firebase"])
    http = google_auth_httplib2.AuthorizedHttp(creds, http=httplib2.Http())
    api = discovery.build_from_document(doc, http=http, client_options={"api_endpoint": origin + "/"})
    services = api.projects().services()
    parent = f"projects/{project}"
    out = {}
    out["list_empty"] = services.list(parent=parent).execute()
    firestore = f"{parent}/services/firestore.googleapis.com"
    got = services.get(name=firestore).execute()
    out["get"] = got
    out["patch"] = services.patch(
        name=firestore, updateMask="enforcementMode",
        body={"name": firestore, "enforcementMode": "UNENFORCED", "etag": got["etag"]}).execute()
    try:
        services.patch(name=firestore, updateMask="enforcementMode",
                       body={"name": firestore, "enforcementMode": "ENFORCED", "etag": got["etag"]}).execute()
        out["stale"] = "accepted"
    except HttpError as e:
        out["stale"] = {"status": e.resp.status, "error": json.loads(e.content)["error"]["status"]}
    try:
        services.patch(name=firestore, body={"name": firestore, "enforcementMode": "ENFORCED"}).execute()
        out["no_mask"] = "accepted"
    except HttpError as e:
        out["no_mask"] = {"status": e.resp.status}
    out["batch"] = services.batchUpdate(parent=parent, body={
        "updateMask": "enforcementMode",
        "requests": [
            {"service": {"name": f"{parent}/services/firebasedatabase.googleapis.com", "enforcementMode": "UNENFORCED"}},
            {"service": {"name": f"{parent}/services/firebasestorage.googleapis.com", "enforcementMode": "UNENFORCED"}},
        ]}).execute()
    pages = []
    request = services.list(parent=parent, pageSize=2)
    while request is not None:
        page = request.execute()
        pages.append([s["name"].rsplit("/", 1)[1] for s in page.get("services", [])])
        request = services.list_next(request, page)
    out["pages"] = pages
    print(json.dumps(out))


if __name__ == "__main__":
    main()
