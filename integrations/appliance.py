"""A real cutout appliance for the plugins' tests: the binary (TEST_APPLIANCE_BINARY,
default target/debug/cutout) with a fresh data directory, an account on the
Pro plan and its key, serving U2NetP (quick) on free ports, HTTPS with the
self-signed certificate it makes. Its address and fingerprint are read from
its log, as an operator reads them from the journal.

It serves on every address, so that it announces itself (DNS-SD), on a
multicast DNS port of its own (CUTOUT_MDNS_PORT, set for this process too:
the booth under test browses there), never on real responders' 5353. Its
operator password is set, its button is a file, and a pairing request
expires after PAIRING_EXPIRE_SECONDS, so that the pairing tests (`Pairing`)
approve, refuse or let expire what a booth asks for.
"""

from __future__ import annotations

import http.client
import http.cookiejar
import os
import re
import selectors
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from unittest import mock


ROOT = Path(__file__).resolve().parent.parent
BINARY = Path(os.environ.get("TEST_APPLIANCE_BINARY", ROOT / "target/debug/cutout")).absolute()
PHOTO = ROOT.parent / "shared/eval/dev/grabcut/images/106024.jpg"
HTTPS = re.compile(r"HTTPS on 0\.0\.0\.0:(\d+); certificate SHA-256 fingerprint ([0-9A-F:]{95})")
HTTP = re.compile(r"listening on http://0\.0\.0\.0:(\d+)")
ANNOUNCED = re.compile(r'announced as "([^"]+)"')
PASSWORD = "the operator's long enough password"
PAIRING_EXPIRE_SECONDS = 5  # long enough to approve in, short enough to wait out


