#!/usr/bin/env bash
# The .deb, for real, on this machine (deploy/test.sh runs it after the suite): builds it with
# CPack from the tree already built (no rebuild), checks the units (systemd-analyze verify and
# security), installs it with apt, starts the daemon as the service (systemctl, where PID 1 is
# systemd; else the unit's own ExecStart by hand as the unit's user, in the directories the unit
# asks systemd for), submits a job through the installed mpsctl, and removes the package,
# checking that none of its files stay. Needs root (or sudo) and Debian's apt; skips otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${MPSD_BUILD_DIR:-build}"
say() { echo "test-package: $*"; }

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then sudo="sudo"; else say "skipped: needs root or sudo"; exit 0; fi
fi
if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
  say "skipped: needs Debian's apt and dpkg"
  exit 0
fi
if dpkg-query -W -f='${Status}' mpsd 2>/dev/null | grep -q "install ok installed"; then
  say "mpsd is already installed on this machine; refusing to replace it"
  exit 1
fi

work="$(mktemp -d -t mpsd-package-XXXXXX)"
chmod 755 "$work"
daemon_pid=""
cleanup() {
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    $sudo kill -TERM "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  if dpkg-query -W -f='${Status}' mpsd 2>/dev/null | grep -q "installed"; then
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq mpsd >/dev/null 2>&1 || true
  fi
  $sudo rm -rf /run/mpsd
  rm -rf "$work"
}
trap cleanup EXIT

# 1. The package, from the build tree as it is.
start=$(date +%s)
(cd "$work" && cpack -G DEB --config "$OLDPWD/$build_dir/CPackConfig.cmake" >cpack.log 2>&1) || {
  cat "$work/cpack.log"; exit 1; }
deb="$(ls "$work"/mpsd_*.deb)"
say "built $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB) in $(( $(date +%s) - start )) s"
dpkg-deb --info "$deb" | sed -n 's/^ \(Depends\|Version\|Architecture\):/  \1:/p'
dpkg-deb --contents "$deb" | awk '{print $6}' | sed 's|^\./|/|' | grep -v '/$' | sort >"$work/files"
for expected in /usr/bin/mpsd /usr/bin/mpsctl /usr/libexec/mpsd/mpsd-executor \
    /usr/share/mpsd/mpsd.yaml /usr/share/mpsd/examples/fashion-mnist-small.yaml \
    /usr/lib/systemd/system/mpsd.service /usr/lib/systemd/user/mpsd.service \
    /usr/lib/sysusers.d/mpsd.conf /usr/share/man/man1/mpsd.1.gz /usr/share/man/man1/mpsctl.1.gz \
    /usr/share/bash-completion/completions/mpsctl /usr/share/zsh/vendor-completions/_mpsctl; do
  grep -qx "$expected" "$work/files" || { say "the package lacks $expected"; cat "$work/files"; exit 1; }
done

# 2. Installed with apt (which resolves the Depends dpkg-shlibdeps wrote).
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >"$work/apt.log" 2>&1 || {
  cat "$work/apt.log"; exit 1; }
say "installed: $(dpkg-query -W -f='${Package} ${Version}' mpsd)"
getent passwd mpsd >/dev/null || { say "postinst did not create the mpsd user"; exit 1; }
/usr/bin/mpsd --version
/usr/bin/mpsctl --version | head -1
man -w mpsd >/dev/null && man -w mpsctl >/dev/null
unit=/usr/lib/systemd/system/mpsd.service

# 3. The units, as systemd reads them.
systemd-analyze verify "$unit" /usr/lib/systemd/user/mpsd.service
systemd-analyze security --offline=yes --threshold=30 "$unit" | tail -1

# 4. The service, started and used.
address=unix:///run/mpsd/mpsd.sock
if [ "$(ps -p 1 -o comm=)" = systemd ]; then
  say "PID 1 is systemd: systemctl start mpsd"
  $sudo systemctl daemon-reload
  $sudo systemctl start mpsd.service
  systemctl is-active mpsd.service
else
  # What systemd would do for this unit: RuntimeDirectory, StateDirectory (0700, owned by the
  # unit's user), then ExecStart as that user.
  user="$(sed -n 's/^User=//p' "$unit")"
  exec_start="$(sed -n 's/^ExecStart=//p' "$unit")"
  say "PID 1 is $(ps -p 1 -o comm=), not systemd: running ExecStart by hand as $user: $exec_start"
  for dir in /run/mpsd /var/lib/mpsd; do
    $sudo install -d -m 0700 -o "$user" -g "$user" "$dir"
  done
  # setpriv execs ExecStart itself (no session process between): $! is mpsd's pid.
  # shellcheck disable=SC2086  # ExecStart's words
  $sudo setpriv --reuid="$user" --regid="$user" --init-groups -- $exec_start 2>"$work/mpsd.log" &
  daemon_pid=$!
fi
for _ in $(seq 1 300); do
  $sudo /usr/bin/mpsctl --server "$address" device >/dev/null 2>&1 && break
  sleep 0.2
done
$sudo /usr/bin/mpsctl --server "$address" device
[ "$(stat -c '%U %a' /run/mpsd/mpsd.sock)" = "mpsd 600" ] || {
  say "socket: $(stat -c '%U %a' /run/mpsd/mpsd.sock), expected mpsd 600"; exit 1; }
# The installed example: 2,000 Fashion-MNIST images on the CPU.
$sudo /usr/bin/mpsctl --server "$address" submit /usr/share/mpsd/examples/fashion-mnist-small.yaml \
  --follow | tail -3
[ "$($sudo stat -c '%U' /var/lib/mpsd/mpsd.db)" = mpsd ] || { say "the job database is not the mpsd user's"; exit 1; }

# 5. Stopped, removed, purged: none of the package's files stay.
if [ -n "$daemon_pid" ]; then
  $sudo kill -TERM "$daemon_pid"
  wait "$daemon_pid" || { say "mpsd exited with $? on SIGTERM"; cat "$work/mpsd.log"; exit 1; }
  daemon_pid=""
  $sudo rm -rf /run/mpsd  # RuntimeDirectory: systemd removes it when the service stops
else
  $sudo systemctl stop mpsd.service
fi
$sudo env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq mpsd >"$work/apt.log" 2>&1 || {
  cat "$work/apt.log"; exit 1; }
left=""
while read -r file; do
  if [ -e "$file" ]; then left="$left $file"; fi
done <"$work/files"
[ -z "$left" ] || { say "left after purge:$left"; exit 1; }
[ ! -e /var/lib/mpsd ] || { say "/var/lib/mpsd left after purge"; exit 1; }
if [ -n "$(dpkg-query -W -f='${Status}' mpsd 2>/dev/null | grep installed || true)" ]; then
  say "dpkg still lists mpsd"; exit 1
fi
say "OK: built, installed, started, used and removed in $(( $(date +%s) - start )) s"
