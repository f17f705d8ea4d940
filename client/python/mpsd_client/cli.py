"""Submit an mpsd job file and print each JobEvent as one JSON line until the job ends.

  mpsd-submit [--server ADDR] [--priority N] [--request-id ID] JOB.yaml
  (also: python3 -m mpsd_client.cli ..., or client/python/submit.py ... from a checkout)

stdout: one JSON object per event (protobuf's JSON mapping, proto field names); the job id and
errors go to stderr. Exit status: 0 if the job SUCCEEDED; 1 if it did not, or the job file or the
daemon said no; 2 if mpsd cannot be reached.
"""

import argparse
import os
import sys

import grpc

from . import client as _client
from . import jobfile
from .v1 import mpsd_pb2 as pb2

EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE, EXIT_DAEMON_UNAVAILABLE = 0, 1, 2, 3


def main(argv=None, prog=None):
    prog = prog or os.path.basename(sys.argv[0]) or "mpsd-submit"
    if prog in ("__main__.py", "cli.py"):
        prog = "mpsd-submit"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("job_file", metavar="JOB.yaml")
    parser.add_argument("--server", default=_client.default_address(),
                        help="mpsd's address (default: $MPSD_ADDR, else the per-user socket: %(default)s)")
    parser.add_argument("--priority", type=int,
                        help="queued jobs run highest priority first (default: the file's priority:, else 0)")
    parser.add_argument("--request-id",
                        help="submit at most once: the same id returns the job it created "
                        "(default: the file's request_id:)")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="deadline of the SubmitJob call, seconds (default: %(default)s)")
    parser.add_argument("--tls-ca", metavar="FILE",
                        help="PEM CA that mpsd's certificate chains to (default: the system's); "
                        "TCP servers off loopback always use TLS")
    parser.add_argument("--tls-cert", metavar="FILE", help="client certificate (mutual TLS)")
    parser.add_argument("--tls-key", metavar="FILE", help="key of --tls-cert")
    parser.add_argument("--tls", action="store_true",
                        help="TLS on a loopback address too (system CAs unless --tls-ca)")
    parser.add_argument("--token-file", metavar="FILE",
                        help="bearer token for a TCP server (default: $MPSD_TOKEN)")
    args = parser.parse_args(argv)

    try:
        request = jobfile.read_job_file(args.job_file)
    except jobfile.JobFileError as e:
        print(e, file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:
        print("%s: cannot read %s: %s" % (prog, args.job_file, e.strerror), file=sys.stderr)
        return EXIT_FAILED
    except ImportError as e:  # PyYAML
        print("%s: %s for %s (pip install pyyaml; Debian: apt install python3-yaml)"
              % (prog, e, sys.executable), file=sys.stderr)
        return EXIT_FAILED

    server = _client.grpc_target(args.server)
    job_id = None
    final_state = None
    try:
        client = _client.Client(server, timeout=args.timeout, tls=args.tls, tls_ca=args.tls_ca,
                                tls_cert=args.tls_cert, tls_key=args.tls_key,
                                token_file=args.token_file)
    except (OSError, ValueError) as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 64
    with client:
        try:
            job = client.submit(request, priority=args.priority, request_id=args.request_id)
            job_id = job.id
            print("%s: submitted job %s" % (prog, job_id), file=sys.stderr)
            for event in client.follow(job_id):
                print(_client.to_json_line(event), flush=True)
                if event.WhichOneof("payload") == "state":
                    final_state = event.state.state
        except grpc.RpcError as e:
            return report_rpc_error(e, prog, server, job_id)
        except KeyboardInterrupt:
            print("\n%s: stopped following; job %s keeps running" % (prog, job_id), file=sys.stderr)
            return 128 + 2
    if final_state not in _client.terminal_states():
        print("%s: the event stream of job %s ended before the job did" % (prog, job_id),
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if final_state == pb2.Job.SUCCEEDED else EXIT_FAILED


def report_rpc_error(error, prog, server, job_id):
    code = error.code()
    if code == grpc.StatusCode.UNAVAILABLE and _client.daemon_answered(error):
        print("%s: mpsd at %s is running but answered UNAVAILABLE: %s (try again later)"
              % (prog, server, error.details()), file=sys.stderr)
        return EXIT_DAEMON_UNAVAILABLE
    if code == grpc.StatusCode.UNAVAILABLE:
        if job_id is None and "handshake" in (error.details() or "").lower():
            print("%s: cannot reach mpsd at %s: TLS handshake failed: %s"
                  % (prog, server, error.details()), file=sys.stderr)
        elif job_id is None:
            print("%s: cannot reach mpsd at %s: is the daemon running? (start it with: mpsd)"
                  % (prog, server), file=sys.stderr)
        else:
            print("%s: lost mpsd at %s while following job %s: %s"
                  % (prog, server, job_id, error.details()), file=sys.stderr)
        return EXIT_UNREACHABLE
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        print("%s: mpsd at %s did not answer in time" % (prog, server), file=sys.stderr)
        return EXIT_UNREACHABLE
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        print("%s: mpsd at %s refused the call: %s" % (prog, server, error.details()),
              file=sys.stderr)
        return EXIT_FAILED
    print("%s: %s" % (prog, error.details() or code.name), file=sys.stderr)
    return EXIT_FAILED


def entry_point():
    """The console script mpsd-submit."""
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