class Appliance:
    """`with Appliance() as appliance:` `https_url`, `http_url`, `fingerprint`, `key`,
    `name` (its DNS-SD instance), `keys()`, `press_button()`."""

    def __enter__(self) -> Appliance:
        self.data_dir = tempfile.mkdtemp(prefix="cutout-integrations-")
        self._cli("account", "create", "booth", "--plan", "pro")
        self.key = self._cli("key", "create", "booth").strip().splitlines()[-1]
        self._cli("admin", "set-password", input=PASSWORD + "\n")
        self.button = Path(self.data_dir, "button")
        self.button.write_text("0")
        os.environ["CUTOUT_MDNS_PORT"] = str(25353 + os.getpid() % 1000)
        self._start(http_port=0, https_port=0)
        return self

    def _start(self, http_port: int, https_port: int):
        env = dict(os.environ, RUST_LOG="info", CUTOUT_TLS_LISTEN=f"0.0.0.0:{https_port}",
                   CUTOUT_PIPELINE_BENCH_WHEN_IDLE="false", CUTOUT_BUTTON_VALUE_FILE=str(self.button),
                   CUTOUT_PAIRING_EXPIRE_SECONDS=str(PAIRING_EXPIRE_SECONDS))
        self._server = subprocess.Popen(
            [BINARY, "--data-dir", self.data_dir, "--models-dir", ROOT / "models",
             "serve", "--listen", f"0.0.0.0:{http_port}", "--model", "u2netp"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.log: list[str] = []
        threading.Thread(target=lambda: self.log.extend(self._server.stderr), daemon=True).start()
        try:
            self._wait_until_ready()
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *_):
        self._stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def _stop(self):
        self._server.terminate()
        self._server.wait(timeout=30)
        self._server.stderr.close()

    def move_to_a_new_card(self):
        """As an operator replaces a dead SD card: `cutout backup` taken while
        it serves, the service stopped, `cutout restore` onto a fresh data
        directory, the service started there at the same address."""
        passphrase = Path(self.data_dir, "..", f"{Path(self.data_dir).name}.passphrase").resolve()
        passphrase.write_text("a passphrase for the backup\n")
        backup = passphrase.with_suffix(".backup")
        self._cli("backup", str(backup), "--passphrase-file", str(passphrase))
        http_port, https_port = (int(url.rsplit(":", 1)[1]) for url in (self.http_url, self.https_url))
        self._stop()
        shutil.rmtree(self.data_dir)
        self.data_dir = tempfile.mkdtemp(prefix="cutout-integrations-new-card-")
        self.button = Path(self.data_dir, "button")
        self.button.write_text("0")
        # It refuses while something answers where the service would.
        served = {"CUTOUT_LISTEN": f"127.0.0.1:{http_port}", "CUTOUT_TLS_LISTEN": f"127.0.0.1:{https_port}"}
        self._cli("restore", str(backup), "--passphrase-file", str(passphrase), env=served)
        backup.unlink()
        passphrase.unlink()
        self._start(http_port, https_port)

    def images_charged(self) -> str:
        """This month's count for the booth's account, as `cutout usage` prints it."""
        return self._cli("usage", "booth").split(": ")[1].strip()

    def served(self) -> list[str]:
        """What served each cut-out so far, from the access log: `type=person model=modnet+u2netp`."""
        return [line.split("ms ", 1)[1].strip() for line in self.log if "POST /api/remove-bg 200 " in line]

    def next_served(self, before: int) -> str:
        """What served the first cut-out after the `before` ones `served` listed (its log line is
        written once the answer is sent, so it may come a moment later)."""
        deadline = time.monotonic() + 5
        while len(self.served()) <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.served()[before]

    def keys(self) -> int:
        """How many keys the booth account has (`cutout key list`, less its heading)."""
        return len(self._cli("key", "list", "booth").strip().splitlines()) - 1

    def add_backdrop(self, name: str, background: bytes, overlay: bytes | None = None):
        """As the operator adds one (`cutout backdrop add`, as the dashboard does)."""
        files = Path(tempfile.mkdtemp(prefix="backdrop-", dir=self.data_dir))
        (files / "background").write_bytes(background)
        args = ["backdrop", "add", name, str(files / "background")]
        if overlay:
            (files / "overlay.png").write_bytes(overlay)
            args += ["--overlay", str(files / "overlay.png")]
        self._cli(*args)
        shutil.rmtree(files)

    def remove_backdrops(self):
        for line in self._cli("backdrop", "list").splitlines():
            self._cli("backdrop", "remove", line.split("\t")[0])

    def press_button(self):
        """As the appliance's GPIO pin reads a press: high, then low."""
        self.button.write_text("1")
        time.sleep(0.3)
        self.button.write_text("0")

    def _cli(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> str:
        done = subprocess.run([BINARY, "--data-dir", self.data_dir, *args], capture_output=True, text=True,
                              input=input, env=dict(os.environ, RUST_LOG="warn", **(env or {})))
        assert done.returncode == 0, f"cutout {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
        return done.stdout

    def _wait_until_ready(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self._server.poll() is None, "the appliance exited:\n" + "".join(self.log)
            text = "".join(self.log)
            secure, plain, announced = HTTPS.search(text), HTTP.search(text), ANNOUNCED.search(text)
            if secure and plain and announced:
                self.https_url, self.fingerprint = f"https://127.0.0.1:{secure[1]}", secure[2]
                self.http_url, self.name = f"http://127.0.0.1:{plain[1]}", announced[1]
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
            def do_POST(self):  # and GET: a captive portal answers everything with its page
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = b"<html><body>Sign in to the hotel Wi-Fi</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST

            def log_message(self, *_):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_port}"

    def __exit__(self, *_):
        self._server.shutdown()
        self._server.server_close()


class Switch:
    """`with Switch(appliance[, state]) as switch:` a port on 127.0.0.1 (`switch.url`,
    HTTPS) that leads to the appliance's HTTPS byte for byte (its certificate
    included) while `switch.state` is "up"; "down" refuses connections, as a
    switched-off appliance's address does, and "hung" accepts them and never
    answers, as a frozen one does. The `STALLS` play an appliance that hangs
    once it has a request: TLS with its own certificate, the request read up to
    that point, then nothing. `switch.sent` and `switch.received` count the
    bytes the booth sent and got back through it."""

    # How much of a request's body a stalled appliance reads before it hangs.
    STALLS = {"hangs after the headers": 0, "hangs in the body": 0.5, "hangs before the answer": 1}

    def __init__(self, appliance: Appliance, state: str = "up"):
        self.upstream = urllib.parse.urlsplit(appliance.https_url)
        self.state = state
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls = Path(appliance.data_dir, "tls")
        self._tls.load_cert_chain(tls / "certificate.pem", tls / "private-key.pem")
        self.sent = self.received = 0
        self._lock = threading.Lock()

    def __enter__(self) -> Switch:
        listener = socket.create_server(("127.0.0.1", 0))
        self.port = listener.getsockname()[1]
        self.url = f"https://127.0.0.1:{self.port}"
        listener.close()
        self._stop = threading.Event()
        self._held: list = []
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *_):
        self._stop.set()

    def _serve(self):
        listener = None
        while not self._stop.is_set():
            if self.state == "down":
                if listener:
                    listener.close()
                    listener = None
                for held in self._held:
                    held.close()
                self._held.clear()
                time.sleep(0.02)
                continue
            if listener is None:
                listener = socket.create_server(("127.0.0.1", self.port))
                listener.settimeout(0.05)
            try:
                booth, _ = listener.accept()
            except socket.timeout:
                continue
            if self.state == "down":  # switched off while this one connected
                booth.close()
            elif self.state == "hung":
                self._held.append(booth)
            elif self.state in self.STALLS:
                threading.Thread(target=self._stall, args=(booth, self.STALLS[self.state]), daemon=True).start()
            else:
                threading.Thread(target=self._relay, args=(booth,), daemon=True).start()
        for held in self._held:
            held.close()
        if listener:
            listener.close()

    def _relay(self, booth):
        with booth, socket.create_connection((self.upstream.hostname, self.upstream.port)) as appliance:
            pairs = {booth: appliance, appliance: booth}
            with selectors.DefaultSelector() as selector:
                for end in pairs:
                    selector.register(end, selectors.EVENT_READ)
                while self.state == "up":
                    for key, _ in selector.select(timeout=0.1):
                        data = key.fileobj.recv(65536)
                        if not data:
                            return
                        pairs[key.fileobj].sendall(data)
                        with self._lock:
                            if key.fileobj is booth:
                                self.sent += len(data)
                            else:
                                self.received += len(data)

    def _stall(self, booth, share_of_body: float):
        """Reads a request up to `share_of_body` of its body, then holds the connection unanswered."""
        try:
            booth = self._tls.wrap_socket(booth, server_side=True)
            request = b""
            while b"\r\n\r\n" not in request and (chunk := booth.recv(65536)):
                request += chunk
            head, _, body = request.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length: *(\d+)", head)
            wanted = int(int(length.group(1)) * share_of_body) if length else 0
            while len(body) < wanted and (chunk := booth.recv(65536)):
                body += chunk
        except OSError:
            pass
        self._held.append(booth)

    def bytes_counted(self) -> int:
        with self._lock:
            return self.sent + self.received

    def reset_counts(self):
        with self._lock:
            self.sent = self.received = 0


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


class Dashboard:
    """The appliance's operator in its dashboard, signed in as admin: the
    pairing requests waiting on its Booths page, approved or refused there
    as its forms do (a client that sends no Origin, as the forms allow)."""

    def __init__(self, appliance: Appliance):
        # Over HTTPS, where its plain HTTP sends a browser; the certificate is
        # the one the tests read from its log, not one to verify.
        self.url = appliance.https_url
        cookies = urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        self._browser = urllib.request.build_opener(cookies, urllib.request.HTTPSHandler(context=ssl._create_unverified_context()))
        page = self._open("/login")
        self._open("/login", csrf=csrf_of(page), name="admin", password=PASSWORD)

    def pending(self) -> dict[str, str]:
        """Each waiting request's code, by its handle."""
        page = self._open("/admin/booths")
        self._csrf = csrf_of(page)
        rows = re.findall(r'<tr data-pairing="([^"]+)">(.*?)</tr>', page, re.S)
        return {handle: re.search(r'<td class="code">([^<]+)</td>', row)[1].strip() for handle, row in rows}

    def approve(self, handle: str, account: str = "booth"):
        self._open(f"/admin/booths/{handle}/approve", csrf=self._csrf, account=account)

    def refuse(self, handle: str):
        self._open(f"/admin/booths/{handle}/refuse", csrf=self._csrf)

    def _open(self, path: str, **form: str) -> str:
        data = urllib.parse.urlencode(form).encode() if form else None
        with self._browser.open(self.url + path, data=data, timeout=30) as page:
            return page.read().decode()


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page)[1]


