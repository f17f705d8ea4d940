"""Issue 31's PyTorch baseline: K seed ConvNets trained together on one GPU with PyTorch's own
ensemble recipe (torch.func.stack_module_state + vmap(grad_and_value), "Model ensembling",
pytorch.org/tutorials/intermediate/ensembling.html), each trial with its own AdamW learning
rate and weight decay (per-trial [K] vectors, the update written on the stacked parameters as
torch.optim.AdamW's formula: p -= lr·wd·p; m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
p -= lr·(m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)), each trial its own data order (its own
randperm per epoch) and its own dropout masks (vmap randomness="different").
  --cuda-graph    the whole step (gathers, forward, backward, the K updates) in one CUDA graph,
                  replayed per batch (full batches only, as torch_resident.py --cuda-graph)
Seconds per epoch: the K trials' training pass together, synchronised at its end (median of
epochs 2..N); the test pass is not timed. Writes the K trials' test accuracies.

  python3 tests/perf/torch_ensemble.py --idx-dir DIR --json out.json --trials 16 \\
      --lrs 3e-4,1e-3,3e-3,1e-2 --weight-decays 0,1e-4,1e-3,1e-2 --cuda-graph
(the grid of --lrs × --weight-decays, first varying slowest, must have --trials points)."""

import argparse
import copy
import itertools
import sys

import torch
import torch.nn.functional as F
try:  # PyTorch 2.x
    from torch.func import functional_call, grad_and_value, stack_module_state, vmap
except ImportError:  # PyTorch 1.13 (a CPU smoke test here): functorch, same semantics
    from functorch import grad_and_value, vmap
    from torch.nn.utils.stateless import functional_call

    def stack_module_state(models):
        params = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models])
                  for n, _ in models[0].named_parameters()}
        buffers = {n: torch.stack([dict(m.named_buffers())[n] for m in models])
                   for n, _ in models[0].named_buffers()}
        return params, buffers

import common


