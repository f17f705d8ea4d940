"""Refuses to build the package without the stubs CMake generates (see pyproject.toml)."""

import os

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
NEEDED = [os.path.join("mpsd", "v1", "mpsd_pb2.py"), os.path.join("mpsd", "v1", "mpsd_pb2_grpc.py"),
          os.path.join("mpsd", "_version.py")]
missing = [p for p in NEEDED if not os.path.isfile(os.path.join(HERE, p))]
if missing:
    raise SystemExit(
        "mpsd: %s missing in %s: configure and build the stubs first, e.g. `cmake -S . -B build && "
        "cmake --build build --target mpsd_python_stubs` from the repository root"
        % (", ".join(missing), HERE))

setup()
