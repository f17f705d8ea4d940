"""Variants (2), (2b) and (5a-5c): PyTorch with the whole Fashion-MNIST dataset resident on the
GPU, decoded and normalised once; each epoch draws a randperm on the GPU and gathers every batch
by index (the last, partial batch included, as mpsd does, except with --cuda-graph); no host
sync inside an epoch.
  --fused                      Adam(fused=True) instead of the default (foreach) Adam     (2b)
  --compile default            torch.compile(model), Adam(fused=True)                     (5a)
  --compile reduce-overhead    torch.compile(model, mode="reduce-overhead"), fused Adam   (5b)
  --bf16                       autocast bf16 around the forward (cache_enabled=False in a graph)
  --channels-last              model and data in torch.channels_last
  --cuda-graph                 the whole step (gather, forward, loss, backward, Adam(fused,
                               capturable)) captured once in one CUDA graph and replayed per
                               batch; static batch shape, so the last partial batch of each
                               epoch (60,000 mod 128 = 96 examples) is dropped                (5c)
Compilation, warm-up and capture happen before or in epoch 1, which the median leaves out.
  --cudnn-benchmark            torch.backends.cudnn.benchmark = True (cuDNN's algorithm search,
                               as mpsd's executor sets it; default: cuDNN's heuristics)
  --profile START:COUNT        torch.profiler (CPU + CUDA) over steps START..START+COUNT-1,
                               counted from 1 over the run, each in a "ProfilerStep#N"
                               record_function as mpsd's `profile:` marks them; the Chrome trace
                               goes to --profile-out (compared with mpsd's traces, issue 15)

Seconds per epoch is the training pass alone, synchronised at its end; the test pass (batches of
1000, one sync) is not timed."""

import argparse
import contextlib
import sys

import torch
import torch.nn.functional as F

import common


@torch.no_grad()
def evaluate(model, images, labels, batch_size=1000):
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=images.device)
    for start in range(0, len(labels), batch_size):
        logits = model(images[start:start + batch_size])
        correct += logits.argmax(dim=1).eq(labels[start:start + batch_size]).sum()
    model.train()
    return correct.item() / len(labels)


def make_optimizer(model, args):
    kwargs = {}
    if args.fused or args.compile != "none" or args.cuda_graph:
        kwargs["fused"] = True
    if args.cuda_graph:
        kwargs["capturable"] = True
    if args.adamw:
        return torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                                 **kwargs)
    return torch.optim.Adam(model.parameters(), lr=args.lr, **kwargs)


BF16 = False   # --bf16: the forward under autocast(bfloat16)


def forward(model, x, in_graph=False):
    if not BF16:
        return model(x)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, cache_enabled=not in_graph):
        return model(x).float()


def eager_step(model, optimizer, train_x, train_y, index):
    optimizer.zero_grad(set_to_none=True)
    loss = F.nll_loss(forward(model, train_x.index_select(0, index)),
                      train_y.index_select(0, index))
    loss.backward()
    optimizer.step()
    return loss


