#!/usr/bin/env python3
"""The dashboard (issue 13) against real mpsd processes on 127.0.0.1.

DashboardHttpTest speaks HTTP to the data endpoints (tokens, JSON mapping, SSE replay, follow,
Last-Event-ID resume, heartbeats, series, cancel). DashboardBrowserTest drives Debian's chromium
(headless) through python3-selenium and chromium-driver against a daemon training small
Fashion-MNIST jobs on the CPU: the jobs table, a job's live charts, compare, a BenchJob, a
daemon restart under an open page, a wrong token; it writes screenshots to
$MPSD_SCREENSHOT_DIR (default: a temp dir).

Run (after building mpsd, mpsd-executor and the stubs):
  MPSD_BINARY=build/server/mpsd /usr/bin/python3 \
      tests/e2e/dashboard_test.py -v
or through CTest: ctest --test-dir build -R dashboard_test.
"""

import gzip
import hashlib
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "client", "python"))

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402

import mpsd_client  # noqa: E402  (client/python)

pb2, pb2_grpc = mpsd_client.pb2, mpsd_client.pb2_grpc
MPSD = os.environ.get("MPSD_BINARY", os.path.join(REPO, "build", "server", "mpsd"))
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def train_job(limit_train=500, batch_size=16, epochs=2, lr=0.001, seed=1, limit_test=200):
    return mpsd_client.parse_job_file("""kind: TrainJob
model: {name: convnet}
dataset: {name: fashion-mnist, root: %s, limit_train: %d, limit_test: %d}
batch_size: %d
epochs: %d
optimizer: {name: adam, learning_rate: %s}
seed: %d
device: cpu
""" % (FASHION_MNIST, limit_train, limit_test, batch_size, epochs, lr, seed), "job.yaml")


def resumable_job(limit_train=800, batch_size=4, epochs=3):
    """A job that checkpoints every epoch and resumes from its newest checkpoint after a restart:
    200 steps an epoch, so that a kill 20 steps past epoch 1's checkpoint still lands well inside
    epoch 2."""
    request = train_job(limit_train=limit_train, batch_size=batch_size, epochs=epochs, limit_test=100)
    request.train_job.checkpoint.every_epochs = 1
    request.train_job.restart_policy = "resume"
    return request


def ema_of(values, weight):
    """TensorBoard's debiased EMA (tensorboard/components/vz_line_chart2/line-chart.ts), written
    out here independently of the server's and the page's."""
    out, last, n = [], 0.0, 0
    for v in values:
        last = last * weight + (1 - weight) * v
        n += 1
        out.append(v if weight == 0 else last / (1 - weight ** n))
    return out


def kill_mid_epoch_and_restart(daemon, job_id, past_checkpoint_steps=20):
    """SIGKILLs `daemon` once job `job_id` has a checkpoint and ran `past_checkpoint_steps` steps
    beyond it (steps the resume runs again), and starts it again."""
    deadline = time.time() + 180
    while time.time() < deadline:
        job = daemon.stub.GetJob(pb2.GetJobRequest(job_id=job_id), timeout=10)
        if job.HasField("last_checkpoint") and \
                job.last_step.step >= job.last_checkpoint.step + past_checkpoint_steps:
            break
        assert job.state in (pb2.Job.QUEUED, pb2.Job.RUNNING), job
        time.sleep(0.02)
    else:
        raise AssertionError("job %s made no checkpoint" % job_id)
    daemon.stop(signal.SIGKILL)
    daemon.start()
    return job


def fast_steps_job(steps=20000):
    """`steps` steps as fast as this machine trains: mlp, batch 1 (about 30 s for 20,000 on 2
    cores)."""
    return mpsd_client.parse_job_file("""kind: TrainJob
model: {name: mlp}
dataset: {name: fashion-mnist, root: %s, limit_train: %d, limit_test: 100}
batch_size: 1
epochs: 1
optimizer: {name: sgd, learning_rate: 0.01}
device: cpu
""" % (FASHION_MNIST, steps), "fast.yaml")


