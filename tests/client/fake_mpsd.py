#!/usr/bin/env python3
"""A fake mpsd JobService for client tests and demos: every submitted job "trains" at once.

Each job emits QUEUED, RUNNING, a log line, `steps` step events over `epochs` epochs (sleeping
`step_delay` seconds per step), one epoch event per epoch, a summary and a terminal state
(SUCCEEDED, or FAILED with OUT_OF_MEMORY when `fail` is set). Events are stored, so
StreamEvents(after_seq) replays and then follows, as the real daemon's does.

Standalone, to watch mpsctl's follow mode without the daemon:
  /usr/bin/python3 tests/client/fake_mpsd.py --listen unix:///tmp/fake-mpsd.sock --steps 300
  build/client/mpsctl --server unix:///tmp/fake-mpsd.sock submit examples/fashion-mnist-small.yaml -f
"""

import argparse
import os
import sys
import threading
import time
from concurrent import futures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
import mpsd_client  # noqa: E402


def make_service(pb2, pb2_grpc, steps=20, step_delay=0.0, fail=False):
    from google.protobuf import timestamp_pb2

    class FakeJobService(pb2_grpc.JobServiceServicer):
        def __init__(self):
            self.lock = threading.Condition()
            self.jobs = {}      # id -> pb2.Job
            self.events = {}    # id -> [pb2.JobEvent]
            self.submitted = []  # SubmitJobRequests, in order

        # -- the simulated executor ---------------------------------------------------------
        def _emit(self, job_id, **payload):
            with self.lock:
                event = pb2.JobEvent(job_id=job_id, seq=len(self.events[job_id]) + 1, **payload)
                event.time.GetCurrentTime()
                self.events[job_id].append(event)
                self.jobs[job_id].last_seq = event.seq
                if "state" in payload:
                    self.jobs[job_id].state = payload["state"].state
                if "step" in payload:
                    self.jobs[job_id].last_step.CopyFrom(payload["step"])
                self.lock.notify_all()

        def _run(self, job_id, epochs):
            state = pb2.StateChange
            self._emit(job_id, state=state(state=pb2.Job.QUEUED))
            self._emit(job_id, state=state(state=pb2.Job.RUNNING))
            self._emit(job_id, log=pb2.LogLine(level=pb2.LogLine.INFO, text="fake: loaded 2,000 examples"))
            total = steps * epochs
            for step in range(1, total + 1):
                time.sleep(step_delay)
                epoch = (step - 1) // steps + 1
                self._emit(job_id, step=pb2.StepMetrics(
                    epoch=epoch, step=step, total_steps=total, loss=2.3 / (1 + step / 10),
                    accuracy=min(0.9, step / total), samples_per_second=12345.0,
                    step_time_ms=max(step_delay, 0.001) * 1000, batch_size=64))
                if step % steps == 0:
                    self._emit(job_id, epoch=pb2.EpochMetrics(
                        epoch=epoch, train_loss=0.5, train_accuracy=0.82, test_loss=0.45,
                        test_accuracy=0.84, epoch_time_s=steps * step_delay, samples_per_second=12345.0))
            if fail:
                self._emit(job_id, state=state(state=pb2.Job.FAILED, failure_reason=pb2.Job.OUT_OF_MEMORY,
                                               message="fake: out of memory"))
                return
            self._emit(job_id, summary=pb2.JobSummary(
                device="cpu", epochs=epochs, steps=total, final_train_loss=0.5, test_loss=0.45,
                test_accuracy=0.84, total_time_s=total * step_delay + 0.5, samples_per_second=12345.0,
                train_examples=2000, test_examples=500, parameters=1199882))
            self._emit(job_id, state=state(state=pb2.Job.SUCCEEDED))

        # -- JobService -----------------------------------------------------------------------
        def SubmitJob(self, request, context):
            with self.lock:
                self.submitted.append(request)
                job_id = str(len(self.jobs) + 1)
                job = pb2.Job(id=job_id, kind=pb2.Job.TRAIN_JOB, state=pb2.Job.QUEUED, spec=request)
                job.created_at.GetCurrentTime()
                self.jobs[job_id] = job
                self.events[job_id] = []
            epochs = request.train_job.epochs if request.train_job.HasField("epochs") else 1
            threading.Thread(target=self._run, args=(job_id, epochs), daemon=True).start()
            return job

        def _job(self, job_id, context):
            job = self.jobs.get(job_id)
            if job is None:
                import grpc
                context.abort(grpc.StatusCode.NOT_FOUND, 'no job "%s"' % job_id)
            return job

        def GetJob(self, request, context):
            with self.lock:
                job = pb2.Job()
                job.CopyFrom(self._job(request.job_id, context))
                return job

        def ListJobs(self, request, context):
            with self.lock:
                return pb2.ListJobsResponse(jobs=list(reversed(list(self.jobs.values()))))

        def CancelJob(self, request, context):
            import grpc
            with self.lock:
                job = self._job(request.job_id, context)
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              "fake: job %s cannot be cancelled" % job.id)

        def StreamEvents(self, request, context):
            next_seq = request.after_seq + 1
            terminal = mpsd_client.terminal_states(pb2)
            while context.is_active():
                with self.lock:
                    self._job(request.job_id, context)
                    pending = self.events[request.job_id][next_seq - 1:]
                    if not pending:
                        self.lock.wait(timeout=0.1)
                        continue
                for event in pending:
                    yield event
                    next_seq = event.seq + 1
                    if event.WhichOneof("payload") == "state" and event.state.state in terminal:
                        return

        def GetDevice(self, request, context):
            return pb2.DeviceInfo(kind="cpu", name="cpu (fake)", available=["cpu"],
                                  torch_version="0.0-fake", cpu_threads=os.cpu_count())

    return FakeJobService()


def start(address, pb2, pb2_grpc, **options):
    """Starts a fake on `address` (e.g. unix:///tmp/x.sock); returns (grpc server, service)."""
    import grpc
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    service = make_service(pb2, pb2_grpc, **options)
    pb2_grpc.add_JobServiceServicer_to_server(service, server)
    if server.add_insecure_port(address) == 0:
        raise RuntimeError("cannot listen on " + address)
    server.start()
    return server, service


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--listen", default=mpsd_client.default_address())
    parser.add_argument("--stubs", help="directory holding mpsd/v1/mpsd_pb2.py")
    parser.add_argument("--steps", type=int, default=300, help="steps per epoch")
    parser.add_argument("--step-delay", type=float, default=0.02, help="seconds per step")
    parser.add_argument("--fail", action="store_true", help="end every job FAILED (OUT_OF_MEMORY)")
    args = parser.parse_args()
    pb2, pb2_grpc = mpsd_client.import_stubs(args.stubs)
    if args.listen.startswith("unix://"):
        os.makedirs(os.path.dirname(args.listen[len("unix://"):]), exist_ok=True)
    server, _ = start(args.listen, pb2, pb2_grpc, steps=args.steps, step_delay=args.step_delay,
                      fail=args.fail)
    print("fake mpsd listening on", args.listen, file=sys.stderr)
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        server.stop(0)


if __name__ == "__main__":
    main()