class GraphStep:
    """The whole training step in one CUDA graph (PyTorch's "whole network capture" recipe):
    warm up on a side stream, capture once, then per batch copy the batch's indices into the
    static index tensor and replay. Warm-up updates are undone before training starts, so the
    run starts from the same weights and optimizer state as the eager variants."""

    def __init__(self, model, optimizer, train_x, train_y, batch_size, warmup=3):
        device = train_x.device
        self.static_index = torch.arange(batch_size, device=device)
        saved_params = [p.detach().clone() for p in model.parameters()]
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                eager_step(model, optimizer, train_x, train_y, self.static_index)
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.loss = F.nll_loss(forward(model, train_x.index_select(0, self.static_index),
                                           in_graph=True),
                                   train_y.index_select(0, self.static_index))
            self.loss.backward()
            optimizer.step()
        # Undo the warm-up: the same tensors (the graph holds their addresses), fresh values.
        with torch.no_grad():
            for p, saved in zip(model.parameters(), saved_params):
                p.copy_(saved)
            for state in optimizer.state.values():
                for value in state.values():
                    if torch.is_tensor(value):
                        value.zero_()
        torch.cuda.synchronize(device)

    def __call__(self, index):
        self.static_index.copy_(index)
        self.graph.replay()
        return self.loss


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    common.add_common_args(parser)
    parser.add_argument("--fused", action="store_true", help="Adam(fused=True)")
    parser.add_argument("--compile", default="none", choices=["none", "default", "reduce-overhead"],
                        help="torch.compile the model in this mode (with fused Adam)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="capture the whole step in one CUDA graph (drops the partial batch)")
    parser.add_argument("--variant", default="", help="name in the results (default from flags)")
    parser.add_argument("--bf16", action="store_true", help="autocast bf16 forward")
    parser.add_argument("--adamw", action="store_true",
                        help="AdamW (decoupled weight decay) instead of Adam (sweeps, issue 31)")
    parser.add_argument("--weight-decay", type=float, default=0.01, help="AdamW's weight decay")
    parser.add_argument("--channels-last", action="store_true", help="torch.channels_last")
    parser.add_argument("--cudnn-benchmark", action="store_true",
                        help="torch.backends.cudnn.benchmark = True (default: heuristics)")
    parser.add_argument("--profile", default="", metavar="START:COUNT")
    parser.add_argument("--profile-out", default="trace.json")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (CPU runs); 0 keeps PyTorch's default")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    global BF16
    BF16 = args.bf16

    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = torch.device(args.device)
    train_x, train_y, test_x, test_y, load_s = common.load_resident(args.idx_dir, device,
                                                                    args.limit_train)

    model = common.Net().to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        train_x = train_x.contiguous(memory_format=torch.channels_last)
    optimizer = make_optimizer(model, args)
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)
    n, bs = len(train_y), args.batch_size
    setup_start = common.now()
    step = None
    if args.cuda_graph:
        step = GraphStep(model, optimizer, train_x, train_y, bs)
    forward_model = model
    if args.compile != "none":
        forward_model = torch.compile(model, mode=None if args.compile == "default" else args.compile)
    setup_s = common.now() - setup_start
    setup_peak = 0
    if device.type == "cuda":
        setup_peak = torch.cuda.max_memory_allocated(device)  # the data, warm-up and capture
        torch.cuda.reset_peak_memory_stats(device)
    last = n - n % bs if args.cuda_graph else n   # static shape: full batches only
    epoch_times, accuracies = [], []
    profile_start, profile_count = (int(v) for v in args.profile.split(":")) if args.profile else (0, 0)
    profiler, steps_done = None, 0
    for epoch in range(1, args.epochs + 1):
        common.sync(device)
        start = common.now()
        order = torch.randperm(n, device=device, generator=generator)
        for i in range(0, last, bs):
            index = order[i:i + bs]
            steps_done += 1
            if steps_done == profile_start:
                profiler = torch.profiler.profile(activities=[
                    torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
                profiler.__enter__()
            marked = (torch.profiler.record_function(f"ProfilerStep#{steps_done}")
                      if profiler is not None else contextlib.nullcontext())
            with marked:
                if step is not None:
                    loss = step(index)
                else:
                    loss = eager_step(forward_model, optimizer, train_x, train_y, index)
            if profiler is not None and steps_done == profile_start + profile_count - 1:
                common.sync(device)
                profiler.__exit__(None, None, None)
                profiler.export_chrome_trace(args.profile_out)
                profiler = None
        common.sync(device)
        epoch_times.append(common.now() - start)
        accuracies.append(evaluate(model, test_x, test_y))
        print(f"epoch {epoch}: {epoch_times[-1]:.3f} s, last loss {loss.item():.4f}, "
              f"test accuracy {accuracies[-1]:.4f}", flush=True)
    if args.cuda_graph:
        variant, what = "5c", "whole step in one CUDA graph, Adam(fused, capturable), last partial batch dropped"
    elif args.compile != "none":
        variant, what = ("5a" if args.compile == "default" else "5b"), (
            f'torch.compile(mode="{args.compile}"), Adam(fused=True)')
    elif args.fused:
        variant, what = "2b", "Adam(fused=True)"
    else:
        variant, what = "2", "Adam (default: foreach)"
    if args.adamw:
        what = what.replace("Adam", "AdamW") + f", weight decay {args.weight_decay:g}"
    if args.bf16:
        what += ", bf16 autocast"
    if args.channels_last:
        what += ", channels_last"
    if args.cudnn_benchmark:
        what += ", cudnn.benchmark"
    description = "PyTorch, data resident on the GPU, randperm + index_select per batch, " + what
    common.write_result(args.json, args.variant or variant, description, epoch_times, accuracies,
                        data_load_s=load_s, setup_s=setup_s,
                        steps_per_epoch=len(range(0, last, bs)),
                        threads=torch.get_num_threads(),
                        peak_allocated_bytes=(torch.cuda.max_memory_allocated(device)
                                              if device.type == "cuda" else 0),
                        setup_peak_allocated_bytes=setup_peak,
                        reserved_bytes=(torch.cuda.memory_reserved(device)
                                        if device.type == "cuda" else 0))


if __name__ == "__main__":
    sys.exit(main())