def bench_job():
    return mpsd_client.parse_job_file("""kind: BenchJob
models: [mlp, convnet]
batch_sizes: [1, 8]
devices: [cpu]
warmup_iters: 1
iters: 3
""", "bench.yaml")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One mpsd with a unix socket (for submitting as the local admin) and --http-listen on a
    loopback port, with a tokens file holding an admin and a viewer token."""

    def __init__(self, directory, heartbeat_interval_s=15.0):
        self.directory = directory
        self.state_dir = os.path.join(directory, "state")
        self.socket = os.path.join(directory, "mpsd.sock")
        self.port = free_port()
        self.config = os.path.join(directory, "mpsd.yaml")
        with open(self.config, "w") as f:
            f.write("heartbeat_interval_s: %s\n" % heartbeat_interval_s)
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        self.tokens_file = os.path.join(self.state_dir, "tokens.yaml")
        self.tokens = {}
        self._write_tokens((("ada", "admin"), ("vic", "viewer"), ("sam", "submitter")))
        self.log_path = os.path.join(directory, "mpsd.log")
        self.process = None
        self.start()

    def _write_tokens(self, entries):
        """The tokens file as server/access/auth.h reads it: {name, role, sha256 of the token}, 0600."""
        lines = []
        for name, role in entries:
            token = "mpsd_" + secrets.token_hex(32)
            self.tokens[name] = token
            lines.append("- {name: %s, role: %s, sha256: %s}" %
                         (name, role, hashlib.sha256(token.encode()).hexdigest()))
        fd = os.open(self.tokens_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")

    def start(self):
        self.log = open(self.log_path, "a")
        self.process = subprocess.Popen(
            [MPSD, "--listen", "unix://" + self.socket, "--state-dir", self.state_dir,
             "--config", self.config, "--http-listen", "127.0.0.1:%d" % self.port],
            stdout=self.log, stderr=self.log)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if self.get("/healthz", token=None)[0] == 200:
                    break
            except OSError:
                pass
            if self.process.poll() is not None:
                raise AssertionError("mpsd exited: " + self.read_log())
            time.sleep(0.1)
        else:
            raise AssertionError("mpsd's HTTP listener did not come up: " + self.read_log())
        self.channel = grpc.insecure_channel("unix://" + self.socket)
        self.stub = pb2_grpc.JobServiceStub(self.channel)

    def stop(self, sig=signal.SIGTERM):
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=60)
        self.channel.close()
        self.log.close()

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def url(self):
        return "http://127.0.0.1:%d/" % self.port

    def connection(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path, token="ada", headers=None, method="GET"):
        conn = self.connection()
        h = dict(headers or {})
        if token:
            h["Authorization"] = "Bearer " + self.tokens.get(token, token)
        conn.request(method, path, headers=h)
        response = conn.getresponse()
        body = response.read()
        conn.close()
        return response.status, body, response

    def get_json(self, path, token="ada"):
        status, body, _ = self.get(path, token)
        assert status == 200, (status, body)
        return json.loads(body)

    def submit(self, spec):
        request = spec if isinstance(spec, pb2.SubmitJobRequest) else spec
        return self.stub.SubmitJob(request, timeout=30)

    def wait(self, job_id, states=("SUCCEEDED",), timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            job = self.stub.GetJob(pb2.GetJobRequest(job_id=job_id), timeout=10)
            if pb2.Job.State.Name(job.state) in states:
                return job
            time.sleep(0.1)
        raise AssertionError("job %s not in %s" % (job_id, states))

    def stored_events(self, job_id):
        return list(self.stub.StreamEvents(pb2.StreamEventsRequest(job_id=job_id), timeout=60))


class SseReader:
    """Reads an SSE response line by line: messages as (id, data) and comments."""

    def __init__(self, daemon, job_id, after_seq=0, last_event_id=None, token="ada", query=""):
        self.conn = daemon.connection(timeout=30)
        # As a browser asks: a compressed stream would hold its messages back until it ends.
        headers = {"Authorization": "Bearer " + daemon.tokens[token], "Accept": "text/event-stream",
                   "Accept-Encoding": "gzip, deflate, br"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.conn.request("GET", "/api/jobs/%s/events?after_seq=%d%s" % (job_id, after_seq, query),
                          headers=headers)
        self.response = self.conn.getresponse()
        self.comments = []

    def messages(self):
        """Yields (id, event dict) until the stream ends."""
        seq, data = None, []
        while True:
            line = self.response.fp.readline()
            if not line:
                return
            line = line.decode().rstrip("\r\n")
            if line == "":
                if data:
                    yield seq, json.loads("\n".join(data))
                seq, data = None, []
            elif line.startswith(":"):
                self.comments.append(line)
            elif line.startswith("id: "):
                seq = int(line[4:])
            elif line.startswith("data: "):
                data.append(line[6:])

    def close(self):
        self.conn.close()


class DashboardHttpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="mpsd-dashboard-http-")
        cls.daemon = Daemon(cls.dir, heartbeat_interval_s=0.5)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        log = cls.daemon.read_log()
        for token in cls.daemon.tokens.values():
            assert token not in log, "a token reached the daemon's log"
        shutil.rmtree(cls.dir)

    def test_tokens(self):
        d = self.daemon
        status, body, response = d.get("/", token=None)
        self.assertEqual(status, 200)  # The page holds no data: it asks for the token.
        self.assertIn(b"<title>mpsd</title>", body)
        self.assertIn("default-src 'self'", response.getheader("Content-Security-Policy"))
        self.assertEqual(d.get("/assets/dygraph.min.js", token=None)[0], 200)
        self.assertEqual(d.get("/assets/nope.js", token=None)[0], 404)
        self.assertEqual(d.get("/api/jobs", token=None)[0], 401)
        self.assertEqual(d.get("/api/jobs", token="mpsd_" + "0" * 64)[0], 401)
        self.assertEqual(d.get_json("/api/whoami", token="vic"), {"name": "vic", "role": "viewer"})
        # Assets are revalidated by ETag.
        _, _, response = d.get("/assets/app.js", token=None)
        etag = response.getheader("ETag")
        self.assertEqual(d.get("/assets/app.js", token=None, headers={"If-None-Match": etag})[0], 304)

    def test_jobs_json_is_the_proto_json_mapping(self):
        d = self.daemon
        job = d.submit(train_job(limit_train=64, epochs=1))
        d.wait(job.id)
        listed = json_format.Parse(json.dumps(d.get_json("/api/jobs")), pb2.ListJobsResponse())
        self.assertIn(job.id, [j.id for j in listed.jobs])
        ids = [int(j.id) for j in listed.jobs]
        self.assertEqual(ids, sorted(ids, reverse=True))
        one = json_format.Parse(json.dumps(d.get_json("/api/jobs/" + job.id)), pb2.Job())
        self.assertEqual(one, d.stub.GetJob(pb2.GetJobRequest(job_id=job.id)))
        # Gzipped for a client that accepts it (a browser), the same JSON.
        status, body, response = d.get("/api/jobs", headers={"Accept-Encoding": "gzip, br"})
        self.assertEqual(status, 200)
        self.assertEqual(response.getheader("Content-Encoding"), "gzip")
        self.assertEqual(response.getheader("Content-Type"), "application/json; charset=utf-8")
        self.assertEqual(json.loads(gzip.decompress(body)), d.get_json("/api/jobs"))
        only = d.get_json("/api/jobs?state=succeeded&kind=TrainJob&page_size=1")
        self.assertEqual(len(only["jobs"]), 1)
        self.assertIn("nextPageToken", only)
        status, body, _ = d.get("/api/jobs?state=bogus")
        self.assertEqual(status, 400)
        self.assertIn("state: unknown job state", json.loads(body)["message"])
        status, body, _ = d.get("/api/jobs/999999")
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(body)["code"], "NOT_FOUND")

    def test_events_replay_follow_and_resume_with_last_event_id(self):
        d = self.daemon
        job = d.submit(train_job(limit_train=500, batch_size=8, epochs=2))
        # Follow live from the start, drop after 25 events, reconnect as an EventSource would:
        # the original after_seq=0 in the URL and Last-Event-ID: the last id received.
        reader = SseReader(d, job.id)
        self.assertEqual(reader.response.status, 200)
        self.assertEqual(reader.response.getheader("Content-Type"), "text/event-stream")
        self.assertIsNone(reader.response.getheader("Content-Encoding"))
        seen = []
        for seq, event in reader.messages():
            self.assertEqual(int(event["seq"]), seq)
            seen.append(seq)
            if len(seen) == 25:
                break
        reader.close()
        reader = SseReader(d, job.id, after_seq=0, last_event_id=seen[-1])
        last = None
        for seq, event in reader.messages():
            seen.append(seq)
            last = event
        reader.close()
        stored = d.stored_events(job.id)
        self.assertEqual(seen, [e.seq for e in stored])  # No gap, no duplicate.
        self.assertEqual(seen, list(range(1, len(seen) + 1)))
        self.assertEqual(last["state"]["state"], "SUCCEEDED")  # Ends after the terminal event.
        # Resuming after the terminal event: 204, so an EventSource stops reconnecting.
        status, _, _ = d.get("/api/jobs/%s/events" % job.id, headers={"Last-Event-ID": str(seen[-1])})
        self.assertEqual(status, 204)
        # A replay of a finished job gives the same events, in protobuf's JSON mapping.
        reader = SseReader(d, job.id, after_seq=10)
        replay = [json_format.Parse(json.dumps(e), pb2.JobEvent()) for _, e in reader.messages()]
        reader.close()
        self.assertEqual(replay, stored[10:])
        # omit_steps_through leaves out the steps a client drew from the series.
        reader = SseReader(d, job.id, query="&omit_steps_through=%d" % seen[-1])
        kinds = {next(k for k in e if k not in ("jobId", "seq", "time")) for _, e in reader.messages()}
        reader.close()
        self.assertNotIn("step", kinds)
        self.assertIn("epoch", kinds)
        # Bad resume points are named.
        status, body, _ = d.get("/api/jobs/%s/events" % job.id, headers={"Last-Event-ID": "x"})
        self.assertEqual(status, 400)
        self.assertIn("Last-Event-ID", json.loads(body)["message"])
        status, body, _ = d.get("/api/jobs/%s/events?after_seq=%d" % (job.id, seen[-1] + 5))
        self.assertEqual(status, 400)
        self.assertIn("beyond", json.loads(body)["message"])

    def test_heartbeats_are_comments(self):
        d = self.daemon
        blocker = d.submit(train_job(limit_train=2000, batch_size=8, epochs=1))
        queued = d.submit(train_job(limit_train=64, epochs=1))
        reader = SseReader(d, queued.id)
        deadline = time.time() + 30
        messages = reader.messages()
        first = next(messages)
        self.assertEqual(first[1]["state"]["state"], "QUEUED")
        while not reader.comments and time.time() < deadline:
            line = reader.response.fp.readline().decode()
            if line.startswith(":"):
                reader.comments.append(line)
        reader.close()
        self.assertTrue(any(c.startswith(": heartbeat") for c in reader.comments), reader.comments)
        d.stub.CancelJob(pb2.CancelJobRequest(job_id=queued.id))
        d.stub.CancelJob(pb2.CancelJobRequest(job_id=blocker.id))
        d.wait(blocker.id, states=("CANCELLED",))

    def test_series_keeps_first_last_and_extremes(self):
        d = self.daemon
        job = d.submit(train_job(limit_train=500, batch_size=8, epochs=2))
        d.wait(job.id)
        steps = [e.step for e in d.stored_events(job.id) if e.WhichOneof("payload") == "step"]
        out = d.get_json("/api/jobs/%s/series?metric=loss,test_accuracy&max_points=10" % job.id)
        loss, acc = out["series"]
        self.assertEqual(loss["rawPoints"], len(steps))
        points = loss["points"]
        self.assertLessEqual(len(points), 10)
        self.assertEqual(points[0][0], steps[0].step)
        self.assertEqual(points[-1][0], steps[-1].step)
        self.assertAlmostEqual(max(p[1] for p in points), max(s.loss for s in steps), places=5)
        self.assertAlmostEqual(min(p[1] for p in points), min(s.loss for s in steps), places=5)
        self.assertEqual(acc["x"], "epoch")
        self.assertEqual([p[0] for p in acc["points"]], [1, 2])
        full = d.get_json("/api/jobs/%s/series?metric=loss&max_points=100000" % job.id)
        self.assertEqual([p[0] for p in full["series"][0]["points"]], [s.step for s in steps])
        # A metric named twice is answered once (the answer's size follows the metrics).
        twice = d.get_json("/api/jobs/%s/series?metric=loss,loss,loss&max_points=10" % job.id)
        self.assertEqual(len(twice["series"]), 1)
        for query, name in (("metric=los", "metric"), ("metric=loss&max_points=2", "max_points"),
                            ("metric=loss,train_loss,learning_rate&max_points=100000", "max_points")):
            status, body, _ = d.get("/api/jobs/%s/series?%s" % (job.id, query))
            self.assertEqual(status, 400)
            self.assertIn(name + ":", json.loads(body)["message"])

    def test_a_resumed_jobs_series_has_one_point_per_step_the_latest_attempts(self):
        d = self.daemon
        job = d.submit(resumable_job())
        killed = kill_mid_epoch_and_restart(d, job.id)
        ended = d.wait(job.id, timeout=300)
        self.assertGreater(ended.summary.resumed_at_step, 0)
        events = d.stored_events(job.id)
        steps = [e for e in events if e.WhichOneof("payload") == "step"]
        total = ended.last_step.total_steps
        # The stored log holds both attempts of the steps after the checkpoint...
        self.assertGreater(len(steps), total, "the kill came after the resume point: no step ran twice")
        latest = {}
        for e in steps:
            latest[e.step.step] = e.step  # Later events win.
        self.assertEqual(sorted(latest), list(range(1, total + 1)))
        out = d.get_json("/api/jobs/%s/series?metric=loss,train_loss&max_points=100000&smoothing=0.5" % job.id)
        loss, train_loss = out["series"]
        # ...the series one point per step, the latest attempt's value.
        self.assertEqual(loss["rawPoints"], total)
        self.assertEqual([p[0] for p in loss["points"]], list(range(1, total + 1)))
        for x, value, _ in loss["points"]:
            self.assertAlmostEqual(value, latest[x].loss, places=5)
        self.assertEqual([p[0] for p in train_loss["points"]], list(range(1, ended.last_epoch.epoch + 1)))
        expected = ema_of([latest[x].loss for x in range(1, total + 1)], 0.5)
        self.assertEqual([p[0] for p in loss["smoothed"]], list(range(1, total + 1)))
        for (x, value, _), want in zip(loss["smoothed"], expected):
            self.assertAlmostEqual(value, want, delta=1e-6)
        self.assertEqual(loss["ema"]["count"], total)
        self.assertLess(killed.last_checkpoint.step, killed.last_step.step)

    def test_jobs_filters_take_sweep_name_and_labels(self):
        d = self.daemon
        request = train_job(limit_train=64, epochs=1)
        request.name = "filter-me"
        request.labels["project"] = "dash"
        job = d.submit(request)
        d.wait(job.id)
        self.assertEqual(d.get_json("/api/jobs?kind=Sweep").get("jobs", []), [])
        named = d.get_json("/api/jobs?name=filter-%2A&label=project%3Ddash")["jobs"]
        self.assertEqual([j["id"] for j in named], [job.id])
        self.assertEqual(d.get_json("/api/jobs?label=project%3Dother").get("jobs", []), [])
        status, body, _ = d.get("/api/jobs?kind=Sweeps")
        self.assertEqual(status, 400)
        self.assertIn("Sweep", json.loads(body)["message"])
        for query, name in (("label=project", "label"),
                            ("metric=loss&smoothing=1", "smoothing")):
            path = "/api/jobs?" + query if name == "label" else "/api/jobs/%s/series?%s" % (job.id, query)
            status, body, _ = d.get(path)
            self.assertEqual(status, 400, body)
            self.assertTrue(json.loads(body)["message"].startswith(name + ":"), body)

    def test_artifacts_are_listed_and_downloaded_with_a_token(self):
        d = self.daemon
        job = d.submit(train_job(limit_train=64, epochs=1))
        d.wait(job.id)
        listed = d.get_json("/api/jobs/%s/artifacts" % job.id, token="vic")["artifacts"]
        model = next(a for a in listed if a["name"] == "model.pt")
        status, body, response = d.get("/api/jobs/%s/artifacts/model.pt" % job.id, token="vic")
        self.assertEqual(status, 200)
        self.assertEqual(len(body), int(model["sizeBytes"]))
        self.assertEqual(hashlib.sha256(body).hexdigest(), model["sha256"])
        self.assertEqual(response.getheader("Content-Disposition"), 'attachment; filename="model.pt"')
        self.assertEqual(d.get("/api/jobs/%s/artifacts/model.pt" % job.id, token=None)[0], 401)
        status, body, _ = d.get("/api/jobs/%s/artifacts/nope.pt" % job.id)
        self.assertEqual(status, 404, body)
        status, body, _ = d.get("/api/jobs/%s/artifacts/..%%2F..%%2Fmpsd.db" % job.id)
        self.assertIn(status, (400, 404), body)
        self.assertNotIn(b"SQLite", body)
        self.assertEqual(d.get("/api/jobs/999999/artifacts")[0], 404)

    def test_cancel_needs_admin_or_the_submitter(self):
        d = self.daemon
        blocker = d.submit(train_job(limit_train=2000, batch_size=8, epochs=1))
        queued = d.submit(train_job(limit_train=64, epochs=1))  # Submitted by "local".
        for token in ("vic", "sam"):
            status, body, _ = d.get("/api/jobs/%s/cancel" % queued.id, token=token, method="POST")
            self.assertEqual(status, 403, body)
        status, body, _ = d.get("/api/jobs/%s/cancel" % queued.id, token="ada", method="POST")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["state"], "CANCELLED")
        d.stub.CancelJob(pb2.CancelJobRequest(job_id=blocker.id))
        d.wait(blocker.id, states=("CANCELLED",))


class StartupOrderTest(unittest.TestCase):
    """mpsd binds every TCP listener (gRPC and HTTP) before it writes to its state dir: a start
    on a busy port fails and leaves no state dir, tokens file or database behind."""

    def start_on_busy_port(self, which):
        directory = tempfile.mkdtemp(prefix="mpsd-startup-")
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        state_dir = os.path.join(directory, "state")
        args = [MPSD, "--state-dir", state_dir, "--listen", "unix://" + os.path.join(directory, "s.sock")]
        if which == "http":
            args += ["--http-listen", "127.0.0.1:%d" % port]
        else:
            args += ["--listen", "127.0.0.1:%d" % port, "--http-listen", "127.0.0.1:%d" % free_port()]
        try:
            result = subprocess.run(args, capture_output=True, text=True, timeout=60)
            self.assertNotEqual(result.returncode, 0, result.stderr)
            self.assertIn("127.0.0.1:%d" % port, result.stderr)
            self.assertFalse(os.path.exists(state_dir),
                             "%s: %s" % (os.listdir(state_dir) if os.path.exists(state_dir) else "", result.stderr))
        finally:
            busy.close()
            shutil.rmtree(directory)

    def test_a_busy_http_port_fails_before_the_state_dir_is_written(self):
        self.start_on_busy_port("http")

    def test_a_busy_grpc_port_fails_before_the_state_dir_is_written(self):
        self.start_on_busy_port("grpc")


def make_driver(width=1400, height=1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=%d,%d" % (width, height), "--no-first-run"):
        options.add_argument(arg)
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    return webdriver.Chrome(service=service, options=options)


class DashboardBrowserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="mpsd-dashboard-browser-")
        cls.shots = os.environ.get("MPSD_SCREENSHOT_DIR") or os.path.join(cls.dir, "screenshots")
        os.makedirs(cls.shots, exist_ok=True)
        cls.daemon = Daemon(cls.dir, heartbeat_interval_s=1.0)
        cls.driver = make_driver()

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.daemon.stop()
        log = cls.daemon.read_log()
        for token in cls.daemon.tokens.values():
            assert token not in log, "a token reached the daemon's log"
        shutil.rmtree(cls.dir)

    def js(self, script):
        return self.driver.execute_script("return " + script)

    def until(self, script, timeout=120, message=""):
        deadline = time.time() + timeout
        value = None
        while time.time() < deadline:
            try:
                value = self.js(script)
            except Exception:  # The page may be between routes.
                value = None
            if value:
                return value
            time.sleep(0.1)
        self.fail("timed out waiting for %s %s (last %r)" % (script, message, value))

    def sign_in(self, token):
        from selenium.webdriver.common.by import By
        self.until("document.getElementById('token-dialog').open")
        box = self.driver.find_element(By.ID, "token-input")
        box.clear()
        box.send_keys(token)
        self.driver.find_element(By.CSS_SELECTOR, "#token-form button").click()

    def step_events(self, job_id):
        return [e for e in self.daemon.stored_events(job_id) if e.WhichOneof("payload") == "step"]

    def test_dashboard(self):
        d, driver = self.daemon, self.driver
        job_a = d.submit(train_job(limit_train=500, batch_size=4, epochs=3))

        # A wrong token shows an error, not a blank page; the right one opens the table.
        driver.get(d.url())
        self.sign_in("mpsd_" + "f" * 64)
        error = self.until("!document.getElementById('token-error').hidden && "
                           "document.getElementById('token-error').textContent")
        self.assertIn("refused", error)
        self.sign_in(d.tokens["ada"])
        self.until("document.querySelector('tr[data-job-id=\"%s\"]')" % job_a.id)

        # The table shows the job, and its progress moves.
        progress = set()
        deadline = time.time() + 120
        while time.time() < deadline and len(progress) < 2:
            text = self.js("(document.querySelector('tr[data-job-id=\"%s\"] .progress') || {}).textContent"
                           % job_a.id)
            if text:
                progress.add(text)
            time.sleep(0.1)
        self.assertGreaterEqual(len(progress), 2, progress)

        # The job's page: as many loss points as steps, a point per epoch.
        driver.get(d.url() + "#/jobs/" + job_a.id)
        self.until("window.mpsd.counters.status === 'ended'", timeout=180)
        steps = self.step_events(job_a.id)
        self.until("window.mpsd.charts.loss.numRows() === %d" % len(steps))
        xs = self.js("window.mpsd.charts.loss.rows.map(r => r[0])")
        self.assertEqual(xs, [e.step.step for e in steps])
        self.assertEqual(self.js("window.mpsd.charts.epochLoss.numRows()"), 3)
        self.assertEqual(self.js("window.mpsd.charts.epochAccuracy.numRows()"), 3)
        self.assertIn("kind: TrainJob", self.js("document.getElementById('spec-yaml').textContent"))
        self.assertIn("SUCCEEDED", self.js("document.getElementById('log').textContent"))
        driver.set_window_size(1400, 1700)  # The whole page: charts, log and spec.
        time.sleep(1.0)  # Let the charts resize and the last redraw land.
        driver.save_screenshot(os.path.join(self.shots, "job.png"))
        driver.set_window_size(1400, 1000)

        # Compare: two jobs overlaid, and the spec keys that differ.
        job_c = d.submit(train_job(limit_train=500, batch_size=4, epochs=3, lr=0.003, seed=2))
        d.wait(job_c.id)
        driver.get(d.url() + "#/compare?ids=%s,%s" % (job_a.id, job_c.id))
        self.until("window.mpsd.counters.compareSeries === 2")
        points = self.js("window.mpsd.counters.comparePoints")
        self.assertEqual(points, [len(steps), len(self.step_events(job_c.id))])
        self.assertEqual(self.js("window.mpsd.charts.compare.numColumns()"), 3)  # x + 2 jobs.
        self.assertEqual(self.js("window.mpsd.counters.diffKeys"),
                         ["optimizer.learning_rate", "seed"])
        time.sleep(0.5)
        driver.save_screenshot(os.path.join(self.shots, "compare.png"))
        # x as epoch and as wall time redraw the same two series.
        from selenium.webdriver.support.ui import Select
        from selenium.webdriver.common.by import By
        Select(driver.find_element(By.ID, "compare-x")).select_by_value("time")
        self.until("window.mpsd.charts.compare.getOption('xlabel') === 'seconds since start'")
        Select(driver.find_element(By.ID, "compare-metric")).select_by_value("test_accuracy")
        self.until("window.mpsd.counters.comparePoints.join() === '3,3'")

        # A BenchJob shows its table and its bar chart.
        bench = d.submit(bench_job())
        d.wait(bench.id)
        driver.get(d.url() + "#/jobs/" + bench.id)
        self.until("document.querySelectorAll('#bench-table tr.bench-row').length === 4")
        self.assertEqual(self.js("window.mpsd.counters.benchRows"), 4)
        self.assertTrue(self.js("!!window.mpsd.charts.bench"))
        time.sleep(0.5)
        driver.save_screenshot(os.path.join(self.shots, "bench.png"))

        # A phone-sized screen: nothing wider than the viewport but the scrolling tables.
        driver.set_window_size(390, 844)
        driver.get(d.url() + "#/jobs/" + job_a.id)
        self.until("window.mpsd.counters.status === 'ended'")
        self.assertLessEqual(self.js("document.documentElement.scrollWidth"),
                             self.js("window.innerWidth"))
        time.sleep(0.5)
        driver.save_screenshot(os.path.join(self.shots, "job-phone.png"))
        driver.set_window_size(1400, 1000)

        # mpsd dies (SIGKILL) under an open page of a running job, and starts again: the page
        # reconnects with Last-Event-ID and its curve has every stored step once.
        job_r = d.submit(train_job(limit_train=500, batch_size=1, epochs=40))  # Killed early.
        driver.get(d.url() + "#/jobs/" + job_r.id)
        self.until("window.mpsd.counters.stepsStreamed > 20")
        # Zoomed in, the chart keeps its window while points arrive.
        self.js("window.mpsd.charts.loss.graph.updateOptions({dateWindow: [2, 12]})")
        rows = self.js("window.mpsd.charts.loss.numRows()")
        self.until("window.mpsd.charts.loss.numRows() > %d + 5" % rows)
        time.sleep(0.5)  # Past a redraw.
        self.assertEqual(self.js("window.mpsd.charts.loss.graph.xAxisRange()"), [2, 12])
        d.stop(signal.SIGKILL)
        self.until("window.mpsd.counters.status === 'reconnecting'", timeout=30)
        d.start()
        self.until("window.mpsd.counters.status === 'ended'", timeout=60)
        final = d.wait(job_r.id, states=("INTERRUPTED",))
        self.assertGreaterEqual(self.js("window.mpsd.counters.reconnects"), 1)
        steps = self.step_events(job_r.id)
        self.assertGreater(len(steps), 20)
        self.until("window.mpsd.charts.loss.numRows() === %d" % len(steps))
        xs = self.js("window.mpsd.charts.loss.rows.map(r => r[0])")
        self.assertEqual(xs, [e.step.step for e in steps])  # No gap, no duplicate.
        self.assertEqual(self.js("window.mpsd.counters.lastSeq"), final.last_seq)
        self.assertIn("INTERRUPTED", self.js("document.getElementById('log').textContent"))


class DashboardExperimentTest(DashboardBrowserTest):
    """Issue 30: correct curves, fast following, sweeps, compare, job files (same daemon and
    browser set-up as DashboardBrowserTest, without re-running its test)."""

    test_dashboard = None

    def open(self, path):
        self.driver.get(self.daemon.url())
        self.driver.execute_script("sessionStorage.setItem('mpsd-token', arguments[0])",
                                   self.daemon.tokens["ada"])
        self.driver.get(self.daemon.url() + "?r=%f%s" % (time.time(), path))

    def losses(self, job_id):
        latest = {}
        for e in self.step_events(job_id):
            latest[e.step.step] = e.step.loss
        return [latest[x] for x in sorted(latest)]

    def test_following_20000_steps_is_fast_and_smoothed_from_every_step(self):
        d = self.daemon
        job = d.submit(fast_steps_job(20000))
        self.open("#/jobs/" + job.id)
        self.until("window.mpsd.counters.status === 'live'", timeout=60)
        # The header follows the steps, with an ETA.
        self.until("(document.getElementById('job-step') || {}).textContent && "
                   "document.getElementById('job-step').textContent.includes('ETA') && "
                   "parseInt(document.getElementById('job-step').textContent) > 1000", timeout=120)
        ended = d.wait(job.id, timeout=600)
        end_time = ended.finished_at.seconds + ended.finished_at.nanos / 1e9
        last_x = "(() => { const c = window.mpsd.charts.loss; return c.lastDrawnX; })()"
        self.until(last_x + " === 20000", timeout=60)
        drawn = self.js("window.mpsd.charts.loss.lastDrawAt") / 1000
        longest = self.js("window.mpsd.longestTaskMs")
        print("\n  20,000 steps followed: longest task %.0f ms, last step charted %.2f s after the "
              "job ended" % (longest, drawn - end_time), file=sys.stderr)
        # The targets (< 200 ms, < 2 s) are measured by tests/perf/dashboard_perf.py on an idle
        # machine; here, among CI's parallel tests, only bounds that the quadratic page of
        # before (5.3 s tasks, 5.7 s behind) would break and a loaded machine does not.
        self.assertLess(drawn - end_time, 10.0)
        self.assertLess(longest, 2000)
        # The executor's CPU and memory, sampled each second while the job ran.
        self.until("window.mpsd.counters.usageSamples > 10", timeout=30)
        usage = self.js("window.mpsd.charts.usage.rows")
        self.assertTrue(any(r[1] and r[1] > 10 for r in usage), usage[:5])  # CPU % of a busy core.
        self.assertTrue(all(r[3] > 50 * 2**20 for r in usage), usage[:5])  # LibTorch's RSS.
        status, body, _ = d.get("/api/jobs/%s/resources" % job.id)
        self.assertGreaterEqual(len(json.loads(body)["samples"]), len(usage))
        # Followed live: one row per step, smoothed as TensorBoard smooths all of them.
        losses = self.losses(job.id)
        self.assertEqual(len(losses), 20000)
        rows = self.js("window.mpsd.charts.loss.rows")
        self.assertEqual([r[0] for r in rows], list(range(1, 20001)))
        expected = ema_of(losses, 0.6)
        worst = max(abs(r[2] - e) for r, e in zip(rows, expected))
        self.assertLess(worst, 1e-6)
        # Drawn: at most 4,000 rows, every extreme kept; zoomed in, the window at full resolution.
        drawn = self.js("(() => { const g = window.mpsd.charts.loss.graph; const out = [];"
                        " for (let r = 0; r < g.numRows(); r++) out.push(g.getValue(r, 1)); return out; })()")
        self.assertLessEqual(len(drawn), 4000)
        self.assertAlmostEqual(max(drawn), max(losses), places=5)
        self.assertAlmostEqual(min(drawn), min(losses), places=5)
        self.js("(() => { const c = window.mpsd.charts.loss; c.graph.updateOptions({dateWindow: [1000, 1100]});"
                " c.draw(); return true; })()")
        self.assertEqual(self.js("window.mpsd.charts.loss.drawnRows"), 102)  # 999..1100.
        # Opened after the end: the series is thinned to at most 4,000 points, and the smoothed
        # curve is still the EMA of all 20,000 (not of the thinned points), for any weight.
        for weight in (0.6, 0.95):
            if weight != 0.6:
                self.js("(() => { const s = document.getElementById('smoothing'); s.value = '%s'; "
                        "s.dispatchEvent(new Event('change')); return true; })()" % weight)
                self.until("window.mpsd.counters.seriesLoads === 2")
            else:
                self.open("#/jobs/" + job.id)
                self.until("window.mpsd.counters.status === 'ended'")
            rows = self.js("window.mpsd.charts.loss.rows")
            self.assertLess(len(rows), 8001)
            smoothed = [(r[0], r[2]) for r in rows if r[2] is not None]
            self.assertLessEqual(len(smoothed), 4000)
            self.assertEqual(smoothed[-1][0], 20000)
            expected = ema_of(losses, weight)
            worst = max(abs(v - expected[x - 1]) for x, v in smoothed)
            self.assertLess(worst, 1e-6, weight)
        # Axes per unit: learning rates in scientific notation, distinct labels; the memory of a
        # CPU job is "not tracked", not a line at zero.
        labels = self.js("[...document.querySelectorAll('#chart-lr .dygraph-axis-label-y')].map(e => e.textContent)")
        self.assertTrue(labels and all("e-" in t or t == "0" for t in labels), labels)
        self.assertEqual(len(labels), len(set(labels)), labels)
        self.assertEqual(self.js("document.getElementById('chart-memory-note').hidden"), False)
        self.assertEqual(self.js("document.getElementById('chart-memory-note').textContent"),
                         "not tracked on cpu")
        self.assertEqual(self.js("[fmtBytes(1536), fmtBytes(3 * 2 ** 30), fmtBytes(512), fmtSci(0.001)]"),
                         ["1.5 KiB", "3 GiB", "512 B", "1e-3"])
        self.driver.save_screenshot(os.path.join(self.shots, "job-20000.png"))

    def test_a_resumed_jobs_chart_has_one_point_per_step(self):
        d = self.daemon
        job = d.submit(resumable_job())
        self.open("#/jobs/" + job.id)
        self.until("window.mpsd.counters.stepsStreamed > 0", timeout=60)
        kill_mid_epoch_and_restart(d, job.id)
        ended = d.wait(job.id, timeout=300)
        total = ended.last_step.total_steps
        self.assertGreater(len(self.step_events(job.id)), total)  # Both attempts are stored.
        self.until("window.mpsd.counters.status === 'ended'", timeout=60)
        self.until("window.mpsd.charts.loss.lastDrawnX === %d" % total, timeout=30)
        losses = self.losses(job.id)
        for opened in ("followed across the restart", "opened after the end"):
            rows = self.js("window.mpsd.charts.loss.rows")
            self.assertEqual([r[0] for r in rows], list(range(1, total + 1)), opened)
            for r, want in zip(rows, losses):
                self.assertAlmostEqual(r[1], want, places=5)
            self.open("#/jobs/" + job.id)
            self.until("window.mpsd.counters.status === 'ended'")

    def test_sweep_page_ranks_trials_and_compare_round_trips(self):
        d = self.daemon
        request = train_job(limit_train=256, batch_size=32, epochs=1, limit_test=200)
        request.name = "dash-sweep"
        request.labels["project"] = "dash"
        grid = request.sweep.grid.add()
        grid.path = "optimizer.learning_rate"
        grid.values.extend(["0.01", "0.001", "0.00001"])
        sweep = d.submit(request)
        self.assertEqual(sweep.kind, pb2.Job.SWEEP)
        d.wait(sweep.id, timeout=300)
        sweep = d.stub.GetJob(pb2.GetJobRequest(job_id=sweep.id))
        trials = [d.stub.GetJob(pb2.GetJobRequest(job_id=i)) for i in sweep.trial_job_ids]
        # Equal accuracies go by their loss, lowest first (as mpsctl sweep), then trial order.
        expected = [t.id for t in sorted(trials, key=lambda t: (-t.summary.test_accuracy, t.summary.test_loss, t.trial.index))]

        self.open("#/jobs/" + sweep.id)
        self.until("(window.mpsd.counters.sweepRanked || []).length === 3")
        self.assertEqual(self.js("window.mpsd.counters.sweepRanked"), expected)
        self.assertEqual(self.js("window.mpsd.counters.sweepMetric"), "test_accuracy")
        self.assertEqual(self.js("document.querySelector('#trials tr.best').dataset.jobId"), expected[0])
        self.assertEqual(self.js("[...document.querySelectorAll('#trials tbody tr')].map(r => r.querySelector('td.param').textContent)"),
                         [next(t for t in trials if t.id == i).trial.parameters[0].value for i in expected])
        self.assertIn("optimizer.learning_rate", self.js("document.querySelector('#trials thead').textContent"))
        # A parallel-coordinates plot, a line per trial, the best highlighted; every trial's loss.
        self.assertEqual(self.js("document.querySelectorAll('#parallel polyline.trial-line').length"), 3)
        self.assertEqual(self.js("document.querySelector('#parallel polyline.best').dataset.jobId"), expected[0])
        self.until("window.mpsd.counters.sweepOverlaySeries === 3")
        # Lowest first (mpsctl sweep --mode min): the same trials the other way round.
        self.js("(() => { const s = document.getElementById('sweep-mode'); s.value = 'min';"
                " s.dispatchEvent(new Event('change')); return true; })()")
        self.until("window.mpsd.counters.sweepHigher === false")
        ascending = [t.id for t in sorted(trials, key=lambda t: (t.summary.test_accuracy, t.summary.test_loss, t.trial.index))]
        self.assertEqual(self.js("window.mpsd.counters.sweepRanked"), ascending)
        # A job's own metric has no known direction: trial order until a direction is chosen.
        own = ("[{id: '7', summary: {epochs: 1, metrics: {val_top2: 0.2}}},"
               " {id: '8', summary: {epochs: 1, metrics: {val_top2: 0.9}}}]")
        rank = "(() => { const [m, r, h] = rankTrials(%s, 'val_top2', '%s'); return [m, r.map((x) => x.job.id), h === undefined]; })()"
        self.assertEqual(self.js(rank % (own, "auto")), ["val_top2", ["7", "8"], True])
        self.assertEqual(self.js(rank % (own, "max")), ["val_top2", ["8", "7"], False])
        self.assertEqual(self.js(rank % (own, "min")), ["val_top2", ["7", "8"], False])
        # Equal accuracies: the lower loss first, a trial without one after; no loss either: trial order.
        tied = ("[{id: '7', summary: {epochs: 1, valAccuracy: 0.8, valLoss: 0.67}},"
                " {id: '8', summary: {epochs: 1, valAccuracy: 0.8}},"
                " {id: '9', summary: {epochs: 1, valAccuracy: 0.8, valLoss: 0.56}},"
                " {id: '10', summary: {epochs: 1, valAccuracy: 0.7, valLoss: 0.5}}]")
        tied_rank = "(() => { const [m, r] = rankTrials(%s, 'auto'); return [m, r.map((x) => x.job.id)]; })()"
        self.assertEqual(self.js(tied_rank % tied), ["val_accuracy", ["9", "7", "8", "10"]])
        # NaN ranks last either way (it orders against nothing).
        nan = ("[{id: '7', summary: {epochs: 1, metrics: {val_top2: 'NaN'}}},"
               " {id: '8', summary: {epochs: 1, metrics: {val_top2: 0.9}}},"
               " {id: '9', summary: {epochs: 1, metrics: {val_top2: 0.2}}}]")
        self.assertEqual(self.js(rank % (nan, "min")), ["val_top2", ["9", "8", "7"], False])
        self.assertEqual(self.js(rank % (nan, "max")), ["val_top2", ["8", "9", "7"], False])
        # A trial its sweep's scheduler stopped reads EARLY_STOPPED in the tables; a cancel stays.
        self.assertEqual(self.js("stateLabel({state: 'CANCELLED', failureReason: 'EARLY_STOPPED'})"),
                         "EARLY_STOPPED")
        self.assertEqual(self.js("stateLabel({state: 'CANCELLED'})"), "CANCELLED")
        self.assertEqual(self.js("stateBadge({state: 'CANCELLED', failureReason: 'EARLY_STOPPED',"
                                 " message: 'asha stopped the trial'}).outerHTML"),
                         '<span class="state state-EARLY_STOPPED" title="asha stopped the trial">'
                         'EARLY_STOPPED</span>')
        # The YAML is a job file that submits the sweep again.
        again = mpsd_client.parse_job_file(self.js("document.getElementById('spec-yaml').textContent"), "copy.yaml")
        self.assertEqual(list(again.sweep.grid[0].values), ["0.01", "0.001", "0.00001"])
        self.driver.save_screenshot(os.path.join(self.shots, "sweep.png"))

        # The list: name and labels columns; a sweep filter in the URL.
        self.open("#/?kind=Sweep")
        self.until("window.mpsd.counters.loaded")
        row = self.js("document.querySelector('tr[data-job-id=\"%s\"]').textContent" % sweep.id)
        self.assertIn("dash-sweep", row)
        self.assertIn("project=dash", row)
        self.assertEqual(self.js("document.querySelectorAll('#jobs-body tr').length"), 1)

        # Compare: the sweep's link, legend by the varied parameter, smoothing and log scale in
        # a URL that opens the same view again; an unknown id is named, the rest drawn.
        self.open("#/jobs/" + sweep.id)
        self.until("document.getElementById('sweep-compare').href.includes('ids=')")
        self.driver.get(self.js("document.getElementById('sweep-compare').href"))
        self.until("window.mpsd.counters.compareSeries === 3")
        self.assertTrue(all("learning_rate=" in label for label in self.js("window.mpsd.counters.compareLabels")))
        self.js("(() => { document.getElementById('compare-log').click(); return true; })()")
        self.until("location.hash.includes('log=1')")
        url = self.driver.current_url
        self.assertIn("smoothing=0.6", url)
        self.driver.get(self.daemon.url() + "?again=1#" + url.split("#", 1)[1])
        self.until("window.mpsd.counters.compareSeries === 3")
        self.until("window.mpsd.charts.compare.getOption('logscale') === true")
        self.assertEqual(self.js("document.getElementById('compare-smoothing').value"), "0.6")
        # A trial's generated name ("dash-sweep/1") is no difference.
        self.assertEqual(self.js("window.mpsd.counters.diffKeys"), ["optimizer.learning_rate"])
        self.driver.save_screenshot(os.path.join(self.shots, "compare-sweep.png"))
        self.open("#/compare?jobs=%s,%s,999999&metric=test_accuracy" % (expected[0], expected[1]))
        self.until("window.mpsd.counters.compareSeries === 2")
        self.assertIn("999999", self.js("document.getElementById('compare-errors').textContent"))
        self.assertEqual(self.js("document.getElementById('compare-metric').value"), "test_accuracy")

    def test_task_metrics_chart_facts_and_sweep_rank(self):
        """Issue 28's tasks on the dashboard: a regression sweep ranks its trials by val R² as
        mpsctl does, with a column per task metric; a trial's page charts MSE, MAE and R² per
        epoch (no accuracy), lists its test metrics and the task; the list shows no accuracy."""
        d = self.daemon
        data = os.path.join(self.dir, "task-data")
        subprocess.run([sys.executable, os.path.join(REPO, "examples", "make_task_data.py"), data,
                        "--train", "512", "--test", "128"], check=True)
        request = mpsd_client.parse_job_file("""kind: TrainJob
