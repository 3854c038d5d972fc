"""A strict fake of the Vonage Verify v2 API (https://developer.vonage.com/en/api/verify.v2), written from its public
reference, on a loopback port. It prints "PORT n" when ready.

Start: POST /v2/verify {brand (1-18 chars), workflow: [1-3 of {channel, to (E.164 digits, no +)}], locale?,
channel_timeout? (15-900, default 180), client_ref?, code_length? (4-10, default 4)} -> 202 {request_id};
409 while a verification to the same number is in progress; 422 invalid_parameters; 429 over the rate limit;
401 without the right Basic credentials. Check: POST /v2/verify/{id} {code} -> 200 {request_id, status:
"completed"}, 400 wrong code, 410 at the third wrong code (the workflow ends), 404 unknown or finished. Cancel:
DELETE /v2/verify/{id} -> 204. Next channel: POST /v2/verify/{id}/next_workflow -> 200, or 409 when none is left.
Errors are application/problem+json {type, title, detail, instance}.

Time, as the reference describes it: each channel of the workflow waits `channel_timeout` seconds for the code,
then the next channel is tried (same code); when the last channel's wait runs out the request is over (status
"expired"), and checking it answers 404 like any finished request (410 is only for too many wrong codes); a new
verification to the number may then start. The fake's clock is its monotonic clock plus an offset the test moves,
so no test sleeps: POST /_control/clock {"advance": SECONDS} moves it forward, POST /_control/expire/{id} ends a
request now as if its last channel had timed out. Control calls take no credentials and answer 200 {"state"}.
POST /_control/hold makes the next code checks wait (before any answer) until POST /_control/release; GET
/_control/held says how many are waiting: a test holds the provider's answer to see what the caller does meanwhile.

What would reach the phone (channel, number, code) is appended to the --outbox file, one JSON line per message:
the tests read the code there, as a person reads their SMS.
"""
import base64, json, re, sys, threading, time, uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
KEY, SECRET, OUTBOX = args["--key"], args["--secret"], args["--outbox"]
RATE = int(args.get("--rate-limit", "100"))
CHANNELS = {"sms", "voice", "whatsapp", "email", "rcs", "silent_auth"}
TOP = {"brand", "workflow", "locale", "channel_timeout", "client_ref", "code_length", "fraud_check"}
lock = threading.Lock()
released = threading.Event()
released.set()
held = [0]
requests = {}
starts = []
offset = [0.0]


def now():
    return time.monotonic() + offset[0]


def tick(rid, r):
    """Moves request `r` along its workflow as its channels time out (under the lock)."""
    while r["state"] == "active" and now() >= r["deadline"]:
        if r["step"] + 1 < len(r["workflow"]):
            r["step"] += 1
            r["deadline"] += r["timeout"]
            send(rid, r)
        else:
            r["state"] = "expired"


def tick_all():
    for rid, r in requests.items():
        tick(rid, r)


