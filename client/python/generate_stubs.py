#!/usr/bin/env python3
"""Writes the Python client's generated files, which are committed so that
`pip install ./client/python` works from a clean clone without configuring the C++ project:

  mpsd_client/v1/mpsd_pb2.py, mpsd_pb2.pyi   protoc --python_out/--pyi_out of proto/mpsd/v1/mpsd.proto
  mpsd_client/v1/mpsd_pb2_grpc.py            grpc_python_plugin (--grpc_python_out)
  mpsd_client/_version.py                    the version in CMakeLists.txt's project(mpsd VERSION ...)
  mpsd_client/_rpc_descriptors.py            google/rpc/status.proto and error_details.proto as a
                                             serialized FileDescriptorSet, for errors.py's
                                             private descriptor pool (Debian 12 packages no
                                             Python googleapis-common-protos)

The generator is pinned: protoc 3.21.12 and grpc_python_plugin 1.51.1, Debian 12's
protobuf-compiler and protobuf-compiler-grpc (deploy/setup-debian.sh installs both). Another
version writes different code, so the script refuses it (--any-version overrides, for a look
only: do not commit its output).

The stubs live in the package `mpsd_client.v1`, not `mpsd.v1`: a project that generates its own
stubs from mpsd.proto gets the module `mpsd.v1.mpsd_pb2`, which must not be shadowed by ours. The
proto file keeps its name (mpsd/v1/mpsd.proto) in protobuf's descriptor pool, so both can be
imported in one interpreter as long as they come from the same mpsd.proto (protobuf accepts an
identical file twice, not two different ones).

  python3 client/python/generate_stubs.py          # write the files
  python3 client/python/generate_stubs.py --check  # exit 1 naming each file that differs (ctest
                                                   # PythonClient.StubsAreCurrent)
"""

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PACKAGE = "mpsd_client"
PROTOC_VERSION = "3.21.12"
GRPC_PLUGIN_PACKAGE = "protobuf-compiler-grpc"
GRPC_PLUGIN_VERSION = "1.51.1"
STUBS = ("mpsd_pb2.py", "mpsd_pb2.pyi", "mpsd_pb2_grpc.py")


def fail(message):
    sys.exit("generate_stubs: " + message)


def protoc_version(protoc):
    out = subprocess.run([protoc, "--version"], capture_output=True, text=True, check=True).stdout
    return out.split()[-1]


def grpc_plugin_version(plugin):
    """grpc_python_plugin has no --version: ask dpkg for the package that owns it."""
    owner = subprocess.run(["dpkg-query", "-S", os.path.realpath(plugin)], capture_output=True,
                           text=True)
    if owner.returncode != 0:
        return "unknown (not from a Debian package)"
    package = owner.stdout.split(":")[0]
    version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package],
                             capture_output=True, text=True).stdout
    return version.split("-")[0]


def project_version():
    with open(os.path.join(REPO, "CMakeLists.txt"), encoding="utf-8") as f:
        match = re.search(r"project\(mpsd VERSION ([0-9][0-9.]*)", f.read())
    if not match:
        fail("no `project(mpsd VERSION x.y.z` in CMakeLists.txt")
    return match.group(1)


def generate(protoc, plugin, out_dir):
    """The files as they should be, keyed by path relative to client/python."""
    subprocess.run([protoc, "--proto_path=" + os.path.join(REPO, "proto"),
                    "--python_out=" + out_dir, "--pyi_out=" + out_dir,
                    "--grpc_python_out=" + out_dir,
                    "--plugin=protoc-gen-grpc_python=" + plugin,
                    os.path.join(REPO, "proto", "mpsd", "v1", "mpsd.proto")], check=True)
    files = {}
    for name in STUBS:
        with open(os.path.join(out_dir, "mpsd", "v1", name), encoding="utf-8") as f:
            text = f.read()
        # The generated imports and module names follow the proto path (mpsd.v1); ours is
        # mpsd_client.v1. Only the Python module path changes, never the proto package or file.
        text = text.replace("from mpsd.v1 import mpsd_pb2", "from %s.v1 import mpsd_pb2" % PACKAGE)
        text = text.replace("'mpsd.v1.mpsd_pb2'", "'%s.v1.mpsd_pb2'" % PACKAGE)
        files[os.path.join(PACKAGE, "v1", name)] = text
    descriptor_set = os.path.join(out_dir, "rpc.pb")
    subprocess.run([protoc, "--proto_path=" + os.path.join(REPO, "proto"),
                    "--include_imports", "--descriptor_set_out=" + descriptor_set,
                    "google/rpc/status.proto", "google/rpc/error_details.proto"], check=True)
    with open(descriptor_set, "rb") as f:
        blob = f.read()
    lines = [repr(blob[i:i + 72]) for i in range(0, len(blob), 72)]
    files[os.path.join(PACKAGE, "_rpc_descriptors.py")] = (
        "# Written by client/python/generate_stubs.py: google/rpc/status.proto and\n"
        "# google/rpc/error_details.proto (proto/google/rpc/) with their imports, as a serialized\n"
        "# google.protobuf.FileDescriptorSet. Loaded by errors.py into a pool of its own.\n"
        "FILE_DESCRIPTOR_SET = (\n    " + "\n    ".join(lines) + ")\n")
    files[os.path.join(PACKAGE, "_version.py")] = (
        "# Written by client/python/generate_stubs.py from CMakeLists.txt's project(mpsd VERSION).\n"
        "__version__ = \"%s\"\n" % project_version())
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed files instead of writing them")
    parser.add_argument("--protoc", default=shutil.which("protoc") or "/usr/bin/protoc")
    parser.add_argument("--plugin", default=shutil.which("grpc_python_plugin") or
                        "/usr/bin/grpc_python_plugin")
    parser.add_argument("--any-version", action="store_true",
                        help="run with another protoc or plugin version (output not for commit)")
    args = parser.parse_args()
    for tool in (args.protoc, args.plugin):
        if not os.path.isfile(tool):
            fail("%s not found: install Debian 12's protobuf-compiler and %s "
                 "(deploy/setup-debian.sh)" % (tool, GRPC_PLUGIN_PACKAGE))
    versions = {"protoc": (protoc_version(args.protoc), PROTOC_VERSION),
                "grpc_python_plugin": (grpc_plugin_version(args.plugin), GRPC_PLUGIN_VERSION)}
    for tool, (found, pinned) in versions.items():
        if found != pinned and not args.any_version:
            fail("%s is %s; the committed stubs come from %s (Debian 12). Use that version, or "
                 "--any-version to look without committing" % (tool, found, pinned))

    with tempfile.TemporaryDirectory() as out_dir:
        files = generate(args.protoc, args.plugin, out_dir)
    stale = []
    for relative, text in sorted(files.items()):
        path = os.path.join(HERE, relative)
        current = None
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                current = f.read()
        if current == text:
            continue
        if args.check:
            stale.append(relative)
            diff = difflib.unified_diff((current or "").splitlines(True), text.splitlines(True),
                                        "committed/" + relative, "generated/" + relative, n=1)
            sys.stderr.writelines(list(diff)[:40])
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print("wrote client/python/" + relative)
    if stale:
        fail("%s differ from what proto/mpsd/v1/mpsd.proto generates: run `python3 "
             "client/python/generate_stubs.py` and commit the result" %
             ", ".join("client/python/" + s for s in stale))


if __name__ == "__main__":
    main()