name: dash-regression
task: regression
model: {name: mlp, dropout: 0}
dataset: {name: tensors, root: %s, validation: {source: val}}
batch_size: 64
epochs: 2
optimizer: {name: adam, learning_rate: 0.001}
seed: 1
device: cpu
sweep: {grid: {optimizer.learning_rate: [0.0001, 0.01]}}
""" % os.path.join(data, "regression.pt"), "regression.yaml")
        sweep = d.submit(request)
        d.wait(sweep.id, timeout=300)
        sweep = d.stub.GetJob(pb2.GetJobRequest(job_id=sweep.id))
        trials = [d.stub.GetJob(pb2.GetJobRequest(job_id=i)) for i in sweep.trial_job_ids]
        self.assertTrue(all(t.summary.task == "regression" for t in trials))
        expected = [t.id for t in sorted(trials, key=lambda t: (-t.summary.metrics["val_r2"], t.trial.index))]

        self.open("#/jobs/" + sweep.id)
        self.until("(window.mpsd.counters.sweepRanked || []).length === 2")
        self.assertEqual(self.js("window.mpsd.counters.sweepMetric"), "val_r2")
        self.assertEqual(self.js("window.mpsd.counters.sweepRanked"), expected)
        header = self.js("document.querySelector('#trials thead').textContent")
        for label in ("val R²", "test R²", "val MSE", "test MAE"):
            self.assertIn(label, header)
        self.assertNotIn("val acc", header)
        self.assertIn("val_mse", self.js("[...document.getElementById('sweep-metric').options].map(o => o.value)"))
        # Ranked by a loss-like metric, lowest first.
        self.js("(() => { const s = document.getElementById('sweep-metric'); s.value = 'val_mse';"
                " s.dispatchEvent(new Event('change')); return true; })()")
        self.until("window.mpsd.counters.sweepMetric === 'val_mse'")
        by_mse = [t.id for t in sorted(trials, key=lambda t: (t.summary.metrics["val_mse"], t.trial.index))]
        self.assertEqual(self.js("window.mpsd.counters.sweepRanked"), by_mse)

        best = next(t for t in trials if t.id == expected[0])
        self.open("#/jobs/" + best.id)
        self.until("window.mpsd.counters.epochPoints === 2")
        self.assertIsNotNone(self.js("document.getElementById('chart-epoch-metrics')"))
        self.assertIsNone(self.js("document.getElementById('chart-epoch-accuracy')"))
        labels = self.js("window.mpsd.charts.epochAccuracy.labels")
        self.assertEqual(labels, ["epoch", "val MSE", "test MSE", "val MAE", "test MAE", "val R²", "test R²"])
        # The chart's last val R² is the epoch event's.
        last = self.js("window.mpsd.charts.epochAccuracy.rows[1][5]")
        self.assertAlmostEqual(last, best.last_epoch.metrics["val_r2"], places=6)
        self.until("document.querySelector('.task-metric[data-metric=\"test_r2\"]')")
        shown = float(self.js("document.querySelector('.task-metric[data-metric=\"test_r2\"]').textContent"))
        self.assertAlmostEqual(shown, best.summary.metrics["test_r2"], delta=5e-4 * max(1, abs(shown)))
        self.assertIn("regression", self.js("document.querySelector('.facts').textContent"))
        self.driver.save_screenshot(os.path.join(self.shots, "job-regression.png"))

        # The list has no accuracy for a regression.
        self.open("#/?kind=TrainJob")
        self.until("document.querySelector('tr[data-job-id=\"%s\"]')" % best.id)
        row = self.js("[...document.querySelectorAll('#jobs thead th')].map(h => h.textContent)")
        cells = self.js("[...document.querySelector('tr[data-job-id=\"%s\"]').cells].map(c => c.textContent)" % best.id)
        self.assertEqual(cells[row.index("val acc")], "")
        self.assertEqual(cells[row.index("test acc")], "")

    def test_dark_mode_downloads_sorting_and_bench_log_scale(self):
        d, driver = self.daemon, self.driver
        small = d.submit(train_job(limit_train=128, batch_size=16, epochs=2))
        bench = d.submit(bench_job())
        d.wait(small.id)
        d.wait(bench.id)
        # Dark when the system is dark (prefers-color-scheme), charts included.
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                               {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        try:
            self.open("#/jobs/" + small.id)
            self.until("window.mpsd.counters.status === 'ended'")
            self.until("window.mpsd.charts.loss.lastDrawnX === %d" % len(self.step_events(small.id)))
            self.assertEqual(self.js("getComputedStyle(document.body).backgroundColor"), "rgb(13, 17, 23)")
            self.assertEqual(self.js("window.mpsd.charts.loss.graph.getOption('gridLineColor')"), "#30363d")
            time.sleep(0.5)
            driver.save_screenshot(os.path.join(self.shots, "job-dark.png"))
        finally:
            driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        self.open("#/jobs/" + small.id)
        self.until("window.mpsd.counters.status === 'ended'")
        self.until("window.mpsd.charts.loss.lastDrawnX === %d" % len(self.step_events(small.id)))
        self.assertEqual(self.js("getComputedStyle(document.body).backgroundColor"), "rgb(246, 248, 250)")
        # x as time since the start and as wall time: the same rows, x from the steps' times.
        from selenium.webdriver.support.ui import Select
        from selenium.webdriver.common.by import By
        Select(driver.find_element(By.ID, "job-x")).select_by_value("relative")
        self.until("window.mpsd.counters.xAxis === 'relative'")
        xs = self.js("(() => { const g = window.mpsd.charts.loss.graph; const out = [];"
                     " for (let r = 0; r < g.numRows(); r++) out.push(g.getValue(r, 0)); return out; })()")
        start = d.stub.GetJob(pb2.GetJobRequest(job_id=small.id)).started_at
        start_s = start.seconds + start.nanos / 1e9
        want = [e.time.seconds + e.time.nanos / 1e9 - start_s for e in self.step_events(small.id)]
        self.assertEqual(len(xs), len(want))
        for got, w in zip(xs, want):
            self.assertAlmostEqual(got, w, delta=0.002)
        self.assertEqual(self.js("window.mpsd.charts.loss.graph.getOption('xlabel')"), "seconds since start")
        Select(driver.find_element(By.ID, "job-x")).select_by_value("wall")
        self.until("window.mpsd.counters.xAxis === 'wall'")
        self.assertTrue(self.js("window.mpsd.charts.loss.graph.getValue(0, 0) > 1.7e12"))  # ms since 1970.
        Select(driver.find_element(By.ID, "job-x")).select_by_value("step")
        self.until("window.mpsd.counters.xAxis === 'step'")
        self.assertEqual(self.js("window.mpsd.charts.loss.graph.getValue(0, 0)"), 1)
        # CSV and PNG of a chart: the rows as drawn, and an image.
        csv = self.js("chartCsv(window.mpsd.charts.loss)").splitlines()
        self.assertEqual(csv[0], "step,loss,smoothed")
        steps = self.step_events(small.id)
        self.assertEqual([int(line.split(",")[0]) for line in csv[1:]], [e.step.step for e in steps])
        self.assertAlmostEqual(float(csv[1].split(",")[1]), steps[0].step.loss, places=5)
        png = driver.execute_async_script(
            "const done = arguments[0]; chartPng(window.mpsd.charts.loss.graph).then("
            "(b) => b.arrayBuffer()).then((a) => done([...new Uint8Array(a).slice(0, 8)]))")
        self.assertEqual(png, [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        self.assertEqual(self.js("document.querySelectorAll('.chart-actions button').length"), 14)  # 7 charts.
        # Its artifacts, with download buttons.
        self.until("(window.mpsd.counters.artifacts || []).includes('model.pt')")
        self.assertIn("model.pt", self.js("document.getElementById('artifacts').textContent"))
        # A bench chart on a log scale by default, no label cut off.
        self.open("#/jobs/" + bench.id)
        self.until("window.mpsd.counters.benchRows === 4")
        self.until("!!window.mpsd.charts.bench")
        self.assertTrue(self.js("window.mpsd.charts.bench.getOption('logscale')"))
        self.assertEqual(self.js("document.getElementById('bench-progress').textContent"), "4 of 4 rows")
        cut = self.js("[...document.querySelectorAll('#chart-bench .dygraph-axis-label-x')]"
                      ".filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)")
        self.assertEqual(cut, [])
        # The list sorts by any column, and the URL keeps it.
        self.open("#/")
        self.until("window.mpsd.counters.loaded")
        self.js("(() => { document.querySelector('th[data-sort=\"id\"]').click(); return true; })()")
        self.until("location.hash.includes('asc=1')")
        ids = self.js("[...document.querySelectorAll('#jobs-body tr')].map(r => Number(r.dataset.jobId))")
        self.assertEqual(ids, sorted(ids))
        self.js("(() => { document.querySelector('th[data-sort=\"kind\"]').click(); return true; })()")
        self.until("location.hash.includes('sort=kind')")
        kinds = self.js("[...document.querySelectorAll('#jobs-body tr')].map(r => r.children[4].textContent)")
        self.assertEqual(kinds, sorted(kinds))
        self.assertIn("BenchJob", kinds)

    def test_job_file_copy_submits_a_new_job_and_the_list_keeps_selection(self):
        d = self.daemon
        request = train_job(limit_train=64, epochs=1)
        request.request_id = "dash-copy-%f" % time.time()
        job = d.submit(request)
        d.wait(job.id)
        self.open("#/jobs/" + job.id)
        self.until("document.getElementById('spec-yaml')")
        text = self.js("document.getElementById('spec-yaml').textContent")
        self.assertNotIn("request_id", text)
        copy = d.submit(mpsd_client.parse_job_file(text, "copy.yaml"))
        self.assertNotEqual(copy.id, job.id)
        d.wait(copy.id)
        self.open("#/compare?ids=%s,%s" % (job.id, copy.id))
        self.until("window.mpsd.counters.compareSeries === 2")
        self.assertEqual(self.js("window.mpsd.counters.diffKeys"), [])
        # The list: idle polls rebuild no row, and a text selection in it survives them.
        blocker = d.submit(fast_steps_job(20000))
        d.wait(blocker.id, states=("RUNNING",))
        self.open("#/")
        self.until("window.mpsd.counters.loaded")
        self.js("""(() => { const cell = document.querySelector('tr[data-job-id="%s"] td.num');
            const range = document.createRange(); range.selectNodeContents(cell);
            getSelection().removeAllRanges(); getSelection().addRange(range); return true; })()""" % job.id)
        built = self.js("window.mpsd.counters.rowsBuilt")
        rendered = self.js("window.mpsd.counters.rendered")
        self.until("window.mpsd.counters.rendered >= %d" % (rendered + 2), timeout=20)  # Polls.
        self.assertEqual(self.js("String(getSelection())"), job.id)
        # Only the running job's row changed (a full rebuild would be every row each poll).
        self.assertGreaterEqual(self.js("document.querySelectorAll('#jobs-body tr').length"), 4)
        self.assertLessEqual(self.js("window.mpsd.counters.rowsBuilt") - built, 3)
        d.stub.CancelJob(pb2.CancelJobRequest(job_id=blocker.id))
        d.wait(blocker.id, states=("CANCELLED",))


if __name__ == "__main__":
    unittest.main()
