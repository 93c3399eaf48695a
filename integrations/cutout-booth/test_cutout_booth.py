"""cutout_booth's pieces without an appliance: the pairing code and the pin
from a certificate, multicast DNS packets read and written, a browse against
a small responder that answers each question alone, as a terse one would,
the wait for a choice among several appliances, and a pairing whose
certificate changes between the request and the poll (the appliance's own
answers are in the plugins' tests).

usage: python test_cutout_booth.py   (any Python 3.9+; `make test-integrations` runs it in each venv)
"""

import hashlib
import json
import logging
import os
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

import cutout_booth
from cutout_booth import A, PTR, SRV, TXT

CERT = b"0\x82\x01\x00 not really DER, but any bytes hash"
NONCE = "00112233445566778899aabbccddeeff"


class ThePairingCode(unittest.TestCase):
    def test_is_six_digits_in_two_groups_from_the_contracts_formula(self):
        digest = hashlib.sha256(b"cutout-pair\0" + hashlib.sha256(CERT).digest() + b"\0"
                                + NONCE.encode() + b"\0" + b"booth-1").digest()
        n = int.from_bytes(digest[:4], "big") % 1_000_000
        code = cutout_booth.pairing_code(CERT, NONCE, "booth-1")
        self.assertEqual(code, f"{n // 1000:03d} {n % 1000:03d}")
        self.assertRegex(code, r"^\d{3} \d{3}$")

    def test_differs_for_another_certificate_nonce_or_name(self):
        code = cutout_booth.pairing_code(CERT, NONCE, "booth-1")
        self.assertNotEqual(cutout_booth.pairing_code(CERT + b"!", NONCE, "booth-1"), code)
        self.assertNotEqual(cutout_booth.pairing_code(CERT, NONCE[::-1], "booth-1"), code)
        self.assertNotEqual(cutout_booth.pairing_code(CERT, NONCE, "booth-2"), code)


class TheFingerprint(unittest.TestCase):
    def test_is_the_sha256_in_uppercase_hex_pairs_as_the_plugins_pin_it(self):
        pin = cutout_booth.fingerprint(CERT)
        self.assertEqual(len(pin), 95)
        self.assertEqual(pin.replace(":", "").lower(), hashlib.sha256(CERT).hexdigest())
        self.assertRegex(pin, r"^([0-9A-F]{2}:){31}[0-9A-F]{2}$")


def labels(name):
    return b"".join(bytes([len(part)]) + part.encode() for part in name.rstrip(".").split(".")) + b"\0"


def record(name: bytes, rtype: int, rdata: bytes, ttl=120) -> bytes:
    return name + struct.pack("!2HIH", rtype, 0x8001, ttl, len(rdata)) + rdata


def response(*records: bytes) -> bytes:
    return struct.pack("!6H", 0, 0x8400, 0, len(records), 0, 0) + b"".join(records)


def txt(*entries: str) -> bytes:
    return b"".join(bytes([len(e)]) + e.encode() for e in entries)


class ThePacketReader(unittest.TestCase):
    def test_reads_ptr_srv_txt_and_a_records_with_compressed_names(self):
        # The service name at offset 12; the instance name points into it,
        # the SRV's target points at the host's name in the A record before it.
        service = labels("_cutout._tcp.local.")
        ptr = record(service, PTR, b"\x06cutout\xc0\x0c")
        instance_at = 12 + len(service) + 10
        host = b"\x04pi-1\xc0" + bytes([12 + len("\x07_cutout\x04_tcp")])  # pi-1 + "local."
        a = record(host, A, socket.inet_aton("192.0.2.7"))
        host_at = 12 + len(ptr)
        srv = record(b"\xc0" + bytes([instance_at]), SRV, struct.pack("!3H", 0, 0, 8080) + b"\xc0" + bytes([host_at]))
        text = record(b"\xc0" + bytes([instance_at]), TXT, txt("path=/api/remove-bg", "https_port=8443", "version=0.1.0"))
        parsed = cutout_booth.parse(response(ptr, a, srv, text))
        self.assertEqual(parsed, [
            (("_cutout", "_tcp", "local"), PTR, 120, ("cutout", "_cutout", "_tcp", "local")),
            (("pi-1", "local"), A, 120, "192.0.2.7"),
            (("cutout", "_cutout", "_tcp", "local"), SRV, 120, (8080, ("pi-1", "local"))),
            (("cutout", "_cutout", "_tcp", "local"), TXT, 120,
             (("path", "/api/remove-bg"), ("https_port", "8443"), ("version", "0.1.0"))),
        ])

    def test_ignores_questions_its_own_included(self):
        self.assertEqual(cutout_booth.parse(cutout_booth.query(("_cutout", "_tcp", "local"), PTR)), [])

    def test_refuses_a_name_pointer_loop_and_a_truncated_record(self):
        loop = struct.pack("!6H", 0, 0x8400, 0, 1, 0, 0) + b"\xc0\x0c"
        with self.assertRaises(ValueError):
            cutout_booth.parse(loop)
        cut = response(record(labels("pi-1.local."), A, socket.inet_aton("192.0.2.7")))[:-2]
        with self.assertRaises((ValueError, IndexError, struct.error)):
            cutout_booth.parse(cut)


