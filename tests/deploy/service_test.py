#!/usr/bin/env python3
"""mpsd as a service, through the real binaries: --version, --check-config, the sd_notify
protocol a systemd Type=notify unit relies on (READY=1, WATCHDOG=1, STOPPING=1), log_file with
size-based rotation.

The sd_notify test plays systemd's part: it binds the datagram socket named by $NOTIFY_SOCKET and
sets $WATCHDOG_USEC, as systemd does for a unit with Type=notify and WatchdogSec.

Run: MPSD_BINARY=BUILD/server/mpsd MPSCTL_BINARY=BUILD/client/mpsctl MPSD_VERSION=0.1.0
     MPSD_TORCH_VERSION=1.13.0 MPSD_HAVE_LIBSYSTEMD=1 python3 tests/deploy/service_test.py -v
or through CTest: ctest --test-dir BUILD -R service_test.
"""

import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MPSD = os.environ.get("MPSD_BINARY") or os.path.join(REPO, "build", "server", "mpsd")
MPSCTL = os.environ.get("MPSCTL_BINARY") or os.path.join(REPO, "build", "client", "mpsctl")


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kwargs)


class VersionTest(unittest.TestCase):
    def check(self, program, binary):
        result = run([binary, "--version"])
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(len(lines), 3, result.stdout)
        self.assertEqual(lines[0], "%s %s" % (program, os.environ.get("MPSD_VERSION", "0.1.0")))
        commit = re.fullmatch(r"git commit: (unknown|([0-9a-f]{7,40})(-dirty)?)", lines[1])
        self.assertIsNotNone(commit, lines[1])
        if commit.group(2) and os.path.exists(os.path.join(REPO, ".git")):
            # A commit of this repository, not a made-up string.
            known = run(["git", "-C", REPO, "cat-file", "-e", commit.group(2) + "^{commit}"])
            self.assertEqual(known.returncode, 0, "%s: %s" % (lines[1], known.stderr))
        self.assertEqual(lines[2], "LibTorch: %s" % os.environ.get("MPSD_TORCH_VERSION", ""))
        self.assertEqual(result.stderr, "")

    def test_mpsd(self):
        self.check("mpsd", MPSD)

    def test_mpsctl(self):
        self.check("mpsctl", MPSCTL)


class CheckConfigTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="mpsd-svc-")
        self.state = os.path.join(self.dir.name, "state")

    def tearDown(self):
        self.dir.cleanup()

    def write(self, text):
        path = os.path.join(self.dir.name, "mpsd.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_the_documented_default_config_is_valid(self):
        result = run([MPSD, "--check-config", os.path.join(REPO, "deploy", "mpsd.yaml")])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("deploy/mpsd.yaml: valid\n", result.stdout)

    def test_valid_config_is_reported_and_nothing_starts(self):
        path = self.write("listen: unix://%s/mpsd.sock\nstate_dir: %s\nlog_file: %s/mpsd.log\n"
                          % (self.dir.name, self.state, self.dir.name))
        result = run([MPSD, "--check-config", path])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines()[:3],
                         ["%s: valid" % path, "listen: unix://%s/mpsd.sock" % self.dir.name,
                          "state_dir: %s" % self.state])
        self.assertRegex(result.stdout, r"executor\.path: /\S*mpsd-executor\n")
        self.assertFalse(os.path.exists(self.state))
        self.assertFalse(os.path.exists(os.path.join(self.dir.name, "mpsd.sock")))
        self.assertFalse(os.path.exists(os.path.join(self.dir.name, "mpsd.log")))

    def test_every_key_is_printed_with_the_value_it_takes_and_no_secret(self):
        # --check-config printed only listen, state_dir and executor.path: what a typo'd key
        # or a default actually came to was not shown.
        tls = os.path.join(self.dir.name, "server.key")
        made = run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", tls,
                    "-out", os.path.join(self.dir.name, "server.pem"), "-days", "1", "-subj",
                    "/CN=localhost"])
        self.assertEqual(made.returncode, 0, made.stderr)
        os.chmod(tls, 0o600)
        path = self.write("state_dir: %s\nmax_queued: 7\nexecutor:\n  cancel_grace_s: 2.5\n"
                          "tls:\n  cert: %s/server.pem\n  key: %s\n"
                          % (self.state, self.dir.name, tls))
        result = run([MPSD, "--check-config", path])
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(lines[0], "%s: valid" % path)
        keys = dict(line.split(": ", 1) for line in lines[1:])
        self.assertEqual(keys["max_queued"], "7")
        self.assertEqual(keys["executor.cancel_grace_s"], "2.5")
        self.assertEqual(keys["shutdown_grace_s"], "10")          # defaults, written out
        self.assertEqual(keys["heartbeat_interval_s"], "15")
        self.assertEqual(keys["executor.isolation"], "shared")
        self.assertEqual(keys["http_listen"], "(none)")
        self.assertEqual(keys["tokens_file"], os.path.join(self.state, "tokens.yaml"))
        self.assertIn(self.state, keys["data_roots"])
        self.assertEqual(keys["tls.key"], tls)                    # the path, not the key
        self.assertNotIn("PRIVATE KEY", result.stdout + result.stderr)
        for key in ("listen", "state_dir", "executor.path", "cpu_threads", "log_level",
                    "log_file", "log_file_max_bytes", "log_file_max_files", "tls.cert",
                    "tls.client_ca", "executor.restart_after_jobs",
                    "executor.restart_above_baseline_bytes", "executor.memory_limit_bytes",
                    "executor.memory_fraction", "executor.mps_fallback",
                    "artifacts_retention.keep_last_jobs", "artifacts_retention.max_age_days",
                    "artifacts_retention.max_bytes"):
            self.assertIn(key, keys)

    def test_bad_key_names_the_file_and_key(self):
        path = self.write("max_queud: 3\n")
        result = run([MPSD, "--check-config", path])
        self.assertEqual(result.returncode, 2)
        self.assertRegex(result.stderr, r"^mpsd: %s: max_queud: unknown key" % re.escape(path))
        self.assertEqual(result.stdout, "")

    def test_bad_values_are_errors(self):
        for text, message in (("log_file_max_bytes: 0\n", "log_file_max_bytes: must be >= 1"),
                              ("log_file_max_files: 0\n", "log_file_max_files: must be 1 to 1000"),
                              ("max_queued: lots\n", 'max_queued: expected an integer, got "lots"')):
            result = run([MPSD, "--check-config", self.write(text)])
            self.assertEqual(result.returncode, 2, text)
            self.assertIn(message, result.stderr)

    def test_executor_that_is_not_a_program(self):
        missing = os.path.join(self.dir.name, "no-such-executor")
        path = self.write("executor:\n  path: %s\n" % missing)
        result = run([MPSD, "--check-config", path])
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr, "mpsd: %s: executor.path: %s is not an executable "
                         "program\n" % (path, missing))

    def test_missing_file(self):
        result = run([MPSD, "--check-config", os.path.join(self.dir.name, "nope.yaml")])
        self.assertEqual(result.returncode, 2)
        self.assertIn("nope.yaml: config file not found", result.stderr)


