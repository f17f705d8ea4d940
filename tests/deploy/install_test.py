#!/usr/bin/env python3
"""`cmake --install` of the build tree: the layout, that the installed mpsd finds the installed
executor, the systemd units as installed (systemd-analyze verify and security), the launchd plist
(plistlib) against what an install into Homebrew's prefix produces, and the shell completion that
the build generated from mpsctl's own command table.

Run: MPSD_BUILD_DIR=BUILD python3 tests/deploy/install_test.py -v
or through CTest: ctest --test-dir BUILD -R install_test.
"""

import os
import plistlib
import re
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("MPSD_BUILD_DIR") or os.path.join(REPO, "build")
PLIST = os.path.join(REPO, "deploy", "com.mpsd.daemon.plist")
HOMEBREW_PREFIX = "/opt/homebrew"


def run(argv, **kwargs):
    kwargs.setdefault("timeout", 300)
    return subprocess.run(argv, capture_output=True, text=True, **kwargs)


def cmake_install(prefix, destdir=None):
    env = dict(os.environ)
    if destdir:
        env["DESTDIR"] = destdir
    result = run(["cmake", "--install", BUILD, "--prefix", prefix], env=env)
    if result.returncode != 0:
        raise AssertionError("cmake --install failed:\n" + result.stdout + result.stderr)
    return result.stdout


def have_man_pages():
    return os.path.exists(os.path.join(BUILD, "man", "mpsd.1.gz"))


class InstallLayoutTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="mpsd-install-")
        cls.prefix = os.path.join(cls.dir.name, "usr", "local")
        cmake_install(cls.prefix)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def path(self, relative):
        return os.path.join(self.prefix, relative)

    def test_layout(self):
        for relative in ("bin/mpsd", "bin/mpsctl", "libexec/mpsd/mpsd-executor"):
            self.assertTrue(os.access(self.path(relative), os.X_OK), relative)
        self.assertFalse(os.path.exists(self.path("bin/mpsd-executor")))
        self.assertTrue(os.path.isfile(self.path("share/mpsd/mpsd.yaml")))
        examples = sorted(os.listdir(self.path("share/mpsd/examples")))
        self.assertEqual(examples, sorted(n for n in os.listdir(os.path.join(REPO, "examples"))
                                          if n.endswith(".yaml")))
        self.assertTrue(os.path.isfile(self.path("share/bash-completion/completions/mpsctl")))
        self.assertTrue(os.path.isfile(self.path("share/zsh/vendor-completions/_mpsctl")))
        self.assertTrue(os.path.isfile(self.path("lib/sysusers.d/mpsd.conf")))
        if have_man_pages():
            for page in ("mpsd.1.gz", "mpsctl.1.gz"):
                self.assertTrue(os.path.isfile(self.path("share/man/man1/" + page)), page)

    def test_installed_mpsd_finds_the_installed_executor_and_config(self):
        result = run([self.path("bin/mpsd"), "--check-config", self.path("share/mpsd/mpsd.yaml")])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("executor.path: %s\n" % self.path("libexec/mpsd/mpsd-executor"),
                      result.stdout)
        # The installed executor runs (its libraries resolve from where it was installed).
        executor = run([self.path("libexec/mpsd/mpsd-executor"), "--help"])
        self.assertEqual(executor.returncode, 0, executor.stderr)

    def test_units_name_the_prefix_they_were_installed_to(self):
        system = open(self.path("lib/systemd/system/mpsd.service")).read()
        user = open(self.path("lib/systemd/user/mpsd.service")).read()
        self.assertIn("\nExecStart=%s --listen unix:///run/mpsd/mpsd.sock --state-dir "
                      "/var/lib/mpsd\n" % self.path("bin/mpsd"), system)
        self.assertIn("\nExecStart=%s\n" % self.path("bin/mpsd"), user)
        self.assertNotIn("=/usr/bin/", system + user)

    @unittest.skipUnless(shutil.which("systemd-analyze"), "no systemd-analyze")
    def test_systemd_analyze_verify_and_security(self):
        env = dict(os.environ, MANPATH=self.path("share/man"))
        units = [self.path("lib/systemd/system/mpsd.service"),
                 self.path("lib/systemd/user/mpsd.service")]
        result = run(["systemd-analyze", "verify"] + units, env=env)
        output = result.stdout + result.stderr
        if not have_man_pages():  # Documentation=man:mpsd(1) cannot resolve
            output = "\n".join(line for line in output.splitlines() if "man mpsd(1)" not in line)
        self.assertEqual(output.strip(), "", output)
        security = run(["systemd-analyze", "security", "--offline=yes", "--threshold=30",
                        units[0]])
        self.assertEqual(security.returncode, 0, security.stdout + security.stderr)
        score = re.search(r"Overall exposure level for mpsd\.service: ([0-9.]+)", security.stdout)
        self.assertIsNotNone(score, security.stdout)
        print("\nsystemd-analyze security: exposure %s (0 = most restricted, 10 = none)"
              % score.group(1))
        self.assertLessEqual(float(score.group(1)), 3.0)
        for directive in ("ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
                          "NoNewPrivileges=yes", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
                          "StateDirectory=mpsd", "RuntimeDirectory=mpsd", "Type=notify",
                          "User=mpsd"):
            self.assertIn("\n" + directive + "\n", open(units[0]).read())


