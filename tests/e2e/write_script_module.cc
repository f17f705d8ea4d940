// write_script_module KIND PATH INPUTS CLASSES: writes a TorchScript classifier for the e2e tests
// of user code (tests/e2e/hangs_e2e_test.cc), as a user would torch.jit.save it: a linear layer
// over the flattened input (INPUTS features → CLASSES logits) whose forward first loops on the
// sum of |input|. KIND "hang": `while s >= 0` never ends, whatever the input; "hang_on_data":
// `while s > 0` ends at once on the all-zero example the submit-time check uses and never on
// real data; "linear": no loop; "raise_on_data": no loop, but raises on any input that is not
// all zeros; and losses and metrics (loss_*, metric_*, below; INPUTS and CLASSES unused). Links
// LibTorch, so that the tests need no python3-torch.
#include <torch/script.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s hang|hang_on_data|linear PATH INPUTS CLASSES\n", argv[0]);
    return 64;
  }
  const std::string kind = argv[1];
  const int64_t inputs = std::atoll(argv[3]);
  const int64_t classes = std::atoll(argv[4]);
  // Losses (LossSpec.torchscript), forward(logits, targets): "loss_ce" cross-entropy (the
  // built-in loss, written by a user); "loss_per_example" one loss per example ([N], not a
  // scalar: refused at submit); "loss_hang_on_data" cross-entropy after a loop that ends at once
  // on the all-zero probe logits and never on a model's; "loss_reads_file" reads a file by name
  // (refused at submit); "loss_raise_after_3" cross-entropy for its first 3 calls (the submit's
  // probe is one of another copy), then fails an assert.
  if (kind.rfind("loss_", 0) == 0) {
    // The built-in cross-entropy, as TorchScript: the mean of -log_softmax at the target class.
    const std::string per_example =
        "-torch.log_softmax(logits, 1).gather(1, targets.unsqueeze(1)).squeeze(1)";
    std::string body;
    if (kind == "loss_ce") {
      body = "        return (" + per_example + ").mean()\n";
    } else if (kind == "loss_per_example") {
      body = "        return " + per_example + "\n";
    } else if (kind == "loss_hang_on_data") {
      body =
          "        s = float(torch.sum(torch.abs(logits)))\n"
          "        while s > 0.0:\n            s = s + 1.0\n"
          "        return (" +
          per_example + ").mean()\n";
    } else if (kind == "loss_raise_after_3") {
      body =
          "        self.calls += 1\n"
          "        assert self.calls <= 3, 'my loss gives up after 3 batches'\n"
          "        return (" +
          per_example + ").mean()\n";
    } else if (kind == "loss_reads_file") {
      body =
          "        x = torch.from_file('/etc/hostname', size=1)\n"
          "        return x.float().sum() * 0 + (" +
          per_example + ").mean()\n";
    } else {
      std::fprintf(stderr, "unknown kind %s\n", kind.c_str());
      return 64;
    }
    torch::jit::Module loss("Loss");
    loss.register_attribute("calls", c10::IntType::get(), int64_t{0});
    loss.define("def forward(self, logits, targets):\n" + body);
    loss.save(argv[2]);
    return 0;
  }
  // Metrics (MetricSpec.torchscript), forward(logits, targets): "metric_accuracy" the batch's
  // accuracy (argmax == target, mean); "metric_batch_size" the batch's examples as a float
  // scalar (its mean and sum reductions are known exactly); "metric_per_example" one value per
  // example (refused at submit); "metric_one_argument" forward(logits) (refused at submit);
  // "metric_raise_on_data" raises on targets that are not all zero (the probe's are);
  // "metric_hang_on_data" loops forever on them.
  if (kind.rfind("metric_", 0) == 0) {
    std::string forward = "def forward(self, logits, targets):\n";
    if (kind == "metric_accuracy") {
      forward += "        return (torch.argmax(logits, 1) == targets).float().mean()\n";
    } else if (kind == "metric_batch_size") {
      forward += "        return torch.sum(logits) * 0.0 + logits.size(0)\n";
    } else if (kind == "metric_per_example") {
      forward += "        return torch.max(logits, 1)[0]\n";
    } else if (kind == "metric_one_argument") {
      forward = "def forward(self, logits):\n        return torch.mean(logits)\n";
    } else if (kind == "metric_hang_on_data") {
      forward +=
          "        s = float(torch.sum(targets))\n"
          "        while s > 0.0:\n            s = s + 1.0\n"
          "        return torch.mean(logits)\n";
    } else if (kind == "metric_raise_on_data") {
      forward +=
          "        assert int(torch.sum(targets)) == 0, 'my metric cannot count'\n"
          "        return torch.mean(logits)\n";
    } else {
      std::fprintf(stderr, "unknown kind %s\n", kind.c_str());
      return 64;
    }
    torch::jit::Module metric("Metric");
    metric.define(forward);
    metric.save(argv[2]);
    return 0;
  }
  std::string loop;
  if (kind == "hang") {
    loop = "        while s >= 0.0:\n            s = s + 1.0\n";
  } else if (kind == "hang_on_data") {
    loop = "        while s > 0.0:\n            s = s + 1.0\n";
  } else if (kind == "raise_on_data") {
    loop = "        assert s == 0.0, 'my model refuses real data'\n";
  } else if (kind != "linear") {
    std::fprintf(stderr, "unknown kind %s\n", kind.c_str());
    return 64;
  }
  torch::jit::Module m("Looping");
  m.register_parameter("weight", (torch::randn({classes, inputs}) * 0.01).requires_grad_(),
                       /*is_buffer=*/false);
  m.register_parameter("bias", torch::zeros({classes}).requires_grad_(), /*is_buffer=*/false);
  m.define(
      "def forward(self, x):\n"
      "        s = float(torch.sum(torch.abs(x)))\n" +
      loop + "        return torch.addmm(self.bias, torch.flatten(x, 1), self.weight.t())\n");
  m.save(argv[2]);
  return 0;
}
