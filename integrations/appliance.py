"""A real cutout appliance for the plugins' tests: the binary (TEST_APPLIANCE_BINARY,
default target/debug/cutout) with a fresh data directory, an account on the
Pro plan and its key, serving U2NetP (quick) on free ports, HTTPS with the
self-signed certificate it makes. Its address and fingerprint are read from
its log, as an operator reads them from the journal.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BINARY = Path(os.environ.get("TEST_APPLIANCE_BINARY", ROOT / "target/debug/cutout")).absolute()
PHOTO = ROOT.parent / "shared/eval/dev/grabcut/images/106024.jpg"
HTTPS = re.compile(r"HTTPS on (\S+); certificate SHA-256 fingerprint ([0-9A-F:]{95})")
HTTP = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


class Appliance:
    """`with Appliance() as appliance:` `https_url`, `http_url`, `fingerprint`, `key`."""

    def __enter__(self) -> Appliance:
        self.data_dir = tempfile.mkdtemp(prefix="cutout-integrations-")
        self._cli("account", "create", "booth", "--plan", "pro")
        self.key = self._cli("key", "create", "booth").strip().splitlines()[-1]
        env = dict(os.environ, RUST_LOG="info", CUTOUT_TLS_LISTEN="127.0.0.1:0", CUTOUT_PIPELINE_BENCH_WHEN_IDLE="false")
        self._server = subprocess.Popen(
            [BINARY, "--data-dir", self.data_dir, "--models-dir", ROOT / "models", "serve", "--listen", "127.0.0.1:0", "--model", "u2netp"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.log: list[str] = []
        threading.Thread(target=lambda: self.log.extend(self._server.stderr), daemon=True).start()
        try:
            self._wait_until_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_):
        self._server.terminate()
        self._server.wait(timeout=30)
        self._server.stderr.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def images_charged(self) -> str:
        """This month's count for the booth's account, as `cutout usage` prints it."""
        return self._cli("usage", "booth").split(": ")[1].strip()

    def _cli(self, *args: str) -> str:
        done = subprocess.run([BINARY, "--data-dir", self.data_dir, *args], capture_output=True, text=True,
                              env=dict(os.environ, RUST_LOG="warn"))
        assert done.returncode == 0, f"cutout {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
        return done.stdout

    def _wait_until_ready(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self._server.poll() is None, "the appliance exited:\n" + "".join(self.log)
            text = "".join(self.log)
            https, http = HTTPS.search(text), HTTP.search(text)
            if https and http:
                self.https_url, self.fingerprint = f"https://{https[1]}", https[2]
                self.http_url = http[1]
                try:
                    with urllib.request.urlopen(f"{self.http_url}/readyz", timeout=5) as reply:
                        if reply.status == 200:
                            return
                except OSError:
                    pass
            time.sleep(0.1)
        raise TimeoutError("the appliance was not ready within 60 s:\n" + "".join(self.log))


def free_port() -> int:
    """A local port nothing listens on (just closed): an appliance that is down."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def other_fingerprint(fingerprint: str) -> str:
    """The same fingerprint with its first byte changed: another certificate's."""
    first = "00" if not fingerprint.startswith("00") else "01"
    return first + fingerprint[2:]


class NotAnAppliance:
    """`with NotAnAppliance() as base_url:` a web server that answers every
    POST with 200 and an HTML page (a captive portal, say): what a booth gets
    when its address names something other than the appliance."""

    def __enter__(self) -> str:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Page(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = b"<html><body>Sign in to the hotel Wi-Fi</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_port}"

    def __exit__(self, *_):
        self._server.shutdown()
        self._server.server_close()


class Fallbacks:
    """The failures a plugin must survive by doing what its program does
    without it, one test each; mixed into a unittest.TestCase that says how
    an operator points the plugin at an appliance (`point_at`) and checks
    that the program's own result came, with one line logged that says
    `why` (`assert_programs_own_result`). `appliance` is the one running;
    `another_certificate` is how the plugin words a pin that does not match."""

    appliance: Appliance
    another_certificate: str

    def test_falls_back_when_the_appliance_is_down(self):
        self.point_at(f"https://127.0.0.1:{free_port()}", self.appliance.key, self.appliance.fingerprint)
        self.assert_programs_own_result("Connection refused")

    def test_falls_back_when_the_appliance_does_not_answer_in_time(self):
        import socket

        with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts connections, never answers
            address = f"https://127.0.0.1:{silent.getsockname()[1]}"
            self.point_at(address, self.appliance.key, self.appliance.fingerprint, timeout=1)
            self.assert_programs_own_result("timed out")

    def test_falls_back_when_the_key_is_refused(self):
        self.point_at(self.appliance.https_url, "ck_" + "0" * 40, self.appliance.fingerprint)
        self.assert_programs_own_result("HTTP 401")

    def test_falls_back_when_the_certificate_is_not_the_pinned_one(self):
        before = self.appliance.images_charged()
        self.point_at(self.appliance.https_url, self.appliance.key, other_fingerprint(self.appliance.fingerprint))
        self.assert_programs_own_result(self.another_certificate)
        self.assertEqual(self.appliance.images_charged(), before, "the photo was not sent")

    def test_falls_back_when_the_answer_is_not_a_cutout(self):
        with NotAnAppliance() as address:
            self.point_at(address, self.appliance.key, "")
            self.assert_programs_own_result("the answer is not an image")
