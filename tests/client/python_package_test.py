#!/usr/bin/env python3
"""The Python client as a package: installed with pip into a fresh venv, used against a real mpsd.

Each test copies client/python (with the stubs CMake wrote into it) to a temporary directory and
runs `pip install --no-deps --no-build-isolation --no-index DIR` into a new
`python3 -m venv --system-site-packages` venv: the dependencies (grpcio, protobuf, PyYAML) come
from the interpreter's own site-packages (Debian's python3-grpcio, python3-protobuf, python3-yaml)
because CI has no PyPI; the build backend is that interpreter's setuptools. The installed package
is then imported and run from outside the checkout with PYTHONPATH cleared, so the checkout's
copy cannot stand in for it.

Run (after cmake --build BUILD --target mpsd mpsd_python_stubs):
  MPSD_BINARY=BUILD/server/mpsd MPSD_VERSION=0.1.0 /usr/bin/python3 \\
      tests/client/python_package_test.py -v
or through CTest: ctest --test-dir BUILD -R python_package_test.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PACKAGE_SOURCE = os.path.join(REPO, "client", "python")
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def clean_env():
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"):
        env.pop(name, None)
    return env


def run(argv, **kwargs):
    kwargs.setdefault("timeout", 300)
    return subprocess.run(argv, capture_output=True, text=True, env=clean_env(), **kwargs)


def copy_package(destination, with_stubs=True):
    def ignore(directory, names):
        skipped = {n for n in names if n in ("build", "__pycache__") or n.endswith(".egg-info")}
        if not with_stubs and os.path.basename(directory) == "v1":
            skipped |= {n for n in names if n.startswith("mpsd_pb2")}
        return skipped
    shutil.copytree(PACKAGE_SOURCE, destination, ignore=ignore)


def make_venv(directory):
    """A fresh venv that sees the interpreter's site-packages; returns its python. Without a pip
    of its own (ensurepip takes most of a minute on a loaded machine): `python -m pip` in it runs
    the interpreter's pip (Debian's python3-pip), which installs into the venv."""
    result = run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                  directory])
    if result.returncode != 0:
        raise RuntimeError("python3 -m venv failed (Debian: apt install python3-venv):\n"
                           + result.stderr)
    return os.path.join(directory, "bin", "python")


def pip_install(python, source):
    return run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                "--disable-pip-version-check", source])


class Mpsd:
    """A real mpsd (MPSD_BINARY) on a unix socket in `directory`."""

    def __init__(self, directory):
        binary = os.environ.get("MPSD_BINARY") or os.path.join(REPO, "build", "server", "mpsd")
        socket = os.path.join(directory, "mpsd.sock")
        self.address = "unix://" + socket
        self.log_path = os.path.join(directory, "mpsd.log")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [binary, "--listen", self.address, "--state-dir", os.path.join(directory, "state")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not os.path.exists(socket):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("mpsd did not start:\n" + self.log())
            time.sleep(0.01)

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


# Runs inside the venv: the typed helpers against the daemon at argv[1]; prints one JSON object.
CLIENT_SCRIPT = r'''
import json, sys, time
import grpc
import mpsd

address = sys.argv[1]
spec = {"kind": "TrainJob", "model": {"name": "convnet"},
        "dataset": {"name": "fashion-mnist", "root": sys.argv[2], "limit_train": 320,
                    "limit_test": 64},
        "batch_size": 64, "epochs": 1, "optimizer": {"name": "adam", "learning_rate": 0.001},
        "seed": 1, "device": "cpu"}
out = {"file": mpsd.__file__, "version": mpsd.__version__}
with mpsd.Client(address) as client:
    for attempt in range(300):  # the daemon's socket exists; its executor may still be starting
        try:
            client.device()
            break
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            time.sleep(0.1)
    job = client.submit(spec, priority=2)
    assert isinstance(job, mpsd.Job), type(job)
    out["submitted"] = {"id": job.id, "state": mpsd.Job.State.Name(job.state),
                        "priority": job.spec.priority}
    events = list(client.follow(job.id))
    assert all(isinstance(e, mpsd.JobEvent) for e in events)
    out["steps"] = [e.step.step for e in events if e.HasField("step")]
    out["last_state"] = mpsd.Job.State.Name(events[-1].state.state)
    out["last_is_terminal"] = mpsd.is_terminal(events[-1])
    out["get_state"] = mpsd.Job.State.Name(client.get(job.id).state)
# The module-level helpers, each on a channel of its own: resuming after the first step.
replay = list(mpsd.follow(job.id, address=address, after_seq=events[0].seq))
out["replayed_seqs"] = [e.seq for e in replay]
out["seqs"] = [e.seq for e in events]
try:
    mpsd.submit(dict(spec, batch_size=0), address=address)
except grpc.RpcError as e:
    out["rejected"] = [e.code().name, e.details()]
print(json.dumps(out))
'''


class InstalledPackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="mpsd-pkg-")
        cls.source = os.path.join(cls.dir.name, "python")
        copy_package(cls.source)
        cls.python = make_venv(os.path.join(cls.dir.name, "venv"))
        result = pip_install(cls.python, cls.source)
        if result.returncode != 0:
            raise AssertionError("pip install failed:\n%s\n%s" % (result.stdout, result.stderr))
        cls.work = os.path.join(cls.dir.name, "work")  # the cwd: neither the checkout nor the copy
        os.makedirs(cls.work)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def venv_python(self, *argv):
        return run([self.python, *argv], cwd=self.work)

    def test_installed_into_the_venv_with_its_stubs_and_version(self):
        result = self.venv_python("-c", "import mpsd, mpsd.v1.mpsd_pb2 as p, json; print(json.dumps("
                                  "[mpsd.__file__, p.__file__, mpsd.__version__]))")
        self.assertEqual(result.returncode, 0, result.stderr)
        package_file, stubs_file, version = json.loads(result.stdout)
        site = os.path.join(self.dir.name, "venv", "lib")
        self.assertTrue(package_file.startswith(site), package_file)
        self.assertTrue(stubs_file.startswith(site), stubs_file)
        self.assertEqual(version, os.environ.get("MPSD_VERSION", version))
        listed = self.venv_python("-m", "pip", "show", "--files", "mpsd")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        for name in ("mpsd/v1/mpsd_pb2.py", "mpsd/v1/mpsd_pb2_grpc.py", "mpsd/v1/mpsd_pb2.pyi",
                     "mpsd/py.typed"):
            self.assertIn(name, listed.stdout)

    def test_a_job_through_the_installed_package_and_its_command(self):
        with tempfile.TemporaryDirectory(prefix="mpsd-pkg-daemon-") as directory:
            daemon = Mpsd(directory)
            try:
                script = os.path.join(self.work, "client_script.py")
                with open(script, "w") as f:
                    f.write(CLIENT_SCRIPT)
                result = self.venv_python(script, daemon.address, FASHION_MNIST)
                self.assertEqual(result.returncode, 0, result.stderr + daemon.log())
                out = json.loads(result.stdout)
                self.assertEqual(out["submitted"]["state"], "QUEUED")
                self.assertEqual(out["submitted"]["priority"], 2)
                self.assertEqual(out["steps"], [1, 2, 3, 4, 5])  # 320 examples / 64
                self.assertEqual(out["last_state"], "SUCCEEDED")
                self.assertTrue(out["last_is_terminal"])
                self.assertEqual(out["get_state"], "SUCCEEDED")
                self.assertEqual(out["replayed_seqs"], out["seqs"][1:])
                self.assertEqual(out["rejected"][0], "INVALID_ARGUMENT")
                self.assertIn("batch_size", out["rejected"][1])

                # The console script pip put into the venv, on a job file.
                job_file = os.path.join(self.work, "job.yaml")
                with open(job_file, "w") as f:
                    f.write("kind: BenchJob\nmodels: [mlp]\nbatch_sizes: [2]\ndevices: [cpu]\n"
                            "warmup_iters: 1\niters: 1\n")
                command = run([os.path.join(self.dir.name, "venv", "bin", "mpsd-submit"),
                               "--server", daemon.address, job_file], cwd=self.work)
                self.assertEqual(command.returncode, 0, command.stderr)
                self.assertRegex(command.stderr, r"^mpsd-submit: submitted job \d+\n$")
                lines = [json.loads(line) for line in command.stdout.splitlines()]
                self.assertEqual(lines[-1]["state"], {"state": "SUCCEEDED"})
                self.assertEqual([r["bench_row"]["model"] for r in lines if "bench_row" in r],
                                 ["mlp"])
            finally:
                status = daemon.stop()
            self.assertEqual(status, 0, daemon.log())


class PackageWithoutStubsTest(unittest.TestCase):
    def test_install_without_the_generated_stubs_says_how_to_make_them_and_uninstall(self):
        with tempfile.TemporaryDirectory(prefix="mpsd-pkg-") as directory:
            source = os.path.join(directory, "python")
            copy_package(source, with_stubs=False)
            python = make_venv(os.path.join(directory, "venv"))
            result = pip_install(python, source)
            self.assertNotEqual(result.returncode, 0)
            output = result.stdout + result.stderr
            self.assertIn("mpsd/v1/mpsd_pb2.py", output)
            self.assertIn("--target mpsd_python_stubs", output)
            gone = run([python, "-c", "import mpsd"], cwd=directory)
            self.assertIn("No module named 'mpsd'", gone.stderr)

            # With the stubs it installs, and uninstalls without a trace.
            complete = os.path.join(directory, "complete")
            copy_package(complete)
            result = pip_install(python, complete)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertEqual(run([python, "-c", "import mpsd"], cwd=directory).returncode, 0)
            result = run([python, "-m", "pip", "uninstall", "-y", "mpsd"], cwd=directory)
            self.assertEqual(result.returncode, 0, result.stderr)
            gone = run([python, "-c", "import mpsd"], cwd=directory)
            self.assertNotEqual(gone.returncode, 0)
            self.assertIn("No module named 'mpsd'", gone.stderr)
            self.assertFalse(os.path.exists(os.path.join(directory, "venv", "bin", "mpsd-submit")))


if __name__ == "__main__":
    unittest.main()
