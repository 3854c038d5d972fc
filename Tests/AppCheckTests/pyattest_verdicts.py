"""Runs pyattest (the peer) over cases read as JSON from stdin and prints one verdict per case as JSON.

pyattest has no clock option: the test runs this script under libfaketime (Debian's) at each case group's instant.
Each case: {id, kind: attestation|assertion, ...}; each verdict: "ok" or the pyattest exception class name.
"""
import asyncio
import base64
import json
import sys

from cryptography.hazmat.primitives.asymmetric import ec
from pyattest.assertion import Assertion
from pyattest.attestation import Attestation
from pyattest.configs.apple import AppleConfig


def b64(s):
    return base64.b64decode(s)


async def verdict(case):
    config = AppleConfig(
        key_id=b64(case["key_id_b64"]),
        app_id=case["app_id"],
        production=case["production"],
        root_ca=case.get("root_pem", "").encode() or None,
    )
    try:
        if case["kind"] == "attestation":
            await Attestation(b64(case["attestation_b64"]), b64(case["nonce_b64"]), config).verify()
        else:
            key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64(case["public_key_b64"]))
            Assertion(b64(case["assertion_b64"]), b64(case["client_data_hash_b64"]), key, config).verify()
        return "ok"
    except Exception as e:  # the verdict is the exception's class, whatever it is
        return type(e).__name__


async def main():
    cases = json.load(sys.stdin)
    out = {}
    for case in cases:
        out[case["id"]] = await verdict(case)
    json.dump(out, sys.stdout)


asyncio.run(main())
