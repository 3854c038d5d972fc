#!/usr/bin/env python3
"""Evaluates a Remote Config server template with firebase-admin's own evaluator, offline.

Used by the differential tests and benchmarks as the peer our evaluator must match bit for bit.

  rc_peer.py TEMPLATE IDS_FILE PARAM [PARAM ...]    prints, per id (one per input line, empty lines kept),
                                                    one line: value<TAB>source for each PARAM, tab-joined
  rc_peer.py --bench TEMPLATE IDS_FILE PARAM        prints evaluations per second of get_string(PARAM)
  rc_peer.py --tsv TEMPLATE IDS_FILE PARAM          prints id<TAB>value per id, as `rollout evaluate` does
"""
import json
import socket
import sys
import time


def offline_app():
    # No network: evaluation is local; the credential is never used.
    socket.socket.connect = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("network disabled"))
    import firebase_admin
    from firebase_admin import credentials
    from google.auth.credentials import AnonymousCredentials

    class Offline(credentials.Base):
        def get_credential(self):
            return AnonymousCredentials()

    return firebase_admin.initialize_app(Offline(), {"projectId": "rollout-peer"}, name="rollout-peer")


def main(argv):
    bench = argv[:1] == ["--bench"]
    tsv = argv[:1] == ["--tsv"]
    if bench or tsv:
        argv = argv[1:]
    template_path, ids_path, params = argv[0], argv[1], argv[2:]
    from firebase_admin import remote_config

    app = offline_app()
    with open(template_path, encoding="utf-8") as f:
        template = remote_config.init_server_template(app=app, template_data_json=f.read())
    with open(ids_path, encoding="utf-8") as f:
        ids = f.read().split("\n")
    if ids and ids[-1] == "":
        ids.pop()
    if bench:
        start = time.perf_counter()
        for rid in ids:
            template.evaluate({"randomization_id": rid}).get_string(params[0])
        elapsed = time.perf_counter() - start
        print(f"{len(ids) / elapsed:.1f}")
        return 0
    out = sys.stdout
    if tsv:
        for rid in ids:
            out.write(f"{rid}\t{template.evaluate({'randomization_id': rid}).get_string(params[0])}\n")
        return 0
    for rid in ids:
        config = template.evaluate({"randomization_id": rid})
        cells = []
        for p in params:
            source = config.get_value_source(p)
            value = config.get_string(p) if source == "remote" else ""
            cells.append(f"{value}\t{source}")
        out.write("\t".join(cells) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
