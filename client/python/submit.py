#!/usr/bin/env python3
"""From a checkout, without installing: runs the package's mpsd-submit (mpsd_client/cli.py).

  /usr/bin/python3 client/python/submit.py [--server ADDR] [--priority N] [--request-id ID] JOB.yaml

Needs grpcio, protobuf and PyYAML (Debian: python3-grpcio python3-protobuf python3-yaml with
/usr/bin/python3); the generated stubs are committed (client/python/mpsd_client/v1/). Installed (pip install ./client/python), the same program is
the command mpsd-submit.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":
    try:
        from mpsd_client import cli
    except ImportError as e:
        print("submit.py: %s for %s (Debian: apt install python3-grpcio python3-protobuf "
              "python3-yaml and run /usr/bin/python3; else: pip install ./client/python)"
              % (e, sys.executable), file=sys.stderr)
        sys.exit(1)
    sys.exit(cli.main(prog="submit.py"))
