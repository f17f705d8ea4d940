#!/usr/bin/env python3
"""Measures the dashboard (issue 13) against real mpsd processes on 127.0.0.1 and prints numbers.

  0. (issue 30) following a 20,000-step job at full speed from its page: the longest
     main-thread task (Long Tasks API, installed before the page's own scripts) and the time
     from the job's end (its terminal event) to the loss chart holding its last step; the
     1,000-job list's first paint and the main-thread time of each idle update (Chromium's
     Performance.getMetrics TaskDuration over 10 s of polls, per poll);
  1. page load with 1,000 jobs listed (headless chromium: navigation to the table drawn);
  2. a job of 100,000 steps (and one of 1,000,000): the series endpoint's time, and the time to
     the first full chart in chromium;
  3. 20 dashboards following a running job (each does what the page does: the job, its series,
     the event stream, the jobs poll every 2 s): the job's step time with none and with 20
     open, in the same run, and the daemon's resident memory throughout.

Jobs for 1 and 2 are written straight into a store by mpsd_fill_store (tests/perf/fill_store.cc);
3 trains a real job on the CPU.

  cmake -S . -B build -DMPSD_BUILD_PERF=ON && cmake --build build -j 2 --target mpsd mpsd_fill_store
  /usr/bin/python3 tests/perf/dashboard_perf.py [--build build] [--skip-million]
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    parser.add_argument("--skip-million", action="store_true")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--phase-s", type=float, default=20.0)
    parser.add_argument("--only-issue30", action="store_true",
                        help="only the measurements of issue 30 (0. above)")
    return parser.parse_args()


ARGS = parse_args()
os.environ.setdefault("MPSD_BINARY", os.path.join(ARGS.build, "server", "mpsd"))
os.environ.setdefault("MPSD_PYTHON_STUBS", os.path.join(ARGS.build, "python"))
import dashboard_test as harness  # noqa: E402  (the Daemon and SseReader of the e2e test)

FILL = os.path.join(ARGS.build, "tests", "perf", "mpsd_fill_store")


def filled_daemon(directory, jobs, steps, epochs=1):
    state = os.path.join(directory, "state")
    os.makedirs(state, mode=0o700)
    t0 = time.time()
    subprocess.run([FILL, "--db", os.path.join(state, "mpsd.db"), "--jobs", str(jobs),
                    "--steps", str(steps), "--epochs", str(epochs)], check=True,
                   stdout=subprocess.DEVNULL)
    print("  (wrote %d jobs x %d steps in %.1f s)" % (jobs, steps, time.time() - t0))
    t0 = time.time()
    daemon = harness.Daemon(directory)
    print("  (mpsd started on them in %.1f s)" % (time.time() - t0))
    return daemon


def timed_get(daemon, path):
    t0 = time.perf_counter()
    status, body, _ = daemon.get(path)
    took = time.perf_counter() - t0
    assert status == 200, (status, body[:200])
    return took, body


def driver_with_token(daemon):
    driver = harness.make_driver()
    driver.get(daemon.url())
    driver.execute_script("sessionStorage.setItem('mpsd-token', arguments[0])", daemon.tokens["ada"])
    return driver


def wait_js(driver, script, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = driver.execute_script("return " + script)
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out: " + script)


# Installed before any script of the page: the longest task and the count, for any version of
# the page (the old one did not record them itself).
LONG_TASKS = """
window.__long = {max: 0, count: 0, total: 0};
new PerformanceObserver((list) => { for (const e of list.getEntries()) {
  window.__long.count++; window.__long.total += e.duration;
  window.__long.max = Math.max(window.__long.max, e.duration); } }).observe({type: 'longtask'});
"""


def instrumented_driver(daemon):
    driver = driver_with_token(daemon)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": LONG_TASKS})
    driver.execute_cdp_cmd("Performance.enable", {})
    return driver


def task_seconds(driver):
    metrics = driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return next(m["value"] for m in metrics if m["name"] == "TaskDuration")


def follow_20000_steps():
    print("0a. following a 20,000-step job (mlp, batch 1, CPU) from its page at full speed")
    directory = tempfile.mkdtemp(prefix="mpsd-perf-follow20k-")
    daemon = harness.Daemon(directory)
    try:
        request = harness.mpsd.parse_job_file("""kind: TrainJob
