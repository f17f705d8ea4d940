#!/usr/bin/env python3
"""Errors are data (DESIGN.md): no production code branches on an error message's words.

Scans server/, api/, trainer/ and client/ for a message of a status (`.message()`,
`.error_message()`) handed to a text match (StrContains, StartsWith, EndsWith, find), the
pattern that made behaviour depend on wording before causes travelled as data
(api/error_cause.h; google.rpc.ErrorInfo for clients). The one exception is listed below with
its reason. Usage: error_text_rules_test.py SOURCE_DIR; exits 1 naming each match.
"""
import pathlib
import re
import sys

MATCH = re.compile(r"(StrContains|StartsWith|EndsWith|\.find|\.rfind)\(\s*[^;]*?"
                   r"\b(message|error_message)\(\)", re.S)
# file -> why its matches are allowed.
# None today: mpsctl tells a connection it could not make by the channel's state, not gRPC's
# transport texts.
ALLOWED = {}


def main():
    root = pathlib.Path(sys.argv[1])
    problems = []
    checked = 0
    for top in ("server", "api", "trainer", "client"):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in (".h", ".cc") or not path.is_file():
                continue
            checked += 1
            rel = str(path.relative_to(root))
            text = path.read_text(errors="replace")
            for match in MATCH.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                if rel in ALLOWED:
                    continue
                problems.append(f"{rel}:{line}: {match.group(0).splitlines()[0]}: "
                                "branch on the status's cause (api/error_cause.h), not its words")
    for problem in problems:
        print(problem)
    print(f"error text rules: {checked} files checked, {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
