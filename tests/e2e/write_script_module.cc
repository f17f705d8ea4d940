// write_script_module KIND PATH INPUTS CLASSES: writes a TorchScript classifier for the e2e tests
// of user code (tests/e2e/hangs_e2e_test.cc), as a user would torch.jit.save it: a linear layer
// over the flattened input (INPUTS features → CLASSES logits) whose forward first loops on the
// sum of |input|. KIND "hang": `while s >= 0` never ends, whatever the input; "hang_on_data":
// `while s > 0` ends at once on the all-zero example the submit-time check uses and never on
// real data; "linear": no loop; and losses (loss_*, below; INPUTS and CLASSES unused). Links
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
  // (refused at submit).
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
    loss.define("def forward(self, logits, targets):\n" + body);
    loss.save(argv[2]);
    return 0;
  }
  std::string loop;
  if (kind == "hang") {
    loop = "        while s >= 0.0:\n            s = s + 1.0\n";
  } else if (kind == "hang_on_data") {
    loop = "        while s > 0.0:\n            s = s + 1.0\n";
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