model: {name: mlp}
dataset: {name: fashion-mnist, root: /usr/share/datasets/fashion-mnist, limit_train: 20000, limit_test: 100}
batch_size: 1
epochs: 1
optimizer: {name: sgd, learning_rate: 0.01}
device: cpu
""", "follow.yaml")
        driver = instrumented_driver(daemon)
        job = daemon.submit(request)
        driver.get(daemon.url() + "?r=1#/jobs/" + job.id)
        last_x = "(() => { const c = window.mpsd && window.mpsd.charts.loss; " \
                 "return c && c.rows.length ? c.rows[c.rows.length - 1][0] : 0; })()"
        ended = daemon.wait(job.id, states=("SUCCEEDED", "FAILED"), timeout=600)
        end_time = ended.finished_at.seconds + ended.finished_at.nanos / 1e9
        total = ended.last_step.total_steps
        deadline = time.time() + 300
        while time.time() < deadline and driver.execute_script("return " + last_x) != total:
            time.sleep(0.05)
        shown = time.time()
        time.sleep(1.0)  # Past the last redraw.
        longest = driver.execute_script("return window.__long")
        rows = driver.execute_script("return window.mpsd.charts.loss.rows.length")
        print("  %d steps in %.1f s; loss chart rows %d" % (
            total, end_time - (ended.started_at.seconds + ended.started_at.nanos / 1e9), rows))
        print("  longest main-thread task %.0f ms (%d long tasks, %.0f ms in all)" %
              (longest["max"], longest["count"], longest["total"]))
        print("  job end -> chart holds the last step: %.2f s" % (shown - end_time))
        driver.quit()
    finally:
        daemon.stop()
        shutil.rmtree(directory)


def list_1000_paint_and_idle():
    print("0b. 1,000-job list: first paint and idle updates")
    directory = tempfile.mkdtemp(prefix="mpsd-perf-list-")
    daemon = filled_daemon(directory, jobs=1000, steps=20)
    try:
        driver = instrumented_driver(daemon)
        paints, tables = [], []
        for i in range(3):
            driver.get(daemon.url() + "?r=%d" % i)
            wait_js(driver, "window.mpsd && window.mpsd.counters.loaded")
            paints.append(driver.execute_script(
                "const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : -1"))
            tables.append(driver.execute_script("return window.mpsd.counters.loaded"))
        rows = driver.execute_script("return document.querySelectorAll('#jobs-body tr').length")
        print("  first contentful paint median %.0f ms; navigation -> table drawn (%d rows shown, 1,000 "
              "listed) median %.0f ms" % (statistics.median(paints), rows, statistics.median(tables)))
        time.sleep(3)
        t0, long0 = task_seconds(driver), driver.execute_script("return window.__long.count")
        time.sleep(10)
        busy = task_seconds(driver) - t0
        long1 = driver.execute_script("return window.__long")
        print("  idle: %.1f ms of main-thread tasks per 2 s poll (10 s: %.0f ms; long tasks %d, "
              "longest %.0f ms)" % (1000 * busy / 5, 1000 * busy, long1["count"] - long0, long1["max"]))
        driver.quit()
    finally:
        daemon.stop()
        shutil.rmtree(directory)


def page_load_1000_jobs():
    print("1. page load with 1,000 jobs listed")
    directory = tempfile.mkdtemp(prefix="mpsd-perf-1000-")
    daemon = filled_daemon(directory, jobs=1000, steps=20)
    try:
        api_times = []
        for _ in range(5):
            took, body = timed_get(daemon, "/api/jobs?page_size=1000")
            api_times.append(took)
        assert len(json.loads(body)["jobs"]) == 1000
        print("  GET /api/jobs?page_size=1000: median %.0f ms, %d bytes" %
              (1000 * statistics.median(api_times), len(body)))
        driver = driver_with_token(daemon)
        loads = []
        for _ in range(5):
            driver.get(daemon.url() + "?r=%d" % len(loads))  # A full navigation each time.
            wait_js(driver, "window.mpsd && window.mpsd.counters.loaded")
            rows = driver.execute_script("return document.querySelectorAll('#jobs-body tr').length")
            assert rows in (100, 1000), rows  # Paged by 100 since issue 30.
            loads.append(driver.execute_script("return window.mpsd.counters.loaded"))
        print("  navigation start -> 1,000 rows drawn: median %.0f ms (runs: %s)" %
              (statistics.median(loads), ", ".join("%.0f" % v for v in loads)))
        driver.quit()
    finally:
        daemon.stop()
        shutil.rmtree(directory)


def first_full_chart(steps):
    print("2. a job of %s steps: time to the first full chart" % format(steps, ","))
    directory = tempfile.mkdtemp(prefix="mpsd-perf-steps-")
    daemon = filled_daemon(directory, jobs=1, steps=steps, epochs=10)
    try:
        metrics = "loss,learning_rate,samples_per_second,step_time_ms,allocated_bytes"
        times = []
        for _ in range(3):
            took, body = timed_get(daemon, "/api/jobs/1/series?metric=%s&max_points=4000" % metrics)
            times.append(took)
        series = json.loads(body)["series"]
        loss = series[0]
        assert loss["rawPoints"] == steps, loss["rawPoints"]
        spikes = sum(1 for p in loss["points"] if p[1] > 4.0)
        print("  GET /series (5 metrics, max_points 4000): median %.0f ms, %d bytes, %d loss points,"
              " %d of %d planted spikes kept" % (1000 * statistics.median(times), len(body),
                                                 len(loss["points"]), spikes, steps // 9973))
        driver = driver_with_token(daemon)
        charts = []
        for i in range(3):
            driver.get(daemon.url() + "?r=%d#/jobs/1" % i)
            wait_js(driver, "window.mpsd && window.mpsd.counters.firstChart")
            # Drawn: the chart holds the series' points and the stream has replayed the rest.
            wait_js(driver, "window.mpsd.counters.status === 'ended'")
            charts.append(driver.execute_script("return window.mpsd.counters.firstChart"))
            rows = driver.execute_script("return window.mpsd.charts.loss.numRows()")
        print("  navigation start -> loss chart drawn with %d points: median %.0f ms (runs: %s)" %
              (rows, statistics.median(charts), ", ".join("%.0f" % v for v in charts)))
        driver.quit()
    finally:
        daemon.stop()
        shutil.rmtree(directory)


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Dashboard(threading.Thread):
    """What one open job page does: the job, its series, the event stream; plus the jobs
    table's poll every 2 s."""

    def __init__(self, daemon, job_id, stop):
        super().__init__(daemon=True)
        self.d, self.job_id, self.stop = daemon, job_id, stop
        self.events = 0

    def run(self):
        d = self.d
        d.get("/api/jobs/" + self.job_id)
        _, body, _ = d.get("/api/jobs/%s/series?metric=loss,learning_rate,samples_per_second,"
                           "step_time_ms,allocated_bytes&max_points=4000" % self.job_id)
        through = json.loads(body)["throughSeq"]
        poller = threading.Thread(target=self.poll, daemon=True)
        poller.start()
        reader = harness.SseReader(d, self.job_id, query="&omit_steps_through=%d" % through)
        reader.conn.sock.settimeout(5)
        try:
            for _ in reader.messages():
                self.events += 1
                if self.stop.is_set():
                    break
        except OSError:
            pass
        reader.close()

    def poll(self):
        while not self.stop.is_set():
            self.d.get("/api/jobs?page_size=1000&state=QUEUED,RUNNING")
            self.stop.wait(2.0)


