#!/usr/bin/env python3
"""Screenshots TensorBoard's scalars page of runs mpsd wrote (issue 29's docs/tensorboard.png).

  python3 tests/perf/tensorboard_screenshot.py TB_TAR_GZ OUT.png

TB_TAR_GZ: the $OUT/tb.tar.gz of tests/perf/gpu_fast_path.sh phase t (the GPU host's runs under
tb/ and TensorBoard's own Python package, tensorboard/, from the host that has it). Runs that
TensorBoard with this machine's Python (Debian: python3-werkzeug, python3-markdown, python3-absl,
python3-grpcio, python3-protobuf, python3-numpy; --load_fast=false, so no data server binary) on
a free loopback port, opens the scalars dashboard in headless Chromium (python3-selenium,
chromium-driver), waits for the charts and saves the page. Not a test: a picture for the docs.
"""
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request

from selenium import webdriver


TAGS = "train/loss|epoch/val_accuracy|epoch/val_loss"
RUNS = "lr-[2-9]"

RUNTIME_VERSION_SHIM = '''
import enum, sys, types
import google.protobuf
try:
    import google.protobuf.runtime_version  # noqa: F401
except ImportError:
    module = types.ModuleType("google.protobuf.runtime_version")
    module.Domain = enum.Enum("Domain", "GOOGLE_INTERNAL PUBLIC")
    module.ValidateProtobufRuntimeVersion = lambda *args, **kwargs: None
    sys.modules["google.protobuf.runtime_version"] = module
    google.protobuf.runtime_version = module
'''


def main():
    archive, out = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="mpsd-tb-")
    with tarfile.open(archive) as tar:
        tar.extractall(work)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # TensorBoard's generated protos check the protobuf runtime's version (protobuf >= 5 has
    # google.protobuf.runtime_version); Debian 12's 3.21 runs them, given a module that answers.
    with open(os.path.join(work, "sitecustomize.py"), "w") as f:
        f.write(RUNTIME_VERSION_SHIM)
    env = dict(os.environ, PYTHONPATH=work)
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", os.path.join(work, "tb"),
         "--host", "127.0.0.1", "--port", str(port), "--load_fast=false"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(url + "data/runs", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None:
                    sys.exit("tensorboard exited: " + server.stdout.read().decode(errors="replace"))
                time.sleep(0.5)
        print("runs:", urllib.request.urlopen(url + "data/runs").read().decode())
        options = webdriver.ChromeOptions()
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1600,1100",
                     "--hide-scrollbars"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options)
        try:
            # The epoch metrics and the per-step loss of every run, smoothed as TensorBoard does.
            # The trials' loss per step and validation metrics per epoch (the sweep's parent
            # job writes hyperparameters only: left out by the run filter).
            query = urllib.parse.urlencode({"darkMode": "false", "tagFilter": TAGS,
                                            "runFilter": RUNS})
            driver.get(url + "?" + query + "#timeseries")
            time.sleep(20)  # TensorBoard's Angular app loads and draws its charts
            driver.save_screenshot(out)
        finally:
            driver.quit()
    finally:
        server.terminate()
        server.wait(10)
    print("wrote", out)


if __name__ == "__main__":
    main()