class Responder:
    """Answers on the test's mDNS port each question with its one record and
    nothing more, so the browser must ask for SRV, TXT and A itself."""

    def __init__(self, port):
        self.port = port
        self.sock = cutout_booth._mdns_socket(port)
        self.answers = {
            (("_cutout", "_tcp", "local"), PTR): record(labels("_cutout._tcp.local."), PTR, labels("Test Booth._cutout._tcp.local.")),
            (("test booth", "_cutout", "_tcp", "local"), SRV): record(
                labels("Test Booth._cutout._tcp.local."), SRV, struct.pack("!3H", 0, 0, 8080) + labels("pi-1.local.")),
            (("test booth", "_cutout", "_tcp", "local"), TXT): record(
                labels("Test Booth._cutout._tcp.local."), TXT, txt("https_port=8443", "dashboard=/")),
            (("pi-1", "local"), A): record(labels("pi-1.local."), A, socket.inet_aton("127.0.0.1")),
        }
        self.questions = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                packet = self.sock.recv(9000)
            except OSError:
                return
            if struct.unpack_from("!H", packet, 2)[0] & 0x8000:
                continue  # an answer, ours looped back
            name, offset = cutout_booth._name(packet, 12)
            qtype = struct.unpack_from("!H", packet, offset)[0]
            key = (cutout_booth._key(name), qtype)
            self.questions.append(key)
            if key in self.answers:
                self.sock.sendto(response(self.answers[key]), (cutout_booth.MDNS_GROUP, self.port))

    def close(self):
        self.sock.close()


class TheBrowser(unittest.TestCase):
    def test_follows_ptr_to_srv_txt_and_a_when_answers_come_one_at_a_time(self):
        port = 25353 + os.getpid() % 1000
        responder = Responder(port)
        try:
            found = cutout_booth.discover(timeout=1.0, port=port)
        finally:
            responder.close()
        self.assertEqual(found, [cutout_booth.Found("Test Booth", "pi-1.local.", ["127.0.0.1"], 8080, 8443,
                                                    {"https_port": "8443", "dashboard": "/"})])
        self.assertEqual(sorted(qtype for _, qtype in responder.questions), [A, PTR, TXT, SRV])

    def test_finds_nothing_where_nothing_answers(self):
        self.assertEqual(cutout_booth.discover(timeout=0.3, port=25353 + os.getpid() % 1000 + 1), [])


class TheChoice(unittest.TestCase):
    def test_is_the_named_one_or_else_the_only_one(self):
        one, two = (cutout_booth.Found(n, "h.local.", ["192.0.2.1"], 80, 443) for n in ("One", "Two"))
        self.assertIs(cutout_booth.choose([one, two], "two"), two)
        self.assertIsNone(cutout_booth.choose([one, two], ""))
        self.assertIsNone(cutout_booth.choose([one], "Two"))
        self.assertIs(cutout_booth.choose([one], ""), one)


class TheSearch(unittest.TestCase):
    def test_waits_for_a_choice_among_several_appliances_saying_which_it_found(self):
        found = [cutout_booth.Found(n, "h.local.", ["192.0.2.1"], 80, 443) for n in ("One", "Two")]
        wanted = iter(["", "", "two"])  # set in the settings after a while
        with mock.patch.object(cutout_booth, "discover", lambda timeout: found), \
                mock.patch.object(cutout_booth, "LOOK_AGAIN_SECONDS", 0.01), self.assertLogs("booth", "WARNING") as logs:
            chosen = cutout_booth.find(logging.getLogger("booth"), lambda: next(wanted), "appliance_name", threading.Event())
        self.assertIs(chosen, found[1])
        self.assertEqual(len(logs.output), 1, logs.output)
        self.assertIn("cutout appliances found on the LAN: 'One', 'Two'; set appliance_name to the one to pair with", logs.output[0])


def certificate(directory: str, name: str) -> ssl.SSLContext:
    key, cert = f"{directory}/{name}.key", f"{directory}/{name}.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "1", "-subj", f"/CN={name}"], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


class TwoFaced(ThreadingHTTPServer):
    """An appliance's pairing API that shows one certificate on the first
    connection and another after: it would approve at once."""

    def __init__(self, first: ssl.SSLContext, then: ssl.SSLContext):
        self.contexts, self.polls = [first], []

        class Api(BaseHTTPRequestHandler):
            def do_POST(handler):
                handler.rfile.read(int(handler.headers["Content-Length"]))
                handler.answer(202, {"id": "request-1", "expires_in": 120, "button_seconds": 60})

            def do_GET(handler):
                self.polls.append(handler.path)
                handler.answer(200, {"status": "approved", "api_key": "ck_" + "1" * 40, "account": "booth"})

            def answer(handler, status, body):
                data = json.dumps(body).encode()
                handler.send_response(status)
                handler.send_header("Content-Length", str(len(data)))
                handler.end_headers()
                handler.wfile.write(data)

            def log_message(handler, *_):
                pass

        super().__init__(("127.0.0.1", 0), Api)
        self.then = then

    def get_request(self):
        sock, address = self.socket.accept()
        context = self.contexts.pop() if self.contexts else self.then
        return context.wrap_socket(sock, server_side=True), address


