#!/usr/bin/env python3
"""Tests for client/python: job files, and submit.py against the fake daemon (fake_mpsd.py).

Run (after building the stubs: cmake --build BUILD --target mpsd_python_stubs):
  MPSD_PYTHON_STUBS=BUILD/python /usr/bin/python3 tests/client/python_client_test.py -v
or through CTest: ctest --test-dir BUILD -R python_client_test.

With MPSD_TEST_SERVER=ADDR set, SubmitAgainstRealDaemonTest submits examples/fashion-mnist-small.yaml
to the real mpsd at ADDR as well.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SUBMIT = os.path.join(REPO, "client", "python", "submit.py")
sys.path.insert(0, os.path.join(REPO, "client", "python"))
sys.path.insert(0, HERE)

import mpsd_client  # noqa: E402

pb2, pb2_grpc = mpsd_client.import_stubs()
import fake_mpsd  # noqa: E402

GOOD = """kind: TrainJob
model: {name: convnet}
dataset: {name: fashion-mnist, root: /usr/share/datasets/fashion-mnist, limit_train: 2000, limit_test: 500}
batch_size: 64
epochs: 2
optimizer: {name: adam, learning_rate: 0.001}
seed: 1
device: cpu
"""


class JobFileTest(unittest.TestCase):
    def parse(self, text):
        return mpsd_client.parse_job_file(text, "job.yaml", pb2)

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
                         'job.yaml: missing "kind" (expected TrainJob or BenchJob)')
        self.assertEqual(self.error("kind: TranJob\n"),
                         'job.yaml: kind: unknown "TranJob" (expected TrainJob or BenchJob)')

    def test_bench_job(self):
        r = self.parse("kind: BenchJob\nmodels: [convnet]\nbatch_sizes: [1, 64]\n")
        self.assertEqual(r.WhichOneof("spec"), "bench_job")
        self.assertEqual(list(r.bench_job.batch_sizes), [1, 64])

    def test_string_field_keeps_number_text(self):
        self.assertEqual(self.parse("kind: TrainJob\ndevice: 12\n").train_job.device, "12")

    def test_syntax_error_names_line(self):
        self.assertRegex(self.error("kind: TrainJob\nmodel: {name: convnet\n"),
                         r"^job\.yaml:\d+:\d+: YAML syntax error: ")

    def test_empty(self):
        self.assertIn("empty job file", self.error("# nothing\n"))

    def test_examples(self):
        for name in ("fashion-mnist.yaml", "fashion-mnist-small.yaml"):
            r = mpsd_client.read_job_file(os.path.join(REPO, "examples", name), pb2)
            self.assertEqual(r.train_job.dataset.name, "fashion-mnist")


def run_submit(server, job_file, *extra):
    env = dict(os.environ)
    return subprocess.run([sys.executable, SUBMIT, "--server", server, job_file, *extra],
                          capture_output=True, text=True, timeout=60, env=env)


class SubmitWithFakeDaemonTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="mpsd-py-")
        self.address = "unix://%s/mpsd.sock" % self.dir.name
        self.job_file = os.path.join(self.dir.name, "job.yaml")
        with open(self.job_file, "w") as f:
            f.write(GOOD)

    def tearDown(self):
        self.dir.cleanup()

    def start(self, **options):
        server, service = fake_mpsd.start(self.address, pb2, pb2_grpc, steps=5, **options)
        self.addCleanup(server.stop, 0)
        return service

    def test_succeeded_job_prints_json_lines_and_exits_0(self):
        service = self.start()
        result = run_submit(self.address, self.job_file)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("submitted job 1", result.stderr)
        events = [json.loads(line) for line in result.stdout.splitlines()]
        self.assertEqual([e["seq"] for e in events], [str(i) for i in range(1, len(events) + 1)])
        self.assertTrue(all(e["job_id"] == "1" for e in events))
        self.assertEqual(events[0]["state"], {"state": "QUEUED"})
        self.assertEqual(events[-1]["state"], {"state": "SUCCEEDED"})
        self.assertIn("total_steps", next(e for e in events if "step" in e)["step"])  # proto names
        self.assertEqual(service.submitted[0].train_job.epochs, 2)
        self.assertNotIn(" ", result.stdout.splitlines()[0])  # compact

    def test_failed_job_exits_1(self):
        self.start(fail=True)
        result = run_submit(self.address, self.job_file)
        self.assertEqual(result.returncode, 1, result.stderr)
        last = json.loads(result.stdout.splitlines()[-1])
        self.assertEqual(last["state"]["failure_reason"], "OUT_OF_MEMORY")

    def test_missing_daemon_exits_2(self):
        result = run_submit(self.address, self.job_file)
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr, "submit.py: cannot reach mpsd at %s: is the daemon running? "
                         "(start it with: mpsd)\n" % self.address)
        self.assertEqual(result.stdout, "")

    def test_bad_job_file_exits_1_before_connecting(self):
        with open(self.job_file, "w") as f:
            f.write("kind: TrainJob\nbatch_size: sixty\n")
        result = run_submit(self.address, self.job_file)
        self.assertEqual(result.returncode, 1)
        self.assertIn('%s: batch_size: expected an integer, got "sixty"' % self.job_file, result.stderr)


@unittest.skipUnless(os.environ.get("MPSD_TEST_SERVER"), "set MPSD_TEST_SERVER=ADDR of a running mpsd")
class SubmitAgainstRealDaemonTest(unittest.TestCase):
    def test_small_fashion_mnist_succeeds(self):
        result = run_submit(os.environ["MPSD_TEST_SERVER"],
                            os.path.join(REPO, "examples", "fashion-mnist-small.yaml"))
        self.assertEqual(result.returncode, 0, result.stderr)
        events = [json.loads(line) for line in result.stdout.splitlines()]
        self.assertEqual(events[-1]["state"]["state"], "SUCCEEDED")
        self.assertTrue(any("summary" in e for e in events))


if __name__ == "__main__":
    unittest.main()
