"""The peer of SecurityKeyTests' python-fido2 client test: python-fido2's own CTAP2 client (fido2.ctap2.Ctap2 over
fido2.hid.CtapHidDevice, which does the CTAPHID framing) asks rollout's software authenticator for an assertion.

The authenticator is served on a Unix SOCK_SEQPACKET socket (Tests/SoftwareAuthenticator/AuthenticatorSocket.swift):
one datagram per HID report, in = report id 0 and 64 bytes, out = 64 bytes. A CtapHidConnection subclass carries
the reports; everything above them is python-fido2's.

Reads JSON on stdin: socket, rp, credential (hex id), clientDataHash (hex). Prints JSON: credential, authData and
signature (hex), and the versions the authenticator announced in getInfo.
"""
import json
import socket
import sys

from fido2.ctap2 import Ctap2
from fido2.hid import CtapHidDevice
from fido2.hid.base import CtapHidConnection, HidDescriptor


class SocketConnection(CtapHidConnection):
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(20)
        self.sock.connect(path)

    def write_packet(self, data):
        self.sock.send(b"\0" + bytes(data))

    def read_packet(self):
        return self.sock.recv(64)

    def close(self):
        self.sock.close()


c = json.load(sys.stdin)
descriptor = HidDescriptor(c["socket"], 0, 0, 64, 64, "rollout software authenticator", None)
device = CtapHidDevice(descriptor, SocketConnection(c["socket"]))
try:
    ctap = Ctap2(device)
    response = ctap.get_assertion(
        c["rp"], bytes.fromhex(c["clientDataHash"]),
        allow_list=[{"type": "public-key", "id": bytes.fromhex(c["credential"])}],
        options={"up": True, "uv": True})
    print(json.dumps({
        "credential": bytes(response.credential["id"]).hex(),
        "authData": bytes(response.auth_data).hex(),
        "signature": bytes(response.signature).hex(),
        "versions": list(ctap.info.versions),
    }))
finally:
    device.close()
