#!/usr/bin/env python3
"""Submit an mpsd job file and print each JobEvent as one JSON line until the job ends.

  /usr/bin/python3 client/python/submit.py [--server ADDR] [--stubs DIR] [--priority N]
      [--request-id ID] JOB.yaml

stdout: one JSON object per event (protobuf's JSON mapping, proto field names); the job id and
errors go to stderr. Exit status: 0 if the job SUCCEEDED; 1 if it did not, or the job file or the
daemon said no; 2 if mpsd cannot be reached. Stubs: see mpsd_client.py (--stubs BUILD/python or
MPSD_PYTHON_STUBS=BUILD/python, built by `cmake --build BUILD --target mpsd_python_stubs`).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mpsd_client  # noqa: E402

PROG = "submit.py"
EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE = 0, 1, 2


def main(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("job_file", metavar="JOB.yaml")
    parser.add_argument("--server", default=mpsd_client.default_address(),
                        help="mpsd's address (default: $MPSD_ADDR, else the per-user socket: %(default)s)")
    parser.add_argument("--stubs", metavar="DIR",
                        help="directory holding mpsd/v1/mpsd_pb2.py (default: $%s, then build*/python)"
                        % mpsd_client.STUBS_ENV)
    parser.add_argument("--priority", type=int,
                        help="queued jobs run highest priority first (default: the file's priority:, else 0)")
    parser.add_argument("--request-id",
                        help="submit at most once: the same id returns the job it created "
                        "(default: the file's request_id:)")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="deadline of the SubmitJob call, seconds (default: %(default)s)")
    args = parser.parse_args(argv)

    try:
        import grpc
        import yaml  # noqa: F401  (used by mpsd_client; fail here with the hint below)
        pb2, pb2_grpc = mpsd_client.import_stubs(args.stubs)
    except mpsd_client.StubsNotFound as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return EXIT_FAILED
    except ImportError as e:
        print("%s: %s for %s (Debian: apt install python3-grpcio python3-protobuf python3-yaml and "
              "run /usr/bin/python3; else: pip install grpcio protobuf pyyaml)"
              % (PROG, e, sys.executable), file=sys.stderr)
        return EXIT_FAILED

    try:
        request = mpsd_client.read_job_file(args.job_file, pb2)
    except mpsd_client.JobFileError as e:
        print(e, file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:
        print("%s: cannot read %s: %s" % (PROG, args.job_file, e.strerror), file=sys.stderr)
        return EXIT_FAILED

    if args.priority is not None:
        request.priority = args.priority
    if args.request_id is not None:
        request.request_id = args.request_id

    server = "unix://" + args.server if args.server.startswith("/") else args.server
    job_id = None
    final_state = None
    with grpc.insecure_channel(server) as channel:
        stub = pb2_grpc.JobServiceStub(channel)
        try:
            job = stub.SubmitJob(request, timeout=args.timeout)
            job_id = job.id
            print("%s: submitted job %s" % (PROG, job_id), file=sys.stderr)
            for event in mpsd_client.follow_events(stub, pb2, job_id):
                print(mpsd_client.to_json_line(event), flush=True)
                if event.WhichOneof("payload") == "state":
                    final_state = event.state.state
        except grpc.RpcError as e:
            return report_rpc_error(e, server, job_id, grpc)
        except KeyboardInterrupt:
            print("\n%s: stopped following; job %s keeps running" % (PROG, job_id), file=sys.stderr)
            return 128 + 2
    if final_state not in mpsd_client.terminal_states(pb2):
        print("%s: the event stream of job %s ended before the job did" % (PROG, job_id), file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if final_state == pb2.Job.SUCCEEDED else EXIT_FAILED


def report_rpc_error(error, server, job_id, grpc):
    code = error.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        if job_id is None:
            print("%s: cannot reach mpsd at %s: is the daemon running? (start it with: mpsd)"
                  % (PROG, server), file=sys.stderr)
        else:
            print("%s: lost mpsd at %s while following job %s: %s"
                  % (PROG, server, job_id, error.details()), file=sys.stderr)
        return EXIT_UNREACHABLE
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        print("%s: mpsd at %s did not answer in time" % (PROG, server), file=sys.stderr)
        return EXIT_UNREACHABLE
    print("%s: %s" % (PROG, error.details() or code.name), file=sys.stderr)
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
