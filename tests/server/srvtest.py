"""tests/server/srvtest.py — start and stop `gemma serve` inside a test, on loopback, with bounded waits.

Server(binary, *args) starts the server on a free port (--port 0; the port is read from its start line),
drains its log in a thread, and stops it with SIGTERM (checking that it exits 0) on close().
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time


class Server:
    def __init__(self, binary, *args, model=None, threads=2, parallel=8, ctx=2048, start_timeout=120):
        cmd = [binary, "serve", "--port", "0", "-t", str(threads), "--parallel", str(parallel), "-c", str(ctx)]
        if model:
            cmd += ["-m", model]
        cmd += list(args)
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.log = []
        self.port = None
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening on http://\S+:(\d+)", line)
                if m and not ready.is_set():
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=drain, daemon=True)
        self.reader.start()
        if not ready.wait(start_timeout) or self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not start: " + "".join(self.log))
        self.base = f"http://127.0.0.1:{self.port}"

    # ---- raw HTTP (for what the openai client hides: status codes, the SSE bytes)
    def request(self, method, path, body=None, headers=None, timeout=300):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if headers is not None:
            h = headers
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, resp.getheaders(), data

    def post(self, path, body, **kw):
        status, _, data = self.request("POST", path, body, **kw)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data

    def metrics(self, headers=None):
        status, _, data = self.request("GET", "/metrics", headers=headers or {})
        assert status == 200, (status, data)
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):  # heap and KV; file pages of the model are not growth
                    return int(line.split()[1])
        return 0

    def threads(self, samples=10):
        """The process's threads, the fewest of a few looks 50 ms apart (a connection's thread may still be ending)."""
        n = []
        for _ in range(samples):
            n.append(len(os.listdir(f"/proc/{self.proc.pid}/task")))
            time.sleep(0.05)
        return min(n)

    def close(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise AssertionError("server did not stop within %ds of SIGTERM" % timeout)
            assert rc == 0, "server exited %d after SIGTERM:\n%s" % (rc, "".join(self.log[-20:]))
        self.reader.join(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def sse_events(raw):
    """The data payloads of an SSE body, in order; asserts the framing (data: lines, blank-line separated)."""
    text = raw.decode("utf-8")
    assert text.endswith("\n\n"), "an SSE body ends with a blank line"
    events = []
    for block in text.split("\n\n")[:-1]:
        lines = block.split("\n")
        data = [l[6:] for l in lines if l.startswith("data: ")]
        for l in lines:
            assert l.startswith("data: ") or l.startswith(":"), "unexpected SSE line %r" % l
        if data:
            events.append("\n".join(data))
    return events


def run_tests(tests, env):
    """Runs each test(env) and reports like the C tests; returns the exit status. ONLY=name[,name...] runs the
    tests whose names contain one of those (by hand: timing one test, reproducing one failure)."""
    only = [o for o in os.environ.get("ONLY", "").split(",") if o]
    if only:
        tests = [t for t in tests if any(o in t.__name__ for o in only)]
    failed = 0
    for t in tests:
        t0 = time.time()
        try:
            t(env)
            print("ok   %s (%.1fs)" % (t.__name__, time.time() - t0), flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, then the next test runs
            failed += 1
            import traceback
            traceback.print_exc()
            print("FAIL %s: %s" % (t.__name__, e), flush=True)
    print("%d tests, %d failed" % (len(tests), failed))
    return 1 if failed else 0


def binary_and_model():
    if len(sys.argv) < 2:
        sys.exit("usage: test.py GEMMA_BINARY [MODEL]")
    model = sys.argv[2] if len(sys.argv) > 2 else None
    if model and not os.path.exists(model):
        print("skip: no model at", model)
        sys.exit(77)
    return sys.argv[1], model
