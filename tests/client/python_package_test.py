#!/usr/bin/env python3
"""The Python client as a package: installed with pip into a fresh venv, used against a real mpsd.

Each test copies client/python (with its committed stubs) to a temporary directory, builds a
wheel from it (`pip wheel --no-deps --no-build-isolation --no-index`) and installs the wheel into
a new `python3 -m venv --system-site-packages` venv: the dependencies (grpcio, protobuf, PyYAML) come
from the interpreter's own site-packages (Debian's python3-grpcio, python3-protobuf, python3-yaml)
because CI has no PyPI; the build backend is that interpreter's setuptools. The installed package
is then imported and run from outside the checkout with PYTHONPATH cleared, so the checkout's
copy cannot stand in for it.

Run (after cmake --build BUILD --target mpsd mpsd-executor):
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


def copy_package(destination):
    def ignore(directory, names):
        return {n for n in names if n in ("build", "dist", "__pycache__") or n.endswith(".egg-info")}
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


def build_wheel(python, source, wheel_dir):
    """The wheel of the package at `source`, built as a user would (pip wheel); its path."""
    result = run([python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                  "--disable-pip-version-check", "-w", wheel_dir, source])
    if result.returncode != 0:
        raise AssertionError("pip wheel failed:\n%s\n%s" % (result.stdout, result.stderr))
    wheels = [n for n in os.listdir(wheel_dir) if n.endswith(".whl")]
    if len(wheels) != 1:
        raise AssertionError("pip wheel made %s" % wheels)
    return os.path.join(wheel_dir, wheels[0])


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
import json, os, sys, time
import grpc
import mpsd_client

address = sys.argv[1]
spec = {"kind": "TrainJob", "model": {"name": "convnet"},
        "dataset": {"name": "fashion-mnist", "root": sys.argv[2], "limit_train": 320,
                    "limit_test": 64},
        "batch_size": 64, "epochs": 1, "optimizer": {"name": "adam", "learning_rate": 0.001},
        "seed": 1, "device": "cpu"}
out = {"file": mpsd_client.__file__, "version": mpsd_client.__version__}
with mpsd_client.Client(address) as client:
    for attempt in range(300):  # the daemon's socket exists; its executor may still be starting
        try:
            client.device()
            break
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            time.sleep(0.1)
    job = client.submit(spec, priority=2)
    assert isinstance(job, mpsd_client.Job), type(job)
    out["submitted"] = {"id": job.id, "state": mpsd_client.Job.State.Name(job.state),
                        "priority": job.spec.priority}
    events = list(client.follow(job.id))
    assert all(isinstance(e, mpsd_client.JobEvent) for e in events)
    out["steps"] = [e.step.step for e in events if e.HasField("step")]
    out["last_state"] = mpsd_client.Job.State.Name(events[-1].state.state)
    out["last_is_terminal"] = mpsd_client.is_terminal(events[-1])
    out["get_state"] = mpsd_client.Job.State.Name(client.get(job.id).state)
# The module-level helpers, each on a channel of its own: resuming after the first step.
replay = list(mpsd_client.follow(job.id, address=address, after_seq=events[0].seq))
out["replayed_seqs"] = [e.seq for e in replay]
out["seqs"] = [e.seq for e in events]
try:
    mpsd_client.submit(dict(spec, batch_size=0), address=address)
except mpsd_client.errors.InvalidField as e:  # also a grpc.RpcError
    out["rejected"] = [e.code().name, e.details(), e.reason, e.field,
                       isinstance(e, grpc.RpcError)]
with mpsd_client.Client(address) as client:
    try:
        client.get("999999")
    except mpsd_client.errors.NotFound as e:
        out["not_found"] = [e.code().name, e.reason]
    out["listed"] = [j.id for j in client.list(kind=mpsd_client.Job.TRAIN_JOB)]
    out["artifacts"] = sorted(a.name for a in client.artifacts(job.id))
    path = client.download(job.id, "model.pt", sys.argv[3] + "/model.pt")
    out["downloaded"] = [path, open(path, "rb").read(2).hex()]
    try:  # the file is there: not replaced without overwrite=True, as mpsctl without --force
        client.download(int(job.id), "model.pt", sys.argv[3])  # a folder: its model.pt
    except FileExistsError as e:
        out["kept"] = str(e)
    try:
        list(client.follow("999999"))
    except mpsd_client.errors.NotFound as e:
        out["follow_not_found"] = e.code().name
    out["exported"] = [open(f).read().splitlines() for f in client.export(job.id, sys.argv[3])]
    # Uploads: a folder (a tar archive the daemon unpacks) and a file; the same upload again
    # sends nothing; delete.
    folder = os.path.join(sys.argv[3], "up")
    os.makedirs(os.path.join(folder, "sub"))
    open(os.path.join(folder, "a.txt"), "w").write("a" * 1000)
    open(os.path.join(folder, "sub", "b.txt"), "w").write("b")
    os.symlink("a.txt", os.path.join(folder, "link"))
    up = client.upload(folder, "my-folder")
    again = client.upload(folder, "my-folder")
    single = client.upload(os.path.join(folder, "a.txt"))
    out["uploads"] = [[u.name, u.kind, u.files, u.ref] for u in client.uploads()]
    out["upload_again_same"] = up.sha256 == again.sha256 and again.kind == "folder"
    try:
        client.upload(os.path.join(folder, "a.txt"), "my-folder")  # the name is taken
    except mpsd_client.errors.MpsdError as e:
        out["taken"] = e.code().name
    out["deleted"] = client.delete_upload("a.txt").name
    out["after_delete"] = [u.name for u in client.uploads()]
    sweep = client.submit(dict(spec, dataset=dict(spec["dataset"], limit_train=128),
                               sweep={"grid": {"optimizer.learning_rate": [0.001, 0.01]}}))
    client.wait([sweep.id], timeout=240)
    out["sweep"] = client.sweep(sweep.id)
print(json.dumps(out))
'''


# Runs inside the venv while the test stops and starts the daemon: download's and upload's
# retries on UNAVAILABLE. Prints "down" once it gave up against the stopped daemon (the test then
# starts it again), then one JSON object.
RETRY_SCRIPT = r'''
import json, os, sys
import mpsd_client

address, job_id, directory = sys.argv[1:4]
out = {}
with mpsd_client.Client(address) as client:
    gone = os.path.join(directory, "gone.pt")
    try:
        client.download(job_id, "model.pt", gone, retries=1)
    except mpsd_client.errors.Unavailable as e:
        out["gave_up"] = e.code().name
    out["part_left"] = os.path.exists(gone + ".part")
    try:
        client.upload(os.path.join(directory, "up", "a.txt"), "late", retries=0)
    except mpsd_client.errors.Unavailable as e:
        out["upload_gave_up"] = e.code().name
    print("down", flush=True)
    path = client.download(job_id, "model.pt", os.path.join(directory, "later.pt"), retries=8)
    out["downloaded"] = open(path, "rb").read(2).hex()
    out["uploaded"] = client.upload(os.path.join(directory, "up", "a.txt"), "late", retries=8).ref
print(json.dumps(out))
'''


class InstalledPackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="mpsd-pkg-")
        cls.source = os.path.join(cls.dir.name, "python")
        copy_package(cls.source)
        cls.python = make_venv(os.path.join(cls.dir.name, "venv"))
        cls.wheel = build_wheel(cls.python, cls.source, os.path.join(cls.dir.name, "dist"))
        result = pip_install(cls.python, cls.wheel)
        if result.returncode != 0:
            raise AssertionError("pip install failed:\n%s\n%s" % (result.stdout, result.stderr))
        cls.work = os.path.join(cls.dir.name, "work")  # the cwd: neither the checkout nor the copy
        os.makedirs(cls.work)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def venv_python(self, *argv):
        return run([self.python, *argv], cwd=self.work)

    def test_the_wheel_installs_with_its_stubs_and_version(self):
        self.assertRegex(os.path.basename(self.wheel),
                         r"^mpsd_client-%s-py3-none-any\.whl$" %
                         os.environ.get("MPSD_VERSION", r"[0-9.]+").replace(".", r"\."))
        result = self.venv_python("-c", "import mpsd_client, mpsd_client.v1.mpsd_pb2 as p, json; "
                                  "print(json.dumps([mpsd_client.__file__, p.__file__, "
                                  "mpsd_client.__version__]))")
        self.assertEqual(result.returncode, 0, result.stderr)
        package_file, stubs_file, version = json.loads(result.stdout)
        site = os.path.join(self.dir.name, "venv", "lib")
        self.assertTrue(package_file.startswith(site), package_file)
        self.assertTrue(stubs_file.startswith(site), stubs_file)
        self.assertEqual(version, os.environ.get("MPSD_VERSION", version))
        listed = self.venv_python("-m", "pip", "show", "--files", "mpsd-client")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        for name in ("mpsd_client/v1/mpsd_pb2.py", "mpsd_client/v1/mpsd_pb2_grpc.py",
                     "mpsd_client/v1/mpsd_pb2.pyi", "mpsd_client/py.typed",
                     "mpsd_client/_rpc_descriptors.py"):
            self.assertIn(name, listed.stdout)

    def test_stubs_a_user_generates_from_the_proto_live_beside_the_package(self):
        """protoc's own output for mpsd.proto is the module mpsd.v1.mpsd_pb2: importing it and
        mpsd_client in one interpreter works, and their messages read each other's bytes."""
        generated = os.path.join(self.work, "user_stubs")
        os.makedirs(generated, exist_ok=True)
        result = run(["protoc", "--proto_path=" + os.path.join(REPO, "proto"),
                      "--python_out=" + generated,
                      os.path.join(REPO, "proto", "mpsd", "v1", "mpsd.proto")], cwd=self.work)
        self.assertEqual(result.returncode, 0, result.stderr)
        script = ("import sys; sys.path.insert(0, %r)\n"
                  "import mpsd.v1.mpsd_pb2 as mine\n"
                  "import mpsd_client\n"
                  "job = mine.Job(id='7', state=mine.Job.RUNNING)\n"
                  "theirs = mpsd_client.Job.FromString(job.SerializeToString())\n"
                  "print(theirs.id, mpsd_client.Job.State.Name(theirs.state), mine.__file__)\n"
                  % generated)
        result = self.venv_python("-c", script)
        self.assertEqual(result.returncode, 0, result.stderr)
        job_id, state, module = result.stdout.split()
        self.assertEqual((job_id, state), ("7", "RUNNING"))
        self.assertTrue(module.startswith(generated), module)

    def test_a_job_through_the_installed_package_and_its_command(self):
        with tempfile.TemporaryDirectory(prefix="mpsd-pkg-daemon-") as directory:
            daemon = Mpsd(directory)
            try:
                script = os.path.join(self.work, "client_script.py")
                with open(script, "w") as f:
                    f.write(CLIENT_SCRIPT)
                downloads = os.path.join(directory, "downloads")
                os.makedirs(downloads)
                result = self.venv_python(script, daemon.address, FASHION_MNIST, downloads)
                self.assertEqual(result.returncode, 0, result.stderr + daemon.log())
                out = json.loads(result.stdout)
                self.assertEqual(out["submitted"]["state"], "QUEUED")
                self.assertEqual(out["submitted"]["priority"], 2)
                self.assertEqual(out["steps"], [1, 2, 3, 4, 5])  # 320 examples / 64
                self.assertEqual(out["last_state"], "SUCCEEDED")
                self.assertTrue(out["last_is_terminal"])
                self.assertEqual(out["get_state"], "SUCCEEDED")
                self.assertEqual(out["replayed_seqs"], out["seqs"][1:])
                code, message, reason, field, is_rpc_error = out["rejected"]
                self.assertEqual((code, reason, is_rpc_error), ("INVALID_ARGUMENT", "INVALID_FIELD",
                                                                True))
                self.assertIn("batch_size", message)
                self.assertTrue(field.endswith("batch_size"), field)
                self.assertEqual(out["not_found"], ["NOT_FOUND", "NOT_FOUND"])
                self.assertEqual(out["listed"], [out["submitted"]["id"]])
                self.assertIn("model.pt", out["artifacts"])
                path, magic = out["downloaded"]
                self.assertEqual(path, os.path.join(downloads, "model.pt"))
                self.assertEqual(magic, "504b")  # a zip archive (TorchScript's format)
                self.assertEqual(sorted(os.listdir(downloads)),
                                 sorted(["model.pt", out["submitted"]["id"], "up"]))  # + export, upload
                self.assertFalse(os.path.exists(path + ".part"))
                self.assertIn("model.pt already exists (overwrite=True replaces it)", out["kept"])
                self.assertEqual(out["follow_not_found"], "NOT_FOUND")
                steps_csv, epochs_csv = out["exported"]
                self.assertTrue(steps_csv[0].startswith("step,wall_time,epoch,"), steps_csv[0])
                self.assertEqual([row.split(",")[0] for row in steps_csv[1:]],
                                 ["1", "2", "3", "4", "5"])
                self.assertTrue(epochs_csv[0].startswith("epoch,wall_time,train_loss"),
                                epochs_csv[0])
                self.assertEqual(len(epochs_csv), 2)
                self.assertEqual(out["uploads"], [["a.txt", "file", 1, "upload:a.txt"],
                                                  ["my-folder", "folder", 2, "upload:my-folder"]])  # its 2 files
                self.assertTrue(out["upload_again_same"])
                self.assertEqual(out["taken"], "ALREADY_EXISTS")
                self.assertEqual(out["deleted"], "a.txt")
                self.assertEqual(out["after_delete"], ["my-folder"])
                rows = out["sweep"]
                self.assertEqual([r["trial"] for r in rows], [0, 1])
                self.assertEqual([r["optimizer.learning_rate"] for r in rows], [0.001, 0.01])  # typed
                self.assertEqual({r["state"] for r in rows}, {"SUCCEEDED"})
                self.assertEqual({r["failure_reason"] for r in rows}, {None})
                self.assertTrue(all(0 <= r["test_accuracy"] <= 1 for r in rows), rows)

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
                self.assertEqual(lines[-1]["state"]["state"], "SUCCEEDED")
                self.assertIsInstance(lines[-1]["seq"], int)  # int64 as a number, as mpsctl
                self.assertEqual([r["bench_row"]["model"] for r in lines if "bench_row" in r],
                                 ["mlp"])

                # Download and upload against a stopped daemon: UNAVAILABLE, retried, given up
                # (no .part left); then retried until the daemon is back on the same state.
                self.assertEqual(daemon.stop(), 0, daemon.log())
                script = os.path.join(self.work, "retry_script.py")
                with open(script, "w") as f:
                    f.write(RETRY_SCRIPT)
                client = subprocess.Popen([self.python, script, daemon.address, out["submitted"]["id"],
                                           downloads], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, env=clean_env(),
                                          cwd=self.work)
                try:
                    first = client.stdout.readline()
                    if first != "down\n":
                        client.kill()
                        self.fail("retry script: %r\n%s" % (first, client.stderr.read()))
                    daemon = Mpsd(directory)
                    stdout, stderr = client.communicate(timeout=120)
                finally:
                    client.kill()
                self.assertEqual(client.returncode, 0, stderr + daemon.log())
                retried = json.loads(stdout)
                self.assertEqual(retried["gave_up"], "UNAVAILABLE")
                self.assertEqual(retried["upload_gave_up"], "UNAVAILABLE")
                self.assertFalse(retried["part_left"])
                self.assertEqual(retried["downloaded"], "504b")
                self.assertEqual(retried["uploaded"], "upload:late")
            finally:
                status = daemon.stop()
            self.assertEqual(status, 0, daemon.log())


class UninstallTest(unittest.TestCase):
    def test_the_package_uninstalls_without_a_trace(self):
        with tempfile.TemporaryDirectory(prefix="mpsd-pkg-") as directory:
            source = os.path.join(directory, "python")
            copy_package(source)
            python = make_venv(os.path.join(directory, "venv"))
            result = pip_install(python, source)  # straight from the source folder, as the README
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertEqual(run([python, "-c", "import mpsd_client"], cwd=directory).returncode, 0)
            result = run([python, "-m", "pip", "uninstall", "-y", "mpsd-client"], cwd=directory)
            self.assertEqual(result.returncode, 0, result.stderr)
            gone = run([python, "-c", "import mpsd_client"], cwd=directory)
            self.assertNotEqual(gone.returncode, 0)
            self.assertIn("No module named 'mpsd_client'", gone.stderr)
            self.assertFalse(os.path.exists(os.path.join(directory, "venv", "bin", "mpsd-submit")))


if __name__ == "__main__":
    unittest.main()
