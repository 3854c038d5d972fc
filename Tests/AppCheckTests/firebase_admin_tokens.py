"""Verifies App Check tokens with firebase-admin's own app_check.verify_token (the peer).

Reads {project_id, jwks, tokens: {id: jwt}} from stdin and prints {id: "ok:<app_id>" | "rejected"}. The JWKS
is served from memory instead of https://firebaseappcheck.googleapis.com/v1/jwks; nothing else is patched.
"""
import json
import sys

import firebase_admin
from firebase_admin import app_check, credentials
from google.auth.credentials import AnonymousCredentials
from jwt import PyJWKClientError


class OfflineCredential(credentials.Base):
    def get_credential(self):
        return AnonymousCredentials()


request = json.load(sys.stdin)
app = firebase_admin.initialize_app(OfflineCredential(), {"projectId": request["project_id"]})
service = app_check._get_app_check_service(app)
service._jwks_client.fetch_data = lambda: request["jwks"]

verdicts = {}
for name, token in request["tokens"].items():
    try:
        claims = app_check.verify_token(token, app=app)
        verdicts[name] = "ok:" + claims["app_id"]
    except (ValueError, PyJWKClientError):  # verify_token's documented rejections
        verdicts[name] = "rejected"
json.dump(verdicts, sys.stdout)