def send(rid, r):
    step = r["workflow"][r["step"]]
    with open(OUTBOX, "a") as f:
        f.write(json.dumps({"request_id": rid, "channel": step["channel"], "to": step["to"], "code": r["code"]}) + "\n")


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def problem(self, status, title, detail, extra=None):
        body = {"type": "https://developer.vonage.com/api-errors#" + title.lower().replace(" ", "-"),
                "title": title, "detail": detail, "instance": str(uuid.uuid4())}
        body.update(extra or {})
        self.answer(status, body, "application/problem+json")

    def answer(self, status, body=None, kind="application/json"):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorised(self):
        expected = "Basic " + base64.b64encode(f"{KEY}:{SECRET}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            self.problem(401, "Unauthorized", "You did not provide correct credentials.")
            return False
        return True

    def body(self):
        if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
            return None
        n = int(self.headers.get("Content-Length", "0"))
        try:
            value = json.loads(self.rfile.read(n))
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def control(self):
        body = self.body() or {}
        if self.path in ("/_control/hold", "/_control/release"):
            (released.clear if self.path == "/_control/hold" else released.set)()
            return self.answer(200, {"state": "held" if not released.is_set() else "released"})
        with lock:
            if self.path == "/_control/clock":
                seconds = body.get("advance")
                if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
                    return self.problem(422, "Invalid params", "advance takes a number of seconds >= 0")
                offset[0] += seconds
                tick_all()
                return self.answer(200, {"state": {rid: r["state"] for rid, r in requests.items()}})
            m = re.fullmatch(r"/_control/expire/([0-9a-f-]{36})", self.path)
            r = requests.get(m.group(1)) if m else None
            if r is None:
                return self.problem(404, "Not Found", "No such request.")
            if r["state"] == "active":
                r["state"] = "expired"
            return self.answer(200, {"state": r["state"]})

    def do_GET(self):
        if self.path == "/_control/held":
            with lock:
                return self.answer(200, {"held": held[0]})
        return self.problem(404, "Not Found", "No such resource.")

    def do_POST(self):
        if self.path.startswith("/_control/"):
            return self.control()
        if not self.authorised():
            return
        body = self.body()
        if body is None:
            return self.problem(400, "Bad Request", "The request body is not a JSON object.")
        if self.path == "/v2/verify":
            return self.start(body)
        m = re.fullmatch(r"/v2/verify/([0-9a-f-]{36})(/next_workflow)?", self.path)
        if not m:
            return self.problem(404, "Not Found", "No such resource.")
        if not m.group(2) and not released.is_set():
            with lock:
                held[0] += 1
            released.wait(60)
            with lock:
                held[0] -= 1
        with lock:
            r = requests.get(m.group(1))
            if r is not None:
                tick(m.group(1), r)
            if r is None or r["state"] != "active":
                return self.problem(404, "Not Found", f"Request '{m.group(1)}' was not found or it has been verified already.")
            if m.group(2):
                if r["step"] + 1 >= len(r["workflow"]):
                    return self.problem(409, "Conflict", "There are no more workflows to try.")
                r["step"] += 1
                r["deadline"] = now() + r["timeout"]
                send(m.group(1), r)
                return self.answer(200, {})
            code = body.get("code")
            if set(body) != {"code"} or not isinstance(code, str) or not re.fullmatch(r"[A-Za-z0-9]{4,10}", code):
                return self.problem(422, "Invalid params", "The value of one or more parameters is invalid.",
                                    {"invalid_parameters": [{"name": "code", "reason": "Invalid code"}]})
            if code == r["code"]:
                r["state"] = "completed"
                return self.answer(200, {"request_id": m.group(1), "status": "completed"})
            r["wrong"] += 1
            if r["wrong"] >= 3:
                r["state"] = "failed"
                return self.problem(410, "Gone", "Invalid code. Too many attempts: the workflow was terminated.")
            return self.problem(400, "Invalid Code", "The code you provided does not match the expected value.")

    def start(self, body):
        invalid = []
        for name in body:
            if name not in TOP:
                invalid.append({"name": name, "reason": "Unknown parameter"})
        brand = body.get("brand")
        if not isinstance(brand, str) or not 1 <= len(brand) <= 18:
            invalid.append({"name": "brand", "reason": "Must be 1 to 18 characters"})
        workflow = body.get("workflow")
        if not isinstance(workflow, list) or not 1 <= len(workflow) <= 3:
            invalid.append({"name": "workflow", "reason": "Must hold 1 to 3 channels"})
            workflow = []
        for i, step in enumerate(workflow):
            if not isinstance(step, dict) or step.get("channel") not in CHANNELS:
                invalid.append({"name": f"workflow[{i}].channel", "reason": "Unknown channel"})
            elif not isinstance(step.get("to"), str) or not re.fullmatch(r"[1-9][0-9]{6,14}", step["to"]):
                invalid.append({"name": f"workflow[{i}].to", "reason": "Must be an E.164 number without +"})
        length = body.get("code_length", 4)
        if not isinstance(length, int) or isinstance(length, bool) or not 4 <= length <= 10:
            invalid.append({"name": "code_length", "reason": "Must be 4 to 10"})
        timeout = body.get("channel_timeout", 180)
        if not isinstance(timeout, int) or isinstance(timeout, bool) or not 15 <= timeout <= 900:
            invalid.append({"name": "channel_timeout", "reason": "Must be 15 to 900"})
        if invalid:
            return self.problem(422, "Invalid params", "The value of one or more parameters is invalid.",
                                {"invalid_parameters": invalid})
        with lock:
            tick_all()
            t = now()
            starts[:] = [s for s in starts if t - s < 60]
            if len(starts) >= RATE:
                return self.problem(429, "Rate Limit Hit", "Please wait, then retry your request.")
            starts.append(t)
            numbers = {s["to"] for s in workflow}
            for r in requests.values():
                if r["state"] == "active" and numbers & {s["to"] for s in r["workflow"]}:
                    return self.problem(409, "Conflict", "Concurrent verifications to the same number are not allowed.")
            rid = str(uuid.uuid4())
            code = "".join(str(uuid.uuid4().int % 10 ** length).zfill(length))
            requests[rid] = {"workflow": workflow, "step": 0, "code": code, "wrong": 0, "state": "active",
                             "timeout": timeout, "deadline": now() + timeout}
            send(rid, requests[rid])
        return self.answer(202, {"request_id": rid})

    def do_DELETE(self):
        if not self.authorised():
            return
        m = re.fullmatch(r"/v2/verify/([0-9a-f-]{36})", self.path)
        with lock:
            r = requests.get(m.group(1)) if m else None
            if r is not None:
                tick(m.group(1), r)
            if r is None or r["state"] != "active":
                return self.problem(404, "Not Found", "Request was not found or it has been verified already.")
            r["state"] = "cancelled"
        self.answer(204)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("PORT", server.server_address[1], flush=True)
threading.Thread(target=lambda: (sys.stdin.read(), server.shutdown()), daemon=True).start()
server.serve_forever()
