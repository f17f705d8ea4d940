#!/usr/bin/env python3
"""Tests for client/python (the `mpsd` package, from the checkout): job files and specs, and
submit.py against a real mpsd that the test starts.

Run (after building mpsd and the stubs: cmake --build BUILD --target mpsd mpsd_python_stubs):
  MPSD_BINARY=BUILD/server/mpsd /usr/bin/python3 tests/client/python_client_test.py -v
or through CTest: ctest --test-dir BUILD -R python_client_test.
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
SUBMIT = os.path.join(REPO, "client", "python", "submit.py")
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
sys.path.insert(0, os.path.join(REPO, "client", "python"))

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402

import mpsd_client  # noqa: E402

pb2, pb2_grpc = mpsd_client.pb2, mpsd_client.pb2_grpc


def train_job_yaml(limit_train=2000, limit_test=500, epochs=2, root=FASHION_MNIST):
    """A Fashion-MNIST job on the CPU at batch size 64: limit_train / 64 steps per epoch."""
    return """kind: TrainJob
model: {name: convnet}
dataset: {name: fashion-mnist, root: %s, limit_train: %d, limit_test: %d}
batch_size: 64
epochs: %d
optimizer: {name: adam, learning_rate: 0.001}
seed: 1
device: cpu
""" % (root, limit_train, limit_test, epochs)


GOOD = train_job_yaml()


class JobFileTest(unittest.TestCase):
    def parse(self, text):
        return mpsd_client.parse_job_file(text, "job.yaml")

    def error(self, text):
        with self.assertRaises(mpsd_client.JobFileError) as cm:
            self.parse(text)
        return str(cm.exception)

    def test_good(self):
        r = self.parse(GOOD)
        self.assertEqual(r.WhichOneof("spec"), "train_job")
        self.assertEqual(r.train_job.dataset.limit_train, 2000)
        self.assertEqual(r.train_job.batch_size, 64)
        self.assertAlmostEqual(r.train_job.optimizer.learning_rate, 0.001)
        self.assertEqual(r.train_job.seed, 1)

    def test_unknown_nested_key(self):
        self.assertIn("job.yaml: dataset.limt_train: unknown field",
                      self.error("kind: TrainJob\ndataset: {limt_train: 3}\n"))

    def test_wrong_type(self):
        self.assertEqual(self.error("kind: TrainJob\nbatch_size: sixty\n"),
                         'job.yaml: batch_size: expected an integer, got "sixty"')

    def test_missing_and_unknown_kind(self):
        self.assertEqual(self.error("model: {name: convnet}\n"),
                         'job.yaml: missing "kind" (expected TrainJob, BenchJob, EvalJob or '
                         'PredictJob)')
        self.assertEqual(self.error("kind: TranJob\n"),
                         'job.yaml: kind: unknown "TranJob" (expected TrainJob, BenchJob, EvalJob '
                         'or PredictJob)')

    def test_bench_job(self):
        r = self.parse("kind: BenchJob\nmodels: [convnet]\nbatch_sizes: [1, 64]\n")
        self.assertEqual(r.WhichOneof("spec"), "bench_job")
        self.assertEqual(list(r.bench_job.batch_sizes), [1, 64])

    def test_priority_and_request_id_are_request_fields(self):
        r = self.parse("kind: TrainJob\npriority: -3\nrequest_id: 7\nbatch_size: 8\n")
        self.assertEqual(r.priority, -3)
        self.assertEqual(r.request_id, "7")  # a string field keeps the text
        self.assertEqual(r.train_job.batch_size, 8)
        self.assertFalse(r.train_job.HasField("model"))
        self.assertEqual(self.error("kind: TrainJob\npriority: high\n"),
                         'job.yaml: priority: expected an integer, got "high"')

    def test_a_sweep_scheduler_block_parses_and_bad_values_name_their_path(self):
        r = self.parse("kind: TrainJob\nepochs: 3\nsweep:\n"
                       "  grid: {optimizer.learning_rate: [0.1, 0.01]}\n"
                       "  scheduler: {type: median_stopping, metric: val_accuracy,"
                       " grace_period: 1, min_samples_required: 2}\n")
        s = r.sweep.scheduler
        self.assertEqual((s.type, s.metric, s.grace_period, s.min_samples_required),
                         ("median_stopping", "val_accuracy", 1, 2))
        self.assertFalse(s.HasField("reduction_factor"))
        self.assertEqual(
            self.error("kind: TrainJob\nsweep:\n  scheduler: {reduction_factor: half}\n"),
            'job.yaml: sweep.scheduler.reduction_factor: expected an integer, got "half"')
        self.assertIn("job.yaml: sweep.scheduler.grace: unknown field",
                      self.error("kind: TrainJob\nsweep:\n  scheduler: {grace: 2}\n"))

    def test_string_field_keeps_number_text(self):
        self.assertEqual(self.parse("kind: TrainJob\ndevice: 12\n").train_job.device, "12")

    def test_syntax_error_names_line(self):
        self.assertRegex(self.error("kind: TrainJob\nmodel: {name: convnet\n"),
                         r"^job\.yaml:\d+:\d+: YAML syntax error: ")

    def test_aliases_are_refused_as_mpsctl_refuses_them(self):
        # PyYAML resolved them (mpsctl refuses them): nested aliases expand exponentially.
        text = ("kind: TrainJob\nlabels: &l {a: b}\nname: x\n"
                "dataset: {name: fashion-mnist, root: *l}\n")
        self.assertEqual(self.error(text),
                         "job.yaml:4:38: YAML aliases (*name) are not supported in a job file: "
                         "write the value out")
        laughs = "kind: TrainJob\na: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\n"
        self.assertIn("job.yaml:3:8: YAML aliases", self.error(laughs))
        # An anchor alone is harmless and stays accepted, as in mpsctl.
        self.assertEqual(self.parse("kind: TrainJob\nbatch_size: &b 8\n").train_job.batch_size, 8)

    def test_a_key_given_twice_is_refused_as_mpsctl_refuses_it(self):
        # PyYAML kept the last value silently (issue 26).
        self.assertEqual(self.error("kind: TrainJob\nepochs: 1\nepochs: 2\n"),
                         "job.yaml:3:1: epochs: duplicate key")
        self.assertEqual(self.error("kind: TrainJob\nmodel: {name: a, name: b}\n"),
                         "job.yaml:2:18: name: duplicate key")

    def test_deep_nesting_is_refused_not_a_recursion_error(self):
        # PyYAML's composer recursed until Python's RecursionError (issue 26).
        deep = "kind: TrainJob\nmodel: " + "[" * 5000 + "]" * 5000 + "\n"
        self.assertEqual(self.error(deep), "job.yaml:2:71: nested more than 64 levels deep")
        just_fits = "kind: TrainJob\nlabels: " + "[" * 63 + "]" * 63 + "\n"
        self.assertIn("labels: expected", self.error(just_fits))

    def test_empty(self):
        self.assertIn("empty job file", self.error("# nothing\n"))

    def test_examples(self):
        for name in ("fashion-mnist.yaml", "fashion-mnist-small.yaml"):
            r = mpsd_client.read_job_file(os.path.join(REPO, "examples", name))
            self.assertEqual(r.train_job.dataset.name, "fashion-mnist")
        for name, models in (("resnet50-bench.yaml", ["resnet50"]),
                             ("arch-bench.yaml", ["resnet50", "vgg16", "bert_base", "lstm"])):
            r = mpsd_client.read_job_file(os.path.join(REPO, "examples", name))
            self.assertEqual(list(r.bench_job.models), models)


    def test_relative_paths_are_taken_against_the_job_files_directory(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "job.yaml")
            with open(path, "w") as f:
                f.write("kind: TrainJob\nmodel: {torchscript: net.pt}\n"
                        "resume_from: ../runs/checkpoint-latest.pt\n")
            r = mpsd_client.read_job_file(path)
            self.assertEqual(r.train_job.model.torchscript, os.path.join(directory, "net.pt"))
            self.assertEqual(r.train_job.resume_from,
                             os.path.join(os.path.dirname(directory), "runs",
                                          "checkpoint-latest.pt"))
            with open(path, "w") as f:
                f.write("kind: TrainJob\nmodel: {torchscript: /models/net.pt}\nresume_from: 12\n")
            r = mpsd_client.read_job_file(path)
            self.assertEqual(r.train_job.model.torchscript, "/models/net.pt")
            self.assertEqual(r.train_job.resume_from, "12")
            # The dataset root and the weights too, as mpsctl: the daemon would resolve them
            # against its own working directory and train on another folder (issue 26).
            with open(path, "w") as f:
                f.write("kind: TrainJob\nmodel: {name: resnet18, weights: w/r18.pt}\n"
                        "dataset: {name: image_folder, root: folder}\n"
                        "loss: {torchscript: l/focal.pt}\n"
                        "metrics: [{name: top2, torchscript: m/top2.pt}]\n")
            r = mpsd_client.read_job_file(path)
            self.assertEqual(r.train_job.metrics[0].torchscript,
                             os.path.join(directory, "m", "top2.pt"))
            self.assertEqual(r.train_job.model.weights, os.path.join(directory, "w", "r18.pt"))
            self.assertEqual(r.train_job.loss.torchscript, os.path.join(directory, "l", "focal.pt"))
            self.assertEqual(r.train_job.dataset.root, os.path.join(directory, "folder"))
            self.assertEqual(r.train_job.resume_from, "")
            with open(path, "w") as f:
                f.write("kind: BenchJob\nmodels: [resnet18, nets/a.pt, \"12\"]\n")
            r = mpsd_client.read_job_file(path)
            self.assertEqual(list(r.bench_job.models),
                             ["resnet18", os.path.join(directory, "nets", "a.pt"), "12"])
            # Nothing set is made present: a job without a dataset keeps none.
            with open(path, "w") as f:
                f.write("kind: TrainJob\nepochs: 1\n")
            self.assertFalse(mpsd_client.read_job_file(path).train_job.HasField("dataset"))


    def test_non_regular_and_oversized_files_are_refused_without_blocking(self):
        # /dev/zero read without limit (5 GB in 10 s), and a FIFO blocked open() for a writer.
        with tempfile.TemporaryDirectory() as directory:
            fifo = os.path.join(directory, "job.fifo")
            os.mkfifo(fifo)
            big = os.path.join(directory, "big.yaml")
            with open(big, "w") as f:
                f.write(GOOD + "#" * (2 << 20) + "\n")
            for path, message in ((big, "a job file is at most 1 MiB"),
                                  (directory, "not a regular file"),
                                  (fifo, "not a regular file"),
                                  ("/dev/zero", "not a regular file")):
                with self.assertRaises(mpsd_client.JobFileError) as cm:
                    mpsd_client.read_job_file(path)
                self.assertIn(path, str(cm.exception))
                self.assertIn(message, str(cm.exception))
            exact = os.path.join(directory, "exact.yaml")
            with open(exact, "w") as f:
                f.write(GOOD + "#" * (mpsd_client.MAX_JOB_FILE_BYTES - len(GOOD) - 1) + "\n")
            self.assertEqual(os.path.getsize(exact), mpsd_client.MAX_JOB_FILE_BYTES)
            self.assertEqual(mpsd_client.read_job_file(exact).train_job.dataset.name, "fashion-mnist")

    def test_a_file_that_is_not_utf8_is_a_job_file_error_naming_it(self):
        # Latin-1 text: UnicodeDecodeError escaped read_job_file, and submit.py died with it.
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "latin1.yaml")
            with open(path, "wb") as f:
                f.write(GOOD.encode() + "# caf\u00e9\n".encode("latin-1"))
            with self.assertRaises(mpsd_client.JobFileError) as cm:
                mpsd_client.read_job_file(path)
            line = GOOD.count("\n") + 1
            self.assertIn("%s:%d: not UTF-8 text (byte 0xe9" % (path, line), str(cm.exception))


class JobSpecTest(unittest.TestCase):
    """mpsd_client.job_request: the forms Client.submit takes besides a file."""

    def test_dict_is_checked_like_a_job_file(self):
        r = mpsd_client.job_request({"kind": "TrainJob", "priority": 2, "model": {"name": "convnet"},
                              "dataset": {"name": "fashion-mnist", "limit_train": 320},
                              "batch_size": 64, "optimizer": {"learning_rate": 0.001},
                              "device": "cpu", "drop_last": True, "resume_from": None})
        self.assertEqual(r, self.parse_yaml(
            "kind: TrainJob\npriority: 2\nmodel: {name: convnet}\n"
            "dataset: {name: fashion-mnist, limit_train: 320}\nbatch_size: 64\n"
            "optimizer: {learning_rate: 0.001}\ndevice: cpu\ndrop_last: true\n"))
        with self.assertRaises(mpsd_client.JobFileError) as cm:
            mpsd_client.job_request({"kind": "TrainJob", "batch_size": "sixty", "dataset": {"limt": 1}})
        self.assertEqual(str(cm.exception).splitlines()[0],
                         'spec: batch_size: expected an integer, got "sixty"')
        self.assertIn("spec: dataset.limt: unknown field", str(cm.exception))
        with self.assertRaises(mpsd_client.JobFileError) as cm:
            mpsd_client.job_request({"kind": "BenchJob", "batch_sizes": [1, 2.5]})
        self.assertEqual(str(cm.exception),
                         'spec: batch_sizes[1]: expected an integer, got "2.5"')

    def parse_yaml(self, text):
        return mpsd_client.parse_job_file(text, "job.yaml")

    def test_messages_and_paths(self):
        job = pb2.TrainJob(batch_size=8)
        self.assertEqual(mpsd_client.job_request(job), pb2.SubmitJobRequest(train_job=job))
        bench = pb2.BenchJob(models=["mlp"])
        self.assertEqual(mpsd_client.job_request(bench), pb2.SubmitJobRequest(bench_job=bench))
        request = pb2.SubmitJobRequest(train_job=job, priority=3)
        copy = mpsd_client.job_request(request)
        self.assertEqual(copy, request)
        copy.priority = 4
        self.assertEqual(request.priority, 3)  # a copy, not the caller's message
        import pathlib
        example = pathlib.Path(REPO, "examples", "fashion-mnist-small.yaml")
        self.assertEqual(mpsd_client.job_request(example), mpsd_client.read_job_file(str(example)))
        with self.assertRaises(TypeError):
            mpsd_client.job_request(42)

    def test_eval_and_predict_jobs(self):
        evaluation = pb2.EvalJob(model="3", split="val")
        self.assertEqual(mpsd_client.job_request(evaluation),
                         pb2.SubmitJobRequest(eval_job=evaluation))
        predict = pb2.PredictJob(model="3", inputs=["a.png"])
        self.assertEqual(mpsd_client.job_request(predict),
                         pb2.SubmitJobRequest(predict_job=predict))
        # examples/eval.yaml as mpsctl reads it: the job id stays, nothing else is a path.
        example = mpsd_client.read_job_file(os.path.join(REPO, "examples", "eval.yaml"))
        self.assertEqual(example.WhichOneof("spec"), "eval_job")
        self.assertEqual(example.eval_job.model, "1")
        self.assertEqual(example.eval_job.dataset.root, "/usr/share/datasets/fashion-mnist")
        # Relative paths against the job file's folder, as mpsctl makes them.
        r = mpsd_client.parse_job_file("kind: PredictJob\nmodel: out/model.pt\n"
                                       "inputs: [shoe.png, photos]\ntop_k: 3\n", "job.yaml")
        mpsd_client.make_paths_absolute(r, "/data/jobs/job.yaml")
        self.assertEqual(r.predict_job.model, "/data/jobs/out/model.pt")
        self.assertEqual(list(r.predict_job.inputs), ["/data/jobs/shoe.png", "/data/jobs/photos"])
        self.assertEqual(r.predict_job.top_k, 3)


def run_submit(server, job_file, *extra):
    return subprocess.run([sys.executable, SUBMIT, "--server", server, job_file, *extra],
                          capture_output=True, text=True, timeout=120)


class Mpsd:
    """A real mpsd (MPSD_BINARY, else REPO/build/server/mpsd) on a temp unix socket."""

    def __init__(self, directory):
        binary = os.environ.get("MPSD_BINARY") or os.path.join(REPO, "build", "server", "mpsd")
        if not os.access(binary, os.X_OK):
            raise RuntimeError("no mpsd binary at %s: build it (cmake --build BUILD --target mpsd) "
                               "or set MPSD_BINARY" % binary)
        socket = os.path.join(directory, "mpsd.sock")
        self.address = "unix://" + socket
        self.log_path = os.path.join(directory, "mpsd.log")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [binary, "--listen", self.address, "--state-dir", os.path.join(directory, "state")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        # The socket file first: a channel that fails to connect backs off for seconds.
        deadline = time.monotonic() + 60
        while not os.path.exists(socket):
            if self.process.poll() is not None:
                raise RuntimeError("mpsd exited with %d during start-up:\n%s"
                                   % (self.process.returncode, self.log()))
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("mpsd did not create %s within 60 s:\n%s" % (socket, self.log()))
            time.sleep(0.01)
        self.channel = grpc.insecure_channel(self.address)
        self.stub = pb2_grpc.JobServiceStub(self.channel)
        self.stub.GetDevice(pb2.GetDeviceRequest(), wait_for_ready=True, timeout=30)

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stored_events(self, job_id):
        """The job's events as the daemon stores them, read with StreamEvents."""
        return list(self.stub.StreamEvents(pb2.StreamEventsRequest(job_id=job_id, after_seq=0),
                                           timeout=120))

    def job_count(self):
        return len(self.stub.ListJobs(pb2.ListJobsRequest(), timeout=10).jobs)

    def stop(self):
        """SIGTERM; returns mpsd's exit status."""
        if getattr(self, "channel", None):
            self.channel.close()
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