def twenty_dashboards():
    print("3. %d dashboards following a running job" % ARGS.clients)
    directory = tempfile.mkdtemp(prefix="mpsd-perf-follow-")
    daemon = harness.Daemon(directory)
    try:
        job = daemon.submit(harness.train_job(limit_train=20000, batch_size=16, epochs=20))
        daemon.wait(job.id, states=("RUNNING",))
        pid = daemon.process.pid
        samples = []  # (time, rss)
        marks = {}
        sampling = threading.Event()

        def sample():
            while not sampling.is_set():
                samples.append((time.time(), rss_bytes(pid)))
                time.sleep(0.5)
        threading.Thread(target=sample, daemon=True).start()
        time.sleep(3)  # Past the job's start-up.
        marks["none_start"] = time.time()
        time.sleep(ARGS.phase_s)
        marks["open_start"] = time.time()
        stop = threading.Event()
        clients = [Dashboard(daemon, job.id, stop) for _ in range(ARGS.clients)]
        for c in clients:
            c.start()
        time.sleep(ARGS.phase_s)
        stop.set()
        marks["open_end"] = time.time()
        for c in clients:
            c.join(timeout=10)
        time.sleep(ARGS.phase_s)
        marks["after_end"] = time.time()
        sampling.set()
        daemon.stub.CancelJob(harness.pb2.CancelJobRequest(job_id=job.id))
        daemon.wait(job.id, states=("CANCELLED", "SUCCEEDED"))
        steps = [(e.time.seconds + e.time.nanos / 1e9, e.step.step_time_ms)
                 for e in daemon.stored_events(job.id) if e.WhichOneof("payload") == "step"]

        def phase(a, b):
            values = [ms for t, ms in steps if marks[a] <= t < marks[b]]
            return statistics.median(values) if values else float("nan"), len(values)

        def rss(a, b):
            values = [r for t, r in samples if marks[a] <= t < marks[b]]
            return min(values) / 2**20, max(values) / 2**20

        for name, a, b in (("none open", "none_start", "open_start"),
                           ("%d open" % ARGS.clients, "open_start", "open_end"),
                           ("none open again", "open_end", "after_end")):
            median, count = phase(a, b)
            lo, hi = rss(a, b)
            print("  %-16s step time median %.2f ms over %d steps; daemon RSS %.1f-%.1f MiB" %
                  (name, median, count, lo, hi))
        print("  events received per dashboard: %s" % sorted(c.events for c in clients))
    finally:
        daemon.stop()
        shutil.rmtree(directory)


if __name__ == "__main__":
    list_1000_paint_and_idle()
    follow_20000_steps()
    if ARGS.only_issue30:
        sys.exit(0)
    page_load_1000_jobs()
    first_full_chart(100000)
    if not ARGS.skip_million:
        first_full_chart(1000000)
    twenty_dashboards()
