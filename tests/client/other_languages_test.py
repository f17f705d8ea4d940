#!/usr/bin/env python3
"""The Go and Node.js examples of docs/clients.md (examples/clients/) built and run as a user
would, against a real mpsd over TLS with a bearer token: each submits a small TrainJob, follows
its events to the end and exits 0 only if the job SUCCEEDED.

Go: GOPATH mode, offline, with Debian's packages (golang-go, golang-google-grpc-dev,
golang-github-golang-protobuf-1-5-dev, protoc-gen-go, protoc-gen-go-grpc) and stubs generated
from the proto. Node: `npm ci` of the example's package-lock.json (the npm registry).

Run: MPSD_BINARY=BUILD/server/mpsd python3 tests/client/other_languages_test.py GoClientTest
     (or NodeClientTest); through CTest: ctest -R OtherLanguages.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(REPO, "examples", "clients")
PROTO = os.path.join(REPO, "proto")
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def run(argv, **kwargs):
    """Runs argv; fails with its output when it exits non-zero."""
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **kwargs)
    if result.returncode != 0:
        raise AssertionError("%s exited %d:\n%s" % (" ".join(argv), result.returncode,
                                                     result.stdout))
    return result.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TlsDaemon:
    """mpsd on a unix socket and on TLS 127.0.0.1:PORT, with a CA, a server certificate for
    127.0.0.1 and a submitter token written to files, as an operator would set it up."""

    def __init__(self, directory):
        binary = os.environ.get("MPSD_BINARY") or os.path.join(REPO, "build", "server", "mpsd")
        self.dir = directory
        self.ca = os.path.join(directory, "ca.pem")
        run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
             os.path.join(directory, "ca.key"), "-out", self.ca, "-days", "1", "-subj", "/CN=ca"])
        run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout",
             os.path.join(directory, "server.key"), "-out", os.path.join(directory, "server.csr"),
             "-subj", "/CN=127.0.0.1"])
        with open(os.path.join(directory, "san"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        run(["openssl", "x509", "-req", "-in", os.path.join(directory, "server.csr"), "-CA",
             self.ca, "-CAkey", os.path.join(directory, "ca.key"), "-CAcreateserial", "-out",
             os.path.join(directory, "server.pem"), "-days", "1", "-extfile",
             os.path.join(directory, "san")])
        tokens = os.path.join(directory, "tokens.yaml")
        token = subprocess.run([binary, "token", "add", "--tokens", tokens, "--name", "example",
                                "--role", "submitter"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, check=True).stdout.strip()
        self.token_file = os.path.join(directory, "token")
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        self.port = free_port()
        self.address = "127.0.0.1:%d" % self.port
        self.log_path = os.path.join(directory, "mpsd.log")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [binary, "--listen", "unix://" + os.path.join(directory, "mpsd.sock"),
                 "--listen", self.address, "--tls-cert", os.path.join(directory, "server.pem"),
                 "--tls-key", os.path.join(directory, "server.key"), "--tokens", tokens,
                 "--state-dir", os.path.join(directory, "state")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError("mpsd exited with %d:\n%s" % (self.process.returncode,
                                                                 self.log()))
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("mpsd did not listen on %s:\n%s" % (self.address,
                                                                            self.log()))
                time.sleep(0.05)

    def env(self):
        env = dict(os.environ)
        env.update(MPSD_ADDRESS=self.address, MPSD_CA=self.ca, MPSD_TOKEN_FILE=self.token_file,
                   MPSD_DATA_ROOT=FASHION_MNIST)
        return env

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mpsd-clients-")
        self.daemon = TlsDaemon(self.dir)

    def tearDown(self):
        status = self.daemon.stop()
        log = self.daemon.log()
        with open(self.daemon.token_file) as f:
            self.assertNotIn(f.read().strip(), log, "the token reached the daemon's log")
        self.assertEqual(status, 0, log)
        shutil.rmtree(self.dir, ignore_errors=True)

    def check_output(self, output):
        self.assertRegex(output, r"submitted job \d+")
        self.assertRegex(output, r"epoch 1 test_accuracy 0\.\d{4}")
        self.assertRegex(output, r"job \d+ SUCCEEDED")


class GoClientTest(ClientTest):
    def test_go_example_over_tls(self):
        gopath = os.path.join(self.dir, "go")
        source = os.path.join(gopath, "src", "mpsd-example")
        os.makedirs(source)
        shutil.copy(os.path.join(EXAMPLES, "go", "main.go"), source)
        # The stubs land at GOPATH/src/mpsd/v1, the proto's go_package.
        run(["protoc", "-I", PROTO, "--go_out=" + os.path.join(gopath, "src"),
             "--go-grpc_out=" + os.path.join(gopath, "src"),
             os.path.join(PROTO, "mpsd", "v1", "mpsd.proto")])
        env = self.daemon.env()
        env.update(GO111MODULE="off", GOPATH=gopath + ":/usr/share/gocode", GOFLAGS="",
                   GOCACHE=os.path.join(self.dir, "gocache"))
        binary = os.path.join(self.dir, "mpsd-go-example")
        run(["go", "build", "-o", binary, "."], cwd=source, env=env)
        self.check_output(run([binary], env=env, timeout=600))

        # A wrong token: the example says what went wrong and exits non-zero.
        with open(self.daemon.token_file, "w") as f:
            f.write("mpsd_" + "0" * 64 + "\n")
        result = subprocess.run([binary], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("Unauthenticated", result.stdout)


class NodeClientTest(ClientTest):
    def test_node_example_over_tls(self):
        project = os.path.join(self.dir, "node")
        os.makedirs(project)
        for name in ("main.js", "package.json", "package-lock.json"):
            shutil.copy(os.path.join(EXAMPLES, "node", name), project)
        run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=project)
        env = self.daemon.env()
        env["MPSD_PROTO_DIR"] = PROTO
        self.check_output(run(["node", "main.js"], cwd=project, env=env, timeout=600))

        # A CA file that is not there: the example names the setting and the file.
        env["MPSD_CA"] = os.path.join(self.dir, "missing.pem")
        result = subprocess.run(["node", "main.js"], cwd=project, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=120)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("MPSD_CA: ENOENT", result.stdout)
        self.assertIn("missing.pem", result.stdout)


if __name__ == "__main__":
    unittest.main()