class LaunchdPlistTest(unittest.TestCase):
    def test_plist_parses_and_names_what_a_homebrew_install_produces(self):
        with open(PLIST, "rb") as f:
            plist = plistlib.load(f)
        self.assertEqual(plist["Label"], "com.mpsd.daemon")
        self.assertEqual(plist["KeepAlive"], {"SuccessfulExit": False})
        self.assertEqual(plist["ProcessType"], "Interactive")
        self.assertIsInstance(plist["ThrottleInterval"], int)
        self.assertGreater(plist["ThrottleInterval"], 0)
        self.assertTrue(plist["RunAtLoad"])
        program = plist["ProgramArguments"][0]
        self.assertTrue(program.startswith(HOMEBREW_PREFIX + "/"), program)
        for key in ("StandardOutPath", "StandardErrorPath"):
            self.assertTrue(plist[key].startswith("~/Library/Logs/mpsd/"), plist[key])

        # Every Homebrew path in it exists after `cmake --install --prefix /opt/homebrew`.
        with tempfile.TemporaryDirectory(prefix="mpsd-brew-") as destdir:
            cmake_install(HOMEBREW_PREFIX, destdir=destdir)
            text = open(PLIST).read()
            named = sorted(set(re.findall(r"%s/[^<\s\"]+" % re.escape(HOMEBREW_PREFIX), text)))
            self.assertIn(program, named)
            for path in named:
                self.assertTrue(os.path.exists(destdir + path), "%s is not installed" % path)
            self.assertTrue(os.access(destdir + program, os.X_OK))
            # The program the agent starts finds its executor in that layout.
            config = os.path.join(destdir, "empty.yaml")
            open(config, "w").close()
            result = run([destdir + program, "--check-config", config])
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("executor.path: %s%s/libexec/mpsd/mpsd-executor\n"
                          % (destdir, HOMEBREW_PREFIX), result.stdout)


class CompletionTest(unittest.TestCase):
    """The generated scripts, run by the real shells."""

    BASH = os.path.join(BUILD, "completion", "mpsctl")
    ZSH = os.path.join(BUILD, "completion", "_mpsctl")

    def complete_bash(self, *words):
        """COMPREPLY for `mpsctl WORDS...` (the cursor on the last word)."""
        line = " ".join(["mpsctl"] + ["'%s'" % w for w in words])
        script = ('source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _mpsctl; printf "%%s\\n" '
                  '"${COMPREPLY[@]}"' % (self.BASH, line, len(words)))
        result = run(["bash", "--norc", "-c", script])
        self.assertEqual(result.returncode, 0, result.stderr)
        return [w for w in result.stdout.splitlines() if w]

    def test_bash_completes_commands_options_and_files(self):
        commands = self.complete_bash("")
        for command in ("submit", "get", "list", "cancel", "logs", "device", "models",
                        "status", "bench", "completion", "artifacts", "download", "dashboard",
                        "--server",
                        "--json", "--version", "--reconnect-timeout"):
            self.assertIn(command, commands)
        self.assertEqual(self.complete_bash("su"), ["submit"])
        self.assertEqual(self.complete_bash("submit", "--pr"), ["--priority"])
        self.assertEqual(sorted(self.complete_bash("list", "--")),
                         sorted(["--state", "--kind", "--limit", "--server", "--json", "--help",
                                 "--version", "--reconnect-timeout", "--tls-ca", "--tls-cert",
                                 "--tls-key", "--tls", "--token-file",
                                 "--name", "--label", "--since"]))
        self.assertEqual(self.complete_bash("submit", "--priority", ""), [])
        with tempfile.TemporaryDirectory() as directory:
            open(os.path.join(directory, "job.yaml"), "w").close()
            self.assertEqual(self.complete_bash("submit", os.path.join(directory, "jo")),
                             [os.path.join(directory, "job.yaml")])

    def test_the_installed_file_is_what_mpsctl_prints(self):
        mpsctl = os.path.join(BUILD, "client", "mpsctl")
        for shell, path in (("bash", self.BASH), ("zsh", self.ZSH)):
            result = run([mpsctl, "completion", shell])
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(result.stdout, open(path).read())
        bad = run([mpsctl, "completion", "fish"])
        self.assertEqual(bad.returncode, 64)
        self.assertIn("fish", bad.stderr)

    @unittest.skipUnless(shutil.which("zsh"), "no zsh")
    def test_zsh_script_is_valid_zsh_and_lists_every_command(self):
        result = run(["zsh", "-n", self.ZSH])
        self.assertEqual(result.returncode, 0, result.stderr)
        text = open(self.ZSH).read()
        self.assertTrue(text.startswith("#compdef mpsctl\n"))
        for command in ("submit", "get", "list", "cancel", "logs", "device", "models", "status",
                        "bench", "completion"):
            self.assertRegex(text, r"\n    '%s:" % command)
            self.assertIn("\n        %s)\n" % command, text)


if __name__ == "__main__":
    unittest.main()