class Daemon:
    def __init__(self, directory, env=None, config=None):
        self.socket_path = os.path.join(directory, "mpsd.sock")
        argv = [MPSD, "--listen", "unix://" + self.socket_path,
                "--state-dir", os.path.join(directory, "state")]
        if config:
            argv += ["--config", config]
        self.stderr_path = os.path.join(directory, "stderr")
        with open(self.stderr_path, "w") as err:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err,
                                            stderr=err, env=dict(os.environ, **(env or {})))

    def stderr(self):
        with open(self.stderr_path) as f:
            return f.read()

    def listening(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.socket_path)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def wait_listening(self):
        deadline = time.monotonic() + 60
        while not self.listening():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("mpsd did not listen:\n" + self.stderr())
            time.sleep(0.02)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


@unittest.skipUnless(os.environ.get("MPSD_HAVE_LIBSYSTEMD") == "1", "built without libsystemd")
class NotifyTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="mpsd-svc-")
        self.notify_path = os.path.join(self.dir.name, "notify")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.messages = []

    def tearDown(self):
        self.notify.close()
        self.dir.cleanup()

    def receive(self, timeout):
        """The next notification as a dict of its KEY=VALUE lines; None after `timeout` s."""
        self.notify.settimeout(timeout)
        try:
            data = self.notify.recv(4096).decode()
        except socket.timeout:
            return None
        message = dict(line.split("=", 1) for line in data.splitlines() if "=" in line)
        self.messages.append(message)
        return message

    def test_ready_once_listening_watchdog_while_running_stopping_on_sigterm(self):
        daemon = Daemon(self.dir.name, env={"NOTIFY_SOCKET": self.notify_path,
                                            "WATCHDOG_USEC": "400000"})
        try:
            ready = self.receive(60)
            self.assertIsNotNone(ready, daemon.stderr())
            self.assertEqual(ready.get("READY"), "1", ready)
            # READY=1 comes once the socket accepts connections, not before.
            self.assertTrue(daemon.listening())
            self.assertEqual(ready.get("STATUS"), "listening on unix://" + daemon.socket_path)
            # WATCHDOG=1 at half of WATCHDOG_USEC: 0.2 s. Five within 2 s at the least.
            start = time.monotonic()
            watchdogs = 0
            while time.monotonic() - start < 2:
                message = self.receive(1)
                self.assertIsNotNone(message, "no WATCHDOG=1 within 1 s")
                self.assertEqual(message, {"WATCHDOG": "1"})
                watchdogs += 1
            self.assertGreaterEqual(watchdogs, 5)
            self.assertLessEqual(watchdogs, 15)  # half the timeout, not a busy loop
            daemon.process.send_signal(signal.SIGTERM)
            while True:
                message = self.receive(30)
                self.assertIsNotNone(message, "no STOPPING=1 after SIGTERM")
                if "STOPPING" in message:
                    break
                self.assertEqual(message, {"WATCHDOG": "1"})
            self.assertEqual(message, {"STOPPING": "1", "STATUS": "stopping (SIGTERM)"})
        finally:
            status = daemon.stop()
        self.assertEqual(status, 0, daemon.stderr())

    def test_no_watchdog_unless_asked(self):
        daemon = Daemon(self.dir.name, env={"NOTIFY_SOCKET": self.notify_path})
        try:
            self.assertEqual(self.receive(60).get("READY"), "1", daemon.stderr())
            self.assertIsNone(self.receive(1))
        finally:
            self.assertEqual(daemon.stop(), 0, daemon.stderr())
        self.assertEqual(self.receive(5).get("STOPPING"), "1")


