// write_script_module KIND PATH INPUTS CLASSES: writes a TorchScript classifier for the e2e tests
// of user code (tests/e2e/hangs_e2e_test.cc), as a user would torch.jit.save it: a linear layer
// over the flattened input (INPUTS features → CLASSES logits) whose forward first loops on the
// sum of |input|. KIND "hang": `while s >= 0` never ends, whatever the input; "hang_on_data":
// `while s > 0` ends at once on the all-zero example the submit-time check uses and never on
// real data; "linear": no loop. Links LibTorch, so that the tests need no python3-torch.
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
  m.define("def forward(self, x):\n"
           "        s = float(torch.sum(torch.abs(x)))\n" +
           loop +
           "        return torch.addmm(self.bias, torch.flatten(x, 1), self.weight.t())\n");
  m.save(argv[2]);
  return 0;
}