class ManInTheMiddle:
    """`with ManInTheMiddle(appliance) as port:` HTTPS on 127.0.0.1:port with a
    certificate of its own, passing each request on to the appliance's HTTPS
    and its answer back: what a booth meets when someone on the LAN answers
    in the appliance's place."""

    def __init__(self, appliance: Appliance):
        self.upstream = urllib.parse.urlsplit(appliance.https_url)

    def __enter__(self) -> int:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self._dir = tempfile.mkdtemp(prefix="cutout-mitm-")
        key, cert = f"{self._dir}/key.pem", f"{self._dir}/cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                        "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=photobooth.local"], check=True, capture_output=True)
        upstream = self.upstream
        trusting = ssl._create_unverified_context()  # it does not care whose certificate the appliance shows

        class Relay(BaseHTTPRequestHandler):
            def relay(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                connection = http.client.HTTPSConnection(upstream.hostname, upstream.port, timeout=30, context=trusting)
                try:
                    connection.request(self.command, self.path, body or None, headers)
                    reply = connection.getresponse()
                    answer = reply.read()
                finally:
                    connection.close()
                self.send_response(reply.status)
                for name, value in reply.getheaders():
                    if name.lower() not in ("connection", "content-length", "transfer-encoding", "date", "server"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = relay

            def log_message(self, *_):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self._server.server_port

    def __exit__(self, *_):
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self._dir, ignore_errors=True)


CODE = re.compile(r"pairing with the cutout appliance (.+) at (https://\S+): code (\d{3} \d{3})")
OUTCOME = re.compile(r"\b(not )?paired with the cutout appliance .*")


class Pairing:
    """A booth set up with no address and no key finds the appliance on the
    LAN and pairs with it, one test per way it ends; mixed into a
    unittest.TestCase that says how the program starts unpaired
    (`start_unpaired`) and stops (`stop_booth`), what its settings hold on
    disk (`saved`: url, key, fingerprint), and that a photo is cut out and
    charged by the appliance now (`assert_appliances_cutout`). The plugin's
    log lines come from `logger`."""

    appliance: Appliance
    logger: str

    def setUp(self):
        self.keys_before = self.appliance.keys()
        if not hasattr(self.appliance, "dashboard"):
            self.appliance.dashboard = Dashboard(self.appliance)
        self.dashboard = self.appliance.dashboard

    def tearDown(self):
        self.stop_booth()
        self.assertEqual(self.dashboard.pending(), {}, "no request left waiting")

    def test_pairs_when_the_operator_approves_its_code_on_the_dashboard(self):
        with self.assertLogs(self.logger, "INFO") as logs:
            self.start_unpaired()
            name, url, code = wait_for(logs, CODE).groups()
            self.assertEqual(name, self.appliance.name, "found on the LAN")
            self.dashboard.approve(self.the_request_showing(code))
            self.assertNotIn("not paired", wait_for(logs, OUTCOME)[0])
        self.assert_paired(url)
        self.assert_appliances_cutout()

    def test_pairs_when_the_operator_presses_the_appliances_button(self):
        with self.assertLogs(self.logger, "INFO") as logs:
            self.start_unpaired()
            url = wait_for(logs, CODE)[2]
            self.appliance.press_button()
            self.assertNotIn("not paired", wait_for(logs, OUTCOME)[0])
        self.assert_paired(url)
        self.assert_appliances_cutout()

    def test_stays_unpaired_when_the_operator_refuses(self):
        with self.assertLogs(self.logger, "INFO") as logs:
            self.start_unpaired()
            self.dashboard.refuse(self.the_request_showing(wait_for(logs, CODE)[3]))
            outcome = wait_for(logs, OUTCOME)[0]
        print(f"\n  logged: {outcome}", end=" ", file=sys.stderr)
        self.assertIn("not paired with the cutout appliance", outcome)
        self.assertIn("the operator refused it", outcome)
        self.assert_unpaired()

    def test_stays_unpaired_when_nobody_approves_in_time(self):
        with self.assertLogs(self.logger, "INFO") as logs:
            self.start_unpaired()
            wait_for(logs, CODE)
            outcome = wait_for(logs, OUTCOME, timeout=PAIRING_EXPIRE_SECONDS + 10)[0]
        print(f"\n  logged: {outcome}", end=" ", file=sys.stderr)
        self.assertIn("not paired with the cutout appliance", outcome)
        self.assertIn("expired", outcome)
        self.assert_unpaired()

    def test_shows_another_code_through_a_man_in_the_middle_and_stays_unpaired_when_refused(self):
        # Here, not at the top: remove.bg's clients' tests share this file
        # from a venv without the booths' package.
        import cutout_booth

        browse = cutout_booth.discover

        def answered_by(port):
            # Someone on the LAN answering for the appliance: its HTTPS is the proxy.
            def discover(*args, **kwargs):
                found = browse(*args, **kwargs)
                for appliance in found:
                    appliance.addresses, appliance.https_port = ["127.0.0.1"], port
                return found
            return discover

        with ManInTheMiddle(self.appliance) as port, mock.patch.object(cutout_booth, "discover", answered_by(port)), \
                self.assertLogs(self.logger, "INFO") as logs:
            self.start_unpaired()
            shown = wait_for(logs, CODE)[3]
            waiting = self.dashboard.pending()
            self.assertEqual(len(waiting), 1, waiting)
            (handle, code), = waiting.items()
            self.assertNotEqual(code, shown, "the operator sees the codes differ")
            self.dashboard.refuse(handle)
            outcome = wait_for(logs, OUTCOME)[0]
        self.assertIn("not paired with the cutout appliance", outcome)
        self.assertIn("the operator refused it", outcome)
        self.assert_unpaired()

    def the_request_showing(self, code: str) -> str:
        waiting = self.dashboard.pending()
        handles = [handle for handle, shown in waiting.items() if shown == code]
        self.assertEqual(len(handles), 1, f"the booth's code {code} on the dashboard: {waiting}")
        return handles[0]

    def assert_paired(self, url: str):
        saved_url, key, fingerprint = self.saved()
        self.assertEqual(saved_url, url)
        self.assertTrue(url.startswith("https://") and url.endswith(f":{urllib.parse.urlsplit(self.appliance.https_url).port}"), url)
        self.assertEqual(fingerprint, self.appliance.fingerprint, "the appliance's certificate is pinned")
        self.assertNotEqual(self.appliance.keys(), self.keys_before, "a key was made for the booth")
        self.assertTrue(key.startswith("ck_"), key)

    def assert_unpaired(self):
        self.assertEqual(self.saved(), ("", "", ""), "nothing saved")
        self.assertEqual(self.appliance.keys(), self.keys_before, "no key made")


def wait_for(logs, pattern, timeout: float = 20) -> re.Match:
    """The first line logged into `logs` (assertLogs') that matches `pattern`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in logs.output:
            if found := re.search(pattern, line):
                return found
        time.sleep(0.05)
    raise AssertionError(f"nothing logged matches {pattern!r} in {timeout} s: {logs.output}")
