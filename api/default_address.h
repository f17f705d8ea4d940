// Where mpsd listens and mpsctl connects when no address is given. Shared by the daemon and every
// client, so it depends on nothing but the C++ and POSIX standard libraries (no torch, no gRPC).
#ifndef MPSD_API_DEFAULT_ADDRESS_H_
#define MPSD_API_DEFAULT_ADDRESS_H_

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace mpsd::api {

// The environment variable that overrides the default address of the clients (mpsctl, the Python
// client). The daemon never reads it: a client's setting (often a remote TCP address) must not
// move where the daemon listens, nor drop its unix socket.
inline constexpr char kServerAddressEnv[] = "MPSD_ADDR";

// The per-user socket path: "$XDG_RUNTIME_DIR/mpsd/mpsd.sock" when `xdg_runtime_dir` is non-empty
// (Linux sessions: /run/user/UID, mode 0700), else "/tmp/mpsd-UID/mpsd.sock" (macOS, CI, ssh
// without a login session). The caller that listens creates the parent directory, mode 0700.
// Pure: takes the environment as arguments so that tests need not touch the real one.
inline std::string DefaultSocketPathFor(const char* xdg_runtime_dir, unsigned long uid) {
  if (xdg_runtime_dir != nullptr && xdg_runtime_dir[0] != '\0') {
    return std::string(xdg_runtime_dir) + "/mpsd/mpsd.sock";
  }
  return "/tmp/mpsd-" + std::to_string(uid) + "/mpsd.sock";
}

// The gRPC target: `mpsd_addr` (the value of MPSD_ADDR) when non-empty, else
// "unix://" + DefaultSocketPathFor(...), e.g. "unix:///run/user/1000/mpsd/mpsd.sock".
inline std::string DefaultServerAddressFor(const char* mpsd_addr, const char* xdg_runtime_dir,
                                           unsigned long uid) {
  if (mpsd_addr != nullptr && mpsd_addr[0] != '\0') return mpsd_addr;
  return "unix://" + DefaultSocketPathFor(xdg_runtime_dir, uid);
}

// DefaultServerAddressFor with this process's environment and real uid: the clients' default.
// Reads the environment: do not call while another thread may call setenv().
inline std::string DefaultServerAddress() {
  return DefaultServerAddressFor(std::getenv(kServerAddressEnv), std::getenv("XDG_RUNTIME_DIR"),
                                 getuid());
}

// The daemon's default listen address: the per-user socket, whatever MPSD_ADDR says.
inline std::string DefaultListenAddress() {
  return "unix://" + DefaultSocketPathFor(std::getenv("XDG_RUNTIME_DIR"), getuid());
}

}  // namespace mpsd::api

#endif  // MPSD_API_DEFAULT_ADDRESS_H_