class Ensemble:
    """K ConvNets as stacked [K, ...] parameters, one vmapped step, per-trial AdamW."""

    def __init__(self, models, lrs, weight_decays, device, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.buffers = stack_module_state(models)
        self.params = {k: v.detach().clone() for k, v in self.params.items()}
        self.base = copy.deepcopy(models[0]).to("meta")
        k = len(models)
        self.lr = torch.tensor(lrs, device=device, dtype=torch.float32)
        self.wd = torch.tensor(weight_decays, device=device, dtype=torch.float32)
        self.b1, self.b2, self.eps = betas[0], betas[1], eps
        self.m = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.v = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.t = torch.zeros((), device=device)

        def loss_fn(params, buffers, x, y):
            return F.nll_loss(functional_call(self.base, {**params, **buffers}, (x,)), y)

        self.grad_fn = vmap(grad_and_value(loss_fn), in_dims=(0, 0, 0, 0), randomness="different")
        self.k = k

    def shape(self, t, like):
        return t.view(-1, *([1] * (like.dim() - 1)))

    def step(self, x, y):
        """x [K, B, 1, 28, 28] float32, y [K, B] int64 -> the K losses [K]."""
        grads, losses = self.grad_fn(self.params, self.buffers, x, y)
        self.t += 1
        bc1 = 1 - self.b1 ** self.t
        bc2 = 1 - self.b2 ** self.t
        with torch.no_grad():
            for n, p in self.params.items():
                g, m, v = grads[n], self.m[n], self.v[n]
                lr, wd = self.shape(self.lr, p), self.shape(self.wd, p)
                p.mul_(1 - lr * wd)
                m.lerp_(g, 1 - self.b1)
                v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
                denom = (v / bc2).sqrt_().add_(self.eps)
                p.sub_(lr * (m / bc1) / denom)
        return losses

    @torch.no_grad()
    def accuracies(self, images, labels, batch_size=1000):
        correct = torch.zeros(self.k, dtype=torch.int64, device=images.device)
        for start in range(0, len(labels), batch_size):
            x = images[start:start + batch_size]
            for i in range(self.k):
                params = {n: p[i] for n, p in self.params.items()}
                buffers = {n: b[i] for n, b in self.buffers.items()}
                logits = functional_call(self.eval_model, {**params, **buffers}, (x,))
                correct[i] += logits.argmax(dim=1).eq(labels[start:start + batch_size]).sum()
        return (correct.double() / len(labels)).tolist()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_args(parser)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--lrs", default="3e-4,1e-3,3e-3,1e-2")
    parser.add_argument("--weight-decays", default="0,1e-4,1e-3,1e-2")
    parser.add_argument("--cuda-graph", action="store_true")
    args = parser.parse_args()
    grid = list(itertools.product([float(v) for v in args.lrs.split(",")],
                                  [float(v) for v in args.weight_decays.split(",")]))
    if len(grid) != args.trials:
        sys.exit(f"--lrs × --weight-decays has {len(grid)} points, --trials is {args.trials}")
    device = torch.device(args.device)
    train_x, train_y, test_x, test_y, load_s = common.load_resident(args.idx_dir, device,
                                                                    args.limit_train)
    models = []
    for i in range(args.trials):
        torch.manual_seed(args.seed + i)
        models.append(common.Net().to(device))
    ensemble = Ensemble(models, [lr for lr, _ in grid], [wd for _, wd in grid], device)
    ensemble.eval_model = copy.deepcopy(models[0]).eval()
    n, bs, k = len(train_y), args.batch_size, args.trials
    generators = []
    for i in range(k):
        g = torch.Generator(device=device)
        g.manual_seed(args.seed + i)
        generators.append(g)
    static_index = torch.zeros(k, bs, dtype=torch.int64, device=device)

    def gathered_step():
        return ensemble.step(train_x[static_index], train_y[static_index])

    setup_start = common.now()
    graph = None
    if args.cuda_graph:
        saved = ({n_: p.clone() for n_, p in ensemble.params.items()},)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(3):
                gathered_step()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = gathered_step()
        with torch.no_grad():   # undo the warm-up
            for n_, p in ensemble.params.items():
                p.copy_(saved[0][n_])
            for state in (ensemble.m, ensemble.v):
                for t in state.values():
                    t.zero_()
            ensemble.t.zero_()
        torch.cuda.synchronize(device)
    setup_s = common.now() - setup_start
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    last = n - n % bs
    epoch_times, accuracies = [], []
    for epoch in range(1, args.epochs + 1):
        common.sync(device)
        start = common.now()
        orders = torch.stack([torch.randperm(n, device=device, generator=g) for g in generators])
        for i in range(0, last, bs):
            static_index.copy_(orders[:, i:i + bs])
            if graph is not None:
                graph.replay()
                losses = static_loss
            else:
                losses = gathered_step()
        common.sync(device)
        epoch_times.append(common.now() - start)
        accuracies.append(ensemble.accuracies(test_x, test_y))
        print(f"epoch {epoch}: {epoch_times[-1]:.3f} s, last losses {losses.tolist()}, "
              f"test accuracies {accuracies[-1]}", flush=True)
    description = (f"PyTorch ensemble recipe: stack_module_state + vmap(grad_and_value), {k} "
                   f"trials, per-trial AdamW, per-trial data order"
                   + (", whole step in one CUDA graph" if graph is not None else ", eager"))
    common.write_result(args.json, "ensemble", description, epoch_times,
                        [max(a) for a in accuracies], trial_accuracies=accuracies[-1],
                        trials=k, data_load_s=load_s, setup_s=setup_s,
                        steps_per_epoch=len(range(0, last, bs)),
                        peak_allocated_bytes=(torch.cuda.max_memory_allocated(device)
                                              if device.type == "cuda" else 0))


if __name__ == "__main__":
    sys.exit(main())