class ThePairing(unittest.TestCase):
    def test_stops_without_asking_for_the_key_when_the_certificate_changes(self):
        with tempfile.TemporaryDirectory() as directory:
            api = TwoFaced(certificate(directory, "appliance"), certificate(directory, "someone-else"))
        threading.Thread(target=api.serve_forever, daemon=True).start()
        found = cutout_booth.Found("cutout", "h.local.", ["127.0.0.1"], 80, api.server_port)
        try:
            with self.assertLogs("booth", "INFO") as logs:
                paired = cutout_booth.pair(found, "booth-1", logging.getLogger("booth"), threading.Event(), poll_seconds=0.01)
        finally:
            api.shutdown()
            api.server_close()
        self.assertIsNone(paired)
        self.assertEqual(api.polls, [], "the key was not asked for")
        self.assertIn("pairing with the cutout appliance cutout at https://127.0.0.1:", logs.output[0])
        self.assertIn("not paired with the cutout appliance cutout: it now shows another certificate", logs.output[-1])


class Ready(ThreadingHTTPServer):
    """An appliance's /readyz on 127.0.0.1 that counts the checks, answering
    each after `delay` seconds."""

    def __init__(self, delay=0.0):
        self.checks = 0

        class Api(BaseHTTPRequestHandler):
            def do_GET(handler):
                self.checks += 1
                time.sleep(delay)
                handler.send_response(200 if handler.path == "/readyz" else 404)
                handler.send_header("Content-Length", "0")
                handler.end_headers()

            def log_message(handler, *_):
                pass

        super().__init__(("127.0.0.1", 0), Api)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class TheLink(unittest.TestCase):
    def setUp(self):
        self.now = 1000.0
        self.link = cutout_booth.Link(clock=lambda: self.now)

    def test_checks_again_after_1_2_4_8_then_every_15_s_while_the_appliance_is_gone(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # nothing listens: refused
        self.link.use(f"http://127.0.0.1:{port}", "ck_key", "", 30)
        checked = []
        for second in range(60):
            self.now = 1000.0 + second
            why = self.link.gone()
            self.assertIsNotNone(why)
            if "checking again" not in why:
                checked.append(second)
        self.assertEqual(checked, [0, 1, 3, 7, 15, 30, 45], "checks, by the second")
        self.assertIn("ConnectionRefusedError", self.link.gone())

    def test_takes_a_recent_answer_as_proof_and_checks_once_it_is_ten_seconds_old(self):
        ready = Ready()
        try:
            self.link.use(f"http://127.0.0.1:{ready.server_port}", "ck_key", "", 30)
            self.assertIsNone(self.link.gone())
            self.now += 9
            self.assertIsNone(self.link.gone())
            self.assertEqual(ready.checks, 1)
            self.now += 2
            self.assertIsNone(self.link.gone())
            self.assertEqual(ready.checks, 2)
        finally:
            ready.shutdown()
            ready.server_close()

    def test_forgets_what_it_knew_when_the_settings_change(self):
        ready = Ready()
        try:
            self.link.use("http://127.0.0.1:1", "ck_key", "", 30)
            self.assertIsNotNone(self.link.gone())
            self.link.use(f"http://127.0.0.1:{ready.server_port}", "ck_key", "", 30)
            self.assertIsNone(self.link.gone(), "the new address is checked at once")
        finally:
            ready.shutdown()
            ready.server_close()

    def test_an_answer_under_the_settings_before_a_change_vouches_for_nothing_after(self):
        ready = Ready(delay=0.5)
        try:
            link = cutout_booth.Link()
            link.use(f"http://127.0.0.1:{ready.server_port}", "ck_key", "", 30)
            checking = threading.Thread(target=link.gone)
            checking.start()
            time.sleep(0.2)
            link.use("http://127.0.0.1:1", "ck_key", "", 30)  # the operator changes the address meanwhile
            checking.join()
            self.assertIn("ConnectionRefusedError", link.gone() or "", "the new address is checked, not taken on trust")
        finally:
            ready.shutdown()
            ready.server_close()

    def test_a_hung_appliance_costs_the_wait_for_a_request_about_two_seconds(self):
        from concurrent.futures import Future

        with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
            link = cutout_booth.Link()
            link.use(f"http://127.0.0.1:{silent.getsockname()[1]}", "ck_key", "", 30)
            started = time.monotonic()
            with self.assertRaises(cutout_booth.Gone) as gone:
                link.wait(Future())  # a request that never ends
            self.assertLess(time.monotonic() - started, 2.5)
        self.assertIn("timed out", str(gone.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