def corrupt_dataset(root):
    """A Fashion-MNIST dir whose training images are cut short: there at submit, bad at run time."""
    os.makedirs(root)
    for name in ("train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                 "t10k-labels-idx1-ubyte.gz"):
        shutil.copy(os.path.join(FASHION_MNIST, name), root)
    with open(os.path.join(root, "train-images-idx3-ubyte"), "wb") as f:
        f.write(b"\x00\x00\x08\x03short")


class SubmitWithRealDaemonTest(unittest.TestCase):
    """submit.py against one mpsd for the class; each test waits for the jobs it starts."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="mpsd-py-")
        cls.mpsd = Mpsd(cls.dir.name)

    @classmethod
    def tearDownClass(cls):
        status = cls.mpsd.stop()
        log = cls.mpsd.log()
        cls.dir.cleanup()
        if status != 0:
            raise AssertionError("mpsd exited with %d on SIGTERM:\n%s" % (status, log))

    def setUp(self):
        self.test_dir = tempfile.mkdtemp(dir=self.dir.name)

    def job_file(self, text):
        path = os.path.join(self.test_dir, "job.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_succeeded_job_prints_the_stored_events_and_exits_0(self):
        # 320 examples, 2 epochs: 10 steps.
        result = run_submit(self.mpsd.address, self.job_file(train_job_yaml(320, 64, epochs=2)))
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        printed = [json_format.Parse(line, pb2.JobEvent()) for line in lines]
        self.assertTrue(printed)
        job_id = printed[0].job_id
        self.assertEqual(result.stderr, "submit.py: submitted job %s\n" % job_id)

        # The same events, seqs and payloads, as the daemon stores.
        self.assertEqual(printed, self.mpsd.stored_events(job_id))
        self.assertEqual([e.seq for e in printed], list(range(1, len(printed) + 1)))
        job = self.mpsd.stub.GetJob(pb2.GetJobRequest(job_id=job_id), timeout=10)
        self.assertEqual(job.last_seq, printed[-1].seq)
        self.assertEqual([e.step.step for e in printed if e.HasField("step")], list(range(1, 11)))
        self.assertEqual([e.epoch.epoch for e in printed if e.HasField("epoch")], [1, 2])
        self.assertEqual(printed[0].state.state, pb2.Job.QUEUED)
        self.assertEqual(printed[-1].state.state, pb2.Job.SUCCEEDED)
        summary = next(e.summary for e in printed if e.HasField("summary"))
        self.assertEqual(summary.steps, 10)

        # protobuf's JSON mapping with proto field names, one compact object a line.
        events = [json.loads(line) for line in lines]
        self.assertEqual(events[-1]["state"]["state"], "SUCCEEDED")
        self.assertIn("total_steps", next(e for e in events if "step" in e)["step"])
        self.assertNotIn(" ", lines[0])

    def test_bench_job_rows_are_printed_as_events(self):
        text = ("kind: BenchJob\nmodels: [mlp]\nbatch_sizes: [2, 4]\ndevices: [cpu]\n"
                "warmup_iters: 1\niters: 2\n")
        result = run_submit(self.mpsd.address, self.job_file(text))
        self.assertEqual(result.returncode, 0, result.stderr)
        printed = [json_format.Parse(line, pb2.JobEvent()) for line in result.stdout.splitlines()]
        rows = [e.bench_row for e in printed if e.HasField("bench_row")]
        self.assertEqual([(r.model, r.batch_size, r.status) for r in rows],
                         [("mlp", 2, pb2.BenchRow.OK), ("mlp", 4, pb2.BenchRow.OK)])
        summary = next(e.summary for e in printed if e.HasField("summary"))
        self.assertEqual(list(summary.bench_rows), rows)
        self.assertEqual(printed[-1].state.state, pb2.Job.SUCCEEDED)

    def test_failed_run_exits_1_with_the_reason(self):
        root = os.path.join(self.test_dir, "corrupt")
        corrupt_dataset(root)
        result = run_submit(self.mpsd.address, self.job_file(train_job_yaml(root=root)))
        self.assertEqual(result.returncode, 1, result.stderr)
        last = json.loads(result.stdout.splitlines()[-1])
        self.assertEqual(last["state"]["state"], "FAILED")
        self.assertEqual(last["state"]["failure_reason"], "DATASET_ERROR")
        self.assertIn("train-images-idx3-ubyte", last["state"]["message"])

    def test_job_rejected_by_the_daemon_exits_1_with_its_message(self):
        jobs = self.mpsd.job_count()
        missing = os.path.join(self.test_dir, "no-such-dataset")
        result = run_submit(self.mpsd.address, self.job_file(train_job_yaml(root=missing)))
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertRegex(result.stderr, r"^submit\.py: train_job\.dataset\.root: .*%s.*\n$"
                         % missing.replace(".", r"\."))
        self.assertEqual(result.stdout, "")
        self.assertEqual(self.mpsd.job_count(), jobs)

    def test_bad_job_file_exits_1_before_connecting(self):
        jobs = self.mpsd.job_count()
        job_file = self.job_file("kind: TrainJob\nbatch_size: sixty\n")
        result = run_submit(self.mpsd.address, job_file)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr,
                         '%s: batch_size: expected an integer, got "sixty"\n' % job_file)
        self.assertEqual(result.stdout, "")
        self.assertEqual(self.mpsd.job_count(), jobs)


    def test_request_id_submits_once(self):
        jobs = self.mpsd.job_count()
        job_file = self.job_file(train_job_yaml(320, 64, epochs=1))
        request_id = "py-%d" % os.getpid()
        first = run_submit(self.mpsd.address, job_file, "--request-id", request_id,
                           "--priority", "4")
        self.assertEqual(first.returncode, 0, first.stderr)
        again = run_submit(self.mpsd.address, job_file, "--request-id", request_id,
                           "--priority", "4")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(again.stderr, first.stderr)  # "submitted job N", the same N
        self.assertEqual(again.stdout, first.stdout)  # the same stored events
        self.assertEqual(self.mpsd.job_count(), jobs + 1)
        job_id = json.loads(first.stdout.splitlines()[0])["job_id"]
        job = self.mpsd.stub.GetJob(pb2.GetJobRequest(job_id=job_id), timeout=10)
        self.assertEqual((job.spec.priority, job.spec.request_id), (4, request_id))

        other = run_submit(self.mpsd.address, job_file, "--request-id", request_id,
                           "--priority", "5")
        self.assertEqual(other.returncode, 1)
        self.assertIn("already used for job %s" % job_id, other.stderr)


class FollowAcrossRestartTest(unittest.TestCase):
    """Client.follow reconnects by itself when the daemon is killed and started again."""

    def test_follow_resumes_after_the_daemon_is_killed_and_restarted(self):
        import threading
        with tempfile.TemporaryDirectory(prefix="mpsd-py-") as directory:
            daemon = Mpsd(directory)
            try:
                spec = {"kind": "TrainJob", "model": {"name": "mlp"},
                        "dataset": {"name": "fashion-mnist", "root": FASHION_MNIST,
                                    "limit_train": 3200, "limit_test": 200},
                        "batch_size": 64, "epochs": 3, "seed": 1, "device": "cpu",
                        "optimizer": {"name": "adam", "learning_rate": 0.001},
                        "checkpoint": {"every_epochs": 1}, "restart_policy": "resume"}
                events, errors = [], []
                with mpsd_client.Client(daemon.address) as client:
                    job = client.submit(spec)

                    def follow():
                        try:
                            events.extend(client.follow(job.id))
                        except Exception as error:  # reported below
                            errors.append(error)

                    follower = threading.Thread(target=follow)
                    follower.start()
                    deadline = time.monotonic() + 240
                    while not any(e.HasField("checkpoint") for e in list(events)):
                        self.assertLess(time.monotonic(), deadline, "no checkpoint event")
                        time.sleep(0.05)
                    daemon.process.kill()
                    daemon.process.wait()
                    time.sleep(2)
                    os.remove(os.path.join(directory, "mpsd.sock"))  # left by SIGKILL
                    daemon = Mpsd(directory)
                    follower.join(timeout=300)
                    self.assertFalse(follower.is_alive())
                self.assertEqual(errors, [])
                seqs = [e.seq for e in events]
                self.assertEqual(seqs, list(range(1, len(seqs) + 1)))  # no gap, no duplicate
                self.assertTrue(mpsd_client.is_terminal(events[-1]))
                self.assertEqual(events[-1].state.state, pb2.Job.SUCCEEDED)
            finally:
                daemon.stop()


class SubmitWithoutDaemonTest(unittest.TestCase):
    def test_missing_daemon_exits_2(self):
        with tempfile.TemporaryDirectory(prefix="mpsd-py-") as directory:
            address = "unix://%s/mpsd.sock" % directory
            job_file = os.path.join(directory, "job.yaml")
            with open(job_file, "w") as f:
                f.write(GOOD)
            result = run_submit(address, job_file)
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr, "submit.py: cannot reach mpsd at %s: is the daemon "
                         "running? (start it with: mpsd)\n" % address)
        self.assertEqual(result.stdout, "")


class DaemonAnsweredTest(unittest.TestCase):
    """Whether mpsd itself answered an UNAVAILABLE (exit code 3, "running but answered") is read
    from the ErrorInfo mpsd attaches, never from the message's wording."""

    class FakeError(grpc.RpcError):
        def __init__(self, details, trailing):
            self._details, self._trailing = details, trailing

        def code(self):
            return grpc.StatusCode.UNAVAILABLE

        def details(self):
            return self._details

        def trailing_metadata(self):
            return self._trailing

    def test_the_error_info_decides_not_the_text(self):
        from mpsd_client import client as client_module, errors  # noqa: PLC0415
        info = errors._ErrorInfo(domain=errors.ERROR_DOMAIN, reason="EXECUTOR_STOPPING")
        status = errors._Status(code=14, message="shutting down")
        status.details.add().Pack(info)
        mpsd_said = self.FakeError("shutting down", ((errors._DETAILS_KEY,
                                                      status.SerializeToString()),))
        self.assertTrue(client_module.daemon_answered(mpsd_said))
        # gRPC's own error, whatever its text says.
        grpc_said = self.FakeError("mpsd.sock: Connection refused", ())
        self.assertFalse(client_module.daemon_answered(grpc_said))
        self.assertTrue(client_module.daemon_answered(errors.from_rpc_error(mpsd_said)))
        self.assertFalse(client_module.daemon_answered(errors.from_rpc_error(grpc_said)))


if __name__ == "__main__":
    unittest.main()
