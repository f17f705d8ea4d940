#!/usr/bin/env python3
"""Checks every #include under server/, tests/server/ and the torch-free libraries against the
daemon's layering (server/CMakeLists.txt, docs/ARCHITECTURE.md), so that the rules cannot rot:

  server/core      server/core only;       no gRPC server, HTTP or OpenSSL headers
  server/executor  server/executor only;   no HTTP or OpenSSL headers
  server/access    server/access only;     no HTTP headers
  server/grpc      grpc, core, access;     no HTTP headers
  server/http      http, core, access;     no grpcpp headers
  server/ (root)   anything in server/
  tests/server/L/  what layer L may, plus tests/
  api/, client/, trainer/, proto/: nothing from server/

Usage: include_rules_test.py SOURCE_DIR. Prints each violation as FILE:LINE and exits 1 if any.
"""
import pathlib
import re
import sys

LAYERS = {
    "core": {"allow": {"core"}, "forbid": ("grpcpp/server", "httplib.h", "openssl/")},
    "executor": {"allow": {"executor"}, "forbid": ("httplib.h", "openssl/")},
    "access": {"allow": {"access"}, "forbid": ("httplib.h",)},
    "grpc": {"allow": {"grpc", "core", "access"}, "forbid": ("httplib.h",)},
    "http": {"allow": {"http", "core", "access"}, "forbid": ("grpcpp/",)},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
SOURCE_SUFFIXES = {".h", ".cc"}


def server_layer_of(include):
    """'server/core/x.h' -> 'core'; 'server/config.h' -> '' (the root); else None."""
    parts = include.split("/")
    if parts[0] != "server":
        return None
    return parts[1] if len(parts) > 2 else ""


def check_file(path, rel, layer, is_test, problems):
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        match = INCLUDE.match(line)
        if not match:
            continue
        include = match.group(1)
        where = f"{rel}:{number}"
        target = server_layer_of(include)
        if layer is None:  # outside server/ and tests/server/
            if target is not None:
                problems.append(f"{where}: {include}: only server/ and its tests include server/")
            continue
        if layer == "":  # server/'s root and tests/server/'s root: anything in server/
            continue
        rules = LAYERS[layer]
        if target is not None and target not in rules["allow"]:
            allowed = ", ".join(sorted(rules["allow"]))
            problems.append(f"{where}: {include}: server/{layer} may include server/{{{allowed}}} only")
        for forbidden in rules["forbid"]:
            if include.startswith(forbidden) and not is_test:
                problems.append(f"{where}: {include}: server/{layer} must not use {forbidden}")


def layer_of_file(rel):
    parts = rel.parts
    if parts[0] == "server" or parts[:2] == ("tests", "server"):
        inner = parts[1:] if parts[0] == "server" else parts[2:]
        if len(inner) > 1 and inner[0] in LAYERS:
            return inner[0]
        if len(inner) > 1:  # e.g. server/http/dashboard/...: not C++; anything else is new
            raise SystemExit(f"{rel}: a folder in server/ that the rules do not know")
        return ""
    return None


def main():
    root = pathlib.Path(sys.argv[1])
    problems = []
    checked = 0
    for top in ("server", "tests/server", "api", "client", "trainer", "proto"):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root)
            check_file(path, rel, layer_of_file(rel), rel.parts[0] == "tests", problems)
            checked += 1
    for problem in problems:
        print(problem)
    print(f"include rules: {checked} files checked, {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
