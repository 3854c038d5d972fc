"""Drives `rollout serve` with Google's own client and verifies its tokens with firebase-admin (the peers).

Reads one JSON request from stdin and prints one JSON answer.

{"op": "call", "endpoint": "http://127.0.0.1:PORT", "discovery": PATH, "calls": [{"id", "resource", "method",
 "params": {...}, "body": {...}}]}
  builds the client with googleapiclient.discovery.build_from_document(document, client_options=
  {"api_endpoint": endpoint}) from the discovery document shipped in google-api-python-client, runs each call
  and answers {id: {"status": 200, "body": {...}}} or {id: {"status": CODE, "error": {...}}} (HttpError).
  resource is "projects.apps", "oauthClients" or "jwks".

{"op": "verify", "jwks_url": URL, "project_id": ID, "tokens": {id: jwt}}
  firebase-admin's app_check.verify_token with its JWKS URL pointed at the server: {id: "ok:<app_id>" |
  "rejected: <reason>"}.
"""
import json
import sys

request = json.load(sys.stdin)

if request["op"] == "call":
    from googleapiclient.discovery import build_from_document
    from googleapiclient.errors import HttpError
    from google.auth.credentials import AnonymousCredentials

    with open(request["discovery"]) as f:
        document = f.read()
    service = build_from_document(
        document,
        client_options={"api_endpoint": request["endpoint"]},
        credentials=AnonymousCredentials(),
    )
    answers = {}
    for call in request["calls"]:
        node = service
        for part in call["resource"].split("."):
            node = getattr(node, part)()
        kwargs = dict(call.get("params", {}))
        if "body" in call:
            kwargs["body"] = call["body"]
        try:
            answers[call["id"]] = {"status": 200, "body": getattr(node, call["method"])(**kwargs).execute()}
        except HttpError as e:
            try:
                error = json.loads(e.content.decode("utf-8"))
            except ValueError:
                error = {"raw": e.content.decode("utf-8", "replace")}
            answers[call["id"]] = {"status": e.resp.status, "error": error}
    json.dump(answers, sys.stdout)

elif request["op"] == "verify":
    import firebase_admin
    from firebase_admin import app_check, credentials
    from google.auth.credentials import AnonymousCredentials
    from jwt import PyJWKClientError

    class OfflineCredential(credentials.Base):
        def get_credential(self):
            return AnonymousCredentials()

    # The one change: where firebase-admin fetches the JWKS (its fixed URL is Google's /v1/jwks).
    app_check._AppCheckService._JWKS_URL = request["jwks_url"]
    app = firebase_admin.initialize_app(OfflineCredential(), {"projectId": request["project_id"]})
    verdicts = {}
    for name, token in request["tokens"].items():
        try:
            claims = app_check.verify_token(token, app=app)
            verdicts[name] = "ok:" + claims["app_id"]
        except (ValueError, PyJWKClientError) as e:  # verify_token's documented rejections
            verdicts[name] = "rejected: " + str(e)
    json.dump(verdicts, sys.stdout)
else:
    sys.exit("unknown op " + request["op"])