def executor_environment(daemon):
    """The environment of the daemon's executor (its child mpsd-executor), from /proc."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/stat" % pid) as f:
                    stat = f.read()
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                if parent == daemon.process.pid and "(mpsd-executor)" in stat:
                    with open("/proc/%s/environ" % pid, "rb") as f:
                        entries = f.read().decode().split("\0")
                    return dict(e.split("=", 1) for e in entries if "=" in e)
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(0.1)
    raise AssertionError("no mpsd-executor child of %d:\n%s" % (daemon.process.pid, daemon.stderr()))


@unittest.skipUnless(os.path.isdir("/proc/self"), "needs /proc")
class MpsFallbackTest(unittest.TestCase):
    """executor.mps_fallback sets PYTORCH_ENABLE_MPS_FALLBACK for the executor, over the daemon's
    own environment (on a Mac each MPS job's log then says which way it runs)."""

    def check(self, config_text, inherited, expected):
        with tempfile.TemporaryDirectory(prefix="mpsd-svc-") as directory:
            config = os.path.join(directory, "mpsd.yaml")
            with open(config, "w") as f:
                f.write(config_text)
            env = {"PYTORCH_ENABLE_MPS_FALLBACK": inherited} if inherited is not None else {}
            daemon = Daemon(directory, env=env, config=config)
            try:
                daemon.wait_listening()
                self.assertEqual(executor_environment(daemon).get("PYTORCH_ENABLE_MPS_FALLBACK"),
                                 expected)
            finally:
                self.assertEqual(daemon.stop(), 0, daemon.stderr())

    def test_on(self):
        self.check("executor:\n  mps_fallback: true\n", None, "1")

    def test_off_by_default_even_when_the_daemon_has_it(self):
        self.check("", "1", "0")

    def test_not_a_bool(self):
        with tempfile.TemporaryDirectory(prefix="mpsd-svc-") as directory:
            config = os.path.join(directory, "mpsd.yaml")
            with open(config, "w") as f:
                f.write("executor:\n  mps_fallback: sometimes\n")
            result = run([MPSD, "--check-config", config])
            self.assertEqual(result.returncode, 2)
            self.assertIn('executor.mps_fallback: expected true or false, got "sometimes"',
                          result.stderr)


class LogFileTest(unittest.TestCase):
    def test_logs_go_to_the_file_and_rotate_by_size(self):
        with tempfile.TemporaryDirectory(prefix="mpsd-svc-") as directory:
            log = os.path.join(directory, "logs", "mpsd.log")
            os.makedirs(os.path.dirname(log))
            config = os.path.join(directory, "mpsd.yaml")
            with open(config, "w") as f:
                f.write("log_file: %s\nlog_file_max_bytes: 300\nlog_file_max_files: 2\n"
                        "log_level: debug\n" % log)
            # Each start and stop writes a few lines of about 100 bytes.
            for _ in range(4):
                daemon = Daemon(directory, config=config)
                try:
                    daemon.wait_listening()
                finally:
                    self.assertEqual(daemon.stop(), 0, daemon.stderr())
            names = sorted(os.listdir(os.path.dirname(log)))
            self.assertEqual(names, ["mpsd.1.log", "mpsd.2.log", "mpsd.log"])
            text = ""
            for name in names:
                path = os.path.join(os.path.dirname(log), name)
                self.assertLessEqual(os.path.getsize(path), 300, name)
                with open(path) as f:
                    text += f.read()
            self.assertIn("received SIGTERM", text)
            # mpsd's own lines went to the file, not to stderr.
            self.assertNotIn("mpsd listening on", daemon.stderr())
            self.assertNotIn("received SIGTERM", daemon.stderr())

    def test_unwritable_log_file_is_an_error_naming_it(self):
        with tempfile.TemporaryDirectory(prefix="mpsd-svc-") as directory:
            log = os.path.join(directory, "not-a-dir", "mpsd.log")
            with open(os.path.join(directory, "not-a-dir"), "w"):
                pass
            config = os.path.join(directory, "mpsd.yaml")
            with open(config, "w") as f:
                f.write("log_file: %s\n" % log)
            daemon = Daemon(directory, config=config)
            self.assertEqual(daemon.process.wait(timeout=60), 2)
            self.assertIn("mpsd: log_file: ", daemon.stderr())
            self.assertIn(log, daemon.stderr())


if __name__ == "__main__":
    unittest.main()
