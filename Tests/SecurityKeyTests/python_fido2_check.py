"""The peer of SecurityKeyTests.pythonFido2Agrees: python-fido2 checks an assertion rollout obtained.

Reads JSON on stdin: rp, x, y (the P-256 public key), authData, signature, documents (hex change documents).
Prints JSON: whether the rpIdHash matches, the UP and UV flags, the counter, and for each document whether the
signature verifies over authData || SHA-256(document), all with python-fido2's own types.
"""
import hashlib
import json
import sys

from fido2.cose import ES256
from fido2.webauthn import AuthenticatorData

c = json.load(sys.stdin)
auth = AuthenticatorData(bytes.fromhex(c["authData"]))
key = ES256({1: 2, 3: -7, -1: 1, -2: bytes.fromhex(c["x"]), -3: bytes.fromhex(c["y"])})
verified = []
for document in c["documents"]:
    try:
        key.verify(bytes(auth) + hashlib.sha256(bytes.fromhex(document)).digest(), bytes.fromhex(c["signature"]))
        verified.append(True)
    except Exception:
        verified.append(False)
print(json.dumps({
    "rpIdHash": auth.rp_id_hash == hashlib.sha256(c["rp"].encode()).digest(),
    "userPresent": auth.is_user_present(),
    "userVerified": auth.is_user_verified(),
    "counter": auth.counter,
    "verified": verified,
}))
