# Homebrew formula for mpsd, built from a release tarball:
#   brew install --formula deploy/homebrew/mpsd.rb        # or from a tap that carries this file
# A release tarball is `git archive --prefix=mpsd-VERSION/ -o mpsd-VERSION.tar.gz vVERSION`
# (no .git inside: the commit comes in through -DMPSD_GIT_COMMIT); `url` and `sha256` below are
# filled in when one is published (shasum -a 256 mpsd-VERSION.tar.gz).
# LibTorch comes from Homebrew's pytorch formula (arm64, built with MPS), whose CMake package
# sits inside its Python site-packages.
class Mpsd < Formula
  desc "Training daemon with a gRPC job API: Apple MPS, NVIDIA CUDA or CPU via LibTorch"
  homepage "https://github.com/mpsd-project/mpsd"
  url "https://github.com/mpsd-project/mpsd/releases/download/v0.1.0/mpsd-0.1.0.tar.gz"
  sha256 "0000000000000000000000000000000000000000000000000000000000000000"

  depends_on "cmake" => :build
  depends_on "help2man" => :build
  depends_on "pkg-config" => :build
  depends_on "abseil"
  depends_on "cli11"
  depends_on "grpc"
  depends_on "protobuf"
  depends_on "pytorch"
  depends_on "spdlog"
  depends_on "sqlite"
  depends_on "yaml-cpp"
  uses_from_macos "zlib"

  def install
    torch_cmake = Dir[Formula["pytorch"].opt_libexec/"lib/python3*/site-packages/torch/share/cmake"].first
    odie "no LibTorch CMake package in the pytorch formula" if torch_cmake.nil?
    system "cmake", "-S", ".", "-B", "build",
           "-DMPSD_BUILD_TESTS=OFF",
           "-DMPSD_GIT_COMMIT=v#{version}",
           "-DCMAKE_PREFIX_PATH=#{torch_cmake}",
           *std_cmake_args
    system "cmake", "--build", "build", "--target", "mpsd", "mpsd-executor", "mpsctl",
           "mpsd_man", "mpsd_completion"
    system "cmake", "--install", "build"
  end

  def caveats
    <<~EOS
      Run mpsd as a LaunchAgent (KeepAlive, ProcessType Interactive; logs in
      ~/Library/Logs/mpsd, state in ~/Library/Application Support/mpsd):
        #{opt_share}/mpsd/com.mpsd.daemon.plist, loaded by the project's deploy/setup-macos.sh --agent
      Then: mpsctl device
    EOS
  end

  test do
    assert_match "mpsd #{version}", shell_output("#{bin}/mpsd --version")
    (testpath/"mpsd.yaml").write "max_queued: 10\n"
    output = shell_output("#{bin}/mpsd --check-config #{testpath}/mpsd.yaml")
    assert_match %r{^executor\.path: .*/libexec/mpsd/mpsd-executor$}, output
    assert_match "submit", shell_output("#{bin}/mpsctl --help")
  end
end
