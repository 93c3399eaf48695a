#!/usr/bin/env python3
"""The cutout .deb on Debian 12 with systemd as PID 1, in qemu: what the
chroot of packaging/test-install.sh cannot check.

  tests/vm/test_vm.py DEB PHOTO      (as root; `make test-vm` runs it)

Boots a fresh copy of the image tests/vm/build-image.sh made, installs DEB
and checks, in order:
  install   the unit starts under all its hardening lines, with no EPERM,
            "Operation not permitted", "denied" or SECCOMP line in its
            journal, and becomes active through READY=1 (Type=notify): its
            StatusText is the "serving model ... (ENGINE)" line sent with it;
  setup     the setup code the journal names is on the console (/dev/tty1,
            read back through /dev/vcs1);
  backup    a scheduled backup ([backup] every_hours, the passphrase file
            in CRLF with a comment line) fails while its stick is out, and
            is written once the stick is mounted under /media with the
            service running: through ProtectSystem=strict, ReadWritePaths
            and PrivateMounts;
  restore   the card made new (data directory emptied, the packaged
            configuration): its setup page, opened with the code in its
            journal over HTTPS, restores that backup; the service starts
            again as the same process (exec) and stays active through the
            watchdog, with the old accounts, key and certificate, and the
            backup's configuration kept beside the database (/etc is
            read-only to the service);
  kill      `systemctl kill -s KILL cutout`: systemd starts it again;
  stop      `systemctl stop` with a cut-out in flight ends within the unit's
            TimeoutStopSec, and not by systemd's SIGKILL;
  reboot    the unit is active again after a reboot, by itself;
  powercut  POWER_CUTS times: several POST /api/remove-bg at once, qemu
            SIGKILLed once one has been answered 200 (the others still in
            flight); after the next boot the database passes SQLite's
            integrity check, the unit is active by itself, the month's count
            holds every 200 the client saw, and the engine is the one before;
  purge     `apt-get purge cutout` leaves no /etc/cutout, /var/lib/cutout or
            cutout user.

Everything runs under TCG (software emulation): where /dev/kvm is PVM (as on
the machines this was written on) a stock kernel hangs under KVM. Its speed
follows the host's CPU: on two idle cores of a Xeon with AVX-512 VNNI one
u2netp cut-out took 14.5 minutes (23 beside a cargo build) and the suite
about two hours; on an AMD EPYC (AVX2) the suite took 28.7 minutes. So the
unit gets a drop-in with the smallest model and as few requests are sent as
the checks need.

Environment: VM_CACHE (default target/vm: the image, and this run's disk,
serial logs and log in $VM_CACHE/run), POWER_CUTS (3), VM_CPU (qemu's -cpu
under TCG, default max), VM_SMP (2), VM_MEM_MIB (3072), VM_ACCEL (tcg; kvm
where /dev/kvm runs stock kernels).
"""
import hashlib
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

CACHE = os.path.abspath(os.environ.get("VM_CACHE", "target/vm"))
IMAGE = os.path.join(CACHE, "image")
RUN = os.path.join(CACHE, "run")
XFER = os.path.join(RUN, "xfer")  # /mnt/xfer in the guest (9p)
LOG = os.path.join(RUN, "test-vm.log")
POWER_CUTS = int(os.environ.get("POWER_CUTS", "3"))
CONFIG = "/etc/cutout/cutout.toml"
CLI = "runuser -u cutout -- cutout --config %s" % CONFIG
DB = "/var/lib/cutout/cutout.db"
# What the unit's journal must not say: the seccomp filter (SystemCallFilter,
# SystemCallErrorNumber=EPERM) and the sandbox answer a forbidden call with
# EPERM, which the program would log as "Operation not permitted".
HARDENING_ERRORS = r"Operation not permitted|EPERM|denied|SECCOMP"
# One emulated u2netp cut-out took 870 s on two idle cores, 1369 s on a busy
# machine; the others of a power cut's series wait behind it.
REQUEST_TIMEOUT = 2400
PROMPT = "root@cutout-vm:~# "
# The journal's line naming the setup code shown on the console.
SETUP_CODE = r"with the code ([2-9A-Z]{4}-[2-9A-Z]{4}) shown on the board's console"
# A start (the unit's drop-in allows 1200 s): the model's load and its
# first run, about 12 minutes emulated on the VNNI Xeon, 2 to 4 on the EPYC.
START_TIMEOUT = 1500
PASSPHRASE = "stick in the drawer, 2026"
STICK_DIR = "/media/stick/cutout"
# A backup every 72 s: the first, due at the start, fails without the stick;
# the next is written to it.
BACKUP_EVERY_HOURS = 0.02

_log_file = None


def log(*parts):
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    _log_file.write(line + "\n")
    _log_file.flush()


def free_ports(n):
    """n distinct free ports (each held until all are found)."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class Guest:
    """One qemu process: its serial console is a root shell the test types
    into (autologin on ttyS0); each command's output comes back through the
    9p share, so kernel messages on the console cannot mix into it."""

    boots = 0

    def __init__(self, http_port, https_port):
        self.http_port, self.https_port = http_port, https_port
        self.proc = None
        self.commands = 0

    def start(self):
        Guest.boots += 1
        accel = os.environ.get("VM_ACCEL", "tcg")
        argv = [
            "qemu-system-x86_64",
            *(["-accel", "kvm", "-cpu", "host"] if accel == "kvm"
              else ["-accel", "tcg,thread=multi", "-cpu", os.environ.get("VM_CPU", "max")]),
            "-smp", os.environ.get("VM_SMP", "2"), "-m", os.environ.get("VM_MEM_MIB", "3072"),
            "-kernel", os.path.join(IMAGE, "vmlinuz"), "-initrd", os.path.join(IMAGE, "initrd.img"),
            "-append", "root=/dev/vda rw console=ttyS0",
            "-drive", "file=%s,if=virtio,format=raw" % os.path.join(RUN, "disk.raw"),
            # restrict=on: the guest reaches nothing outside (no host, no
            # internet); the forwarded ports (API, dashboard) still work.
            "-netdev", "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:%d-:8080,hostfwd=tcp:127.0.0.1:%d-:8443"
            % (self.http_port, self.https_port),
            "-device", "virtio-net-pci,netdev=n0",
            "-virtfs", "local,path=%s,mount_tag=xfer,security_model=none,id=xfer" % XFER,
            # No window, but the default VGA card stays: the guest has the
            # /dev/tty1 a board's screen would be, where the setup code goes.
            "-display", "none", "-monitor", "none", "-serial", "stdio",
        ]
        self.serial = open(os.path.join(RUN, "serial-%02d.log" % Guest.boots), "w", errors="replace")
        self.buf, self.pos, self.eof = "", 0, False
        self.cond = threading.Condition()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        threading.Thread(target=self._read, daemon=True).start()
        self.t0 = time.monotonic()
        log("qemu pid %d started (boot %d, serial-%02d.log)" % (self.proc.pid, Guest.boots, Guest.boots))

    def _read(self):
        while True:
            data = os.read(self.proc.stdout.fileno(), 65536)
            text = data.decode("utf-8", "replace")
            self.serial.write(text)
            self.serial.flush()
            with self.cond:
                self.buf += text
                self.eof = not data
                self.cond.notify_all()
            if not data:
                return

    def expect(self, pattern, timeout):
        """Waits for pattern (a regex) in the console output not yet read."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                m = re.compile(pattern).search(self.buf, self.pos)
                if m:
                    self.pos = m.end()
                    return m
                if self.eof:
                    raise RuntimeError("qemu exited while waiting for %r" % pattern)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no %r on the console in %d s" % (pattern, timeout))
                self.cond.wait(left)

    def send(self, line):
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def login(self, timeout=600):
        """Waits for the autologin shell and quiets it for the test."""
        self.expect(re.escape(PROMPT), timeout)
        took = time.monotonic() - self.t0
        self.send("stty -echo; export PS1= SYSTEMD_PAGER= SYSTEMD_COLORS=0 LC_ALL=C.UTF-8; "
                  "dmesg -n 1; mountpoint -q /mnt/xfer || mount /mnt/xfer; echo @@LOGGED''IN@@")
        self.expect("@@LOGGEDIN@@", 60)
        log("root shell on the serial console %.0f s after qemu started" % took)
        return took

    def sh(self, script, timeout=300, check=True, quiet=False):
        """Runs script (bash) in the guest as root: (exit status, output)."""
        self.commands += 1
        name = "cmd-%d-%s" % (self.commands, uuid.uuid4().hex[:6])
        with open(os.path.join(XFER, name + ".sh"), "w") as f:
            f.write(script + "\n")
        self.send('bash /mnt/xfer/%s.sh > /mnt/xfer/%s.out 2>&1 < /dev/null; echo "@@%s:$?@@"'
                  % (name, name, name))
        rc = int(self.expect(r"@@%s:(\d+)@@" % name, timeout).group(1))
        with open(os.path.join(XFER, name + ".out"), errors="replace") as f:
            out = f.read()
        for suffix in (".sh", ".out"):
            os.unlink(os.path.join(XFER, name + suffix))
        if not quiet:
            log("  guest$ %s   [exit %d]" % (script.strip().replace("\n", "\n  guest$ "), rc))
            for line in out.rstrip("\n").splitlines():
                log("    " + line)
        if check and rc != 0:
            raise RuntimeError("guest command failed (exit %d): %s" % (rc, script))
        return rc, out

    def value(self, script, timeout=120):
        """The output of script, stripped, whatever its exit status."""
        return self.sh(script, timeout, check=False, quiet=True)[1].strip()

    def power_cut(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        log("qemu pid %d SIGKILLed: power cut" % self.proc.pid)

    def reboot(self):
        self.send("systemctl reboot")
        self.expect("reboot: Restarting system", 300)
        self.t0 = time.monotonic()
        return self.login()

    def poweroff(self):
        self.send("systemctl poweroff")
        self.proc.wait(timeout=300)


class Checks:
    """Each check's verdict, logged as it is made, all of them at the end."""

    def __init__(self):
        self.results = []

    def __call__(self, name, ok, detail=""):
        self.results.append((name, bool(ok), detail))
        log("%s  %s%s" % ("PASS" if ok else "FAIL", name, ("  (%s)" % detail) if detail else ""))
        return ok


def post_photo(port, key, photo, results, index):
    """POST /api/remove-bg; results[index] = (status, seconds, PNG or not)."""
    boundary = uuid.uuid4().hex
    with open(photo, "rb") as f:
        image = f.read()
    body = b"".join([
        b"--%s\r\n" % boundary.encode(),
        b'Content-Disposition: form-data; name="image_file"; filename="%s"\r\n'
        % os.path.basename(photo).encode(),
        b"Content-Type: image/jpeg\r\n\r\n", image, b"\r\n--%s--\r\n" % boundary.encode(),
    ])
    request = urllib.request.Request(
        "http://127.0.0.1:%d/api/remove-bg" % port, data=body, method="POST",
        headers={"X-Api-Key": key, "Content-Type": "multipart/form-data; boundary=" + boundary})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
            status, data = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, data = e.code, e.read()
    except Exception as e:  # reset by a power cut, or no answer in time
        status, data = "no answer (%s)" % type(getattr(e, "reason", e)).__name__, b""
    results[index] = (status, time.monotonic() - t0, data[:8] == b"\x89PNG\r\n\x1a\n")
    log("  request %d: %s after %.0f s%s" % (index + 1, status, results[index][1],
                                                ", a PNG" if results[index][2] else ""))


def key_accepted(port, key):
    """The status of remove.bg's account query (GET /v1.0/account) with
    key: 200 for a key of an account here, 403 otherwise; it costs nothing."""
    request = urllib.request.Request("http://127.0.0.1:%d/v1.0/account" % port, headers={"X-Api-Key": key})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def fingerprint(https_port):
    """The SHA-256 of the certificate the dashboard's port shows, as a
    booth pins it."""
    pem = ssl.get_server_certificate(("127.0.0.1", https_port), timeout=60)
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


class Browser:
    """The dashboard over HTTPS as a browser sees it: cookies kept,
    redirects followed, the appliance's self-signed certificate taken."""

    def __init__(self, https_port):
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        self.opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context),
                                                  urllib.request.HTTPCookieProcessor())
        self.base = "https://127.0.0.1:%d" % https_port

    def open(self, path, fields=None, files=None):
        """GET path, or POST its fields (and files: multipart): (status, page)."""
        data, headers = None, {}
        if files:
            boundary = uuid.uuid4().hex
            parts = [b'--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
                     % (boundary.encode(), k.encode(), v.encode()) for k, v in fields.items()]
            parts += [b'--%s\r\nContent-Disposition: form-data; name="%s"; filename="%s"\r\n'
                      b"Content-Type: application/octet-stream\r\n\r\n%s\r\n"
                      % (boundary.encode(), k.encode(), k.encode(), v) for k, v in files.items()]
            data = b"".join(parts) + b"--%s--\r\n" % boundary.encode()
            headers["Content-Type"] = "multipart/form-data; boundary=" + boundary
        elif fields is not None:
            data = urllib.parse.urlencode(fields).encode()
        request = urllib.request.Request(self.base + path, data=data, headers=headers)
        try:
            with self.opener.open(request, timeout=600) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    @staticmethod
    def field(page, name):
        m = re.search(r'name="%s" value="([^"]*)"' % name, page)
        return m and m.group(1)


def readyz(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def main():
    global _log_file
    deb, photo = (os.path.abspath(p) for p in sys.argv[1:3])
    shutil.rmtree(RUN, ignore_errors=True)
    os.makedirs(XFER)
    _log_file = open(LOG, "w")
    check = Checks()
    stages = []
    started = time.monotonic()

    class stage:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            self.t0 = time.monotonic()
            log("\n=== %s  [%s]" % (self.name, time.strftime("%H:%M:%S")))

        def __exit__(self, kind, error, tb):
            minutes = (time.monotonic() - self.t0) / 60
            stages.append((self.name, minutes))
            log("=== %s: %.1f min%s" % (self.name, minutes, "" if kind is None else ", stopped by: %s" % error))

    # The image's disk is never written: each run boots a copy of it.
    subprocess.run(["cp", "--sparse=always", os.path.join(IMAGE, "disk.raw"), os.path.join(RUN, "disk.raw")],
                   check=True)
    shutil.copy(deb, os.path.join(XFER, "cutout.deb"))
    port, https_port = free_ports(2)
    guest = Guest(port, https_port)
    key = None

    def unit(*props):
        out = guest.value("systemctl show cutout " + " ".join("-p " + p for p in props))
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def wait_active(restarts=0, timeout=600, old_pid=None):
        """Waits, starting nothing, until the unit is active (READY=1 came)
        with a main process other than old_pid, failed, or restarted more
        than `restarts` times since boot (a restart loop: a start that fails
        the same way again does not end it)."""
        deadline = time.monotonic() + timeout
        while True:
            props = unit("ActiveState", "NRestarts", "MainPID")
            state = props.get("ActiveState")
            if ((state == "active" and props.get("MainPID") != old_pid) or state == "failed"
                    or int(props.get("NRestarts", 0)) > restarts or time.monotonic() > deadline):
                return state
            time.sleep(5)

    def journal_clean(what, boot="-b"):
        rc, out = guest.sh("journalctl -u cutout %s --no-pager -o cat | grep -E -i '%s'"
                           % (boot, HARDENING_ERRORS), check=False)
        return check(what, rc == 1, "no such line" if rc == 1 else out.strip()[:300])

    def journal_says(text, timeout):
        """The last line of this boot's unit journal holding text, once one does."""
        deadline = time.monotonic() + timeout
        while True:
            rc, out = guest.sh("journalctl -u cutout -b --no-pager -o cat | grep -F '%s'" % text,
                               check=False, quiet=True)
            if rc == 0 or time.monotonic() > deadline:
                return out.strip().splitlines()[-1] if rc == 0 else None
            time.sleep(5)

    def engine():
        m = re.search(r"serving model (\S+) \((\w+)\)", unit("StatusText").get("StatusText", ""))
        return m and m.group(2)

    def usage():
        out = guest.value("%s usage booth" % CLI)
        return int(re.search(r": (\d+) of", out).group(1))

    try:
        with stage("boot"):
            guest.start()
            guest.login()
            guest.sh("ps -o pid,comm -p 1; systemctl is-system-running --wait; systemd-analyze time", check=False)
            check("boot: systemd is PID 1", guest.value("ps -o comm= -p 1") == "systemd")

        with stage("install"):
            # The smallest model, so an emulated cut-out takes minutes, not
            # hours; no self-measurement when idle (12 MP photos on each
            # model, hours under emulation, competing with the requests);
            # and room for a start: its load includes ONNX Runtime's first
            # run at the model's largest input (its arena), up to 12 minutes
            # under TCG against the unit's 180 s. Put in place before the
            # package, so its first start has them.
            guest.sh("mkdir -p /etc/systemd/system/cutout.service.d && printf '%s' "
                     "> /etc/systemd/system/cutout.service.d/test-vm.conf"
                     % r"[Service]\nEnvironment=CUTOUT_MODEL=u2netp\nEnvironment=CUTOUT_PIPELINE_BENCH_WHEN_IDLE=false\n"
                     r"TimeoutStartSec=1200\n")
            rc, _ = guest.sh("cp /mnt/xfer/cutout.deb /root/ && "
                             "DEBIAN_FRONTEND=noninteractive apt-get install -y /root/cutout.deb", 1800, check=False)
            check("install: apt-get install of the .deb", rc == 0)
            state = wait_active(0, START_TIMEOUT)
            props = unit("ActiveState", "SubState", "NRestarts", "StatusText", "MainPID", "Result")
            guest.sh("systemctl status --no-pager -l cutout | head -n 12; "
                     "journalctl -u cutout -b --no-pager -o short-precise | head -n 40", check=False)
            if not check("install: the unit is active", state == "active", props):
                raise RuntimeError("the unit did not start: nothing else can be checked")
            check("install: NRestarts=0", props.get("NRestarts") == "0", props.get("NRestarts"))
            check("install: READY=1 sent with its status (Type=notify)",
                  props.get("StatusText", "").startswith("serving model u2netp"), props.get("StatusText"))
            journal_clean("install: no EPERM/denied/SECCOMP in the unit's journal")
            first_engine = engine()
            log("engine: %s" % first_engine)

        with stage("setup code"):
            journal = guest.value("journalctl -u cutout -b --no-pager -o cat")
            m = re.search(SETUP_CODE, journal)
            check("setup: the journal names a setup code", m, m and m.group(1))
            # /dev/vcs1 is the text on tty1's screen, as a person would see it.
            screen = guest.value("cat /dev/vcs1 | fold -w 80")
            log("  tty1's screen:\n    " + "\n    ".join(l for l in screen.splitlines() if l.strip()))
            check("setup: the code is on the console (tty1)", m and m.group(1) in screen)

        with stage("scheduled backup"):
            guest.sh("%s account create booth --plan pro" % CLI)
            key = guest.value("%s key create booth" % CLI).splitlines()[-1].strip()
            first_fingerprint = fingerprint(https_port)
            # As a passphrase file written on Windows: CRLF, and a note
            # after the passphrase.
            with open(os.path.join(XFER, "backup-passphrase"), "wb") as f:
                f.write(PASSPHRASE.encode() + b"\r\n# the appliance's nightly backups\r\n")
            guest.sh("install -m 0600 -o cutout -g cutout /mnt/xfer/backup-passphrase /etc/cutout/backup-passphrase && "
                     "cp %s /root/cutout.toml.packaged && "
                     "sed -i -e 's|^#dir = .*|dir = \"%s\"|' -e 's|^#passphrase_file = |passphrase_file = |' "
                     "-e 's|^#every_hours = .*|every_hours = %s|' %s && grep -A 13 '^.backup.$' %s"
                     % (CONFIG, STICK_DIR, BACKUP_EVERY_HOURS, CONFIG, CONFIG))
            before = unit("MainPID", "NRestarts")
            guest.sh("systemctl restart cutout", START_TIMEOUT)
            wait_active(int(before["NRestarts"]), START_TIMEOUT, before["MainPID"])
            # Due at the start, with no stick in.
            failed = journal_says("the scheduled backup into %s failed" % STICK_DIR, 300)
            check("backup: refused while the stick is out", failed, failed)
            # The stick plugged in while the service runs: its mount reaches
            # the service's own mount namespace (PrivateMounts), and is
            # writable there though the rest of the system is not.
            guest.sh("truncate -s 64M /root/stick.img && mkfs.ext4 -q -F /root/stick.img && "
                     "mkdir -p /media/stick && mount -o loop /root/stick.img /media/stick && "
                     "install -d -o cutout -g cutout -m 0700 %s" % STICK_DIR)
            written = journal_says("backup written to %s/cutout-" % STICK_DIR, 600)
            check("backup: written to the stick mounted while the service runs", written, written)
            listing = guest.value("stat -c '%%U %%a %%s %%n' %s/cutout-*.backup" % STICK_DIR)
            check("backup: the file is the service's, 0600", listing.startswith("cutout 600 "), listing)
            guest.sh("cp \"$(ls %s/cutout-*.backup | tail -n 1)\" /mnt/xfer/stick.backup" % STICK_DIR)
            journal_clean("backup: no EPERM/denied/SECCOMP in the unit's journal")

        with stage("setup page restore"):
            # The card dies; a new one has the package's configuration and
            # an empty data directory, and no stick until its backup is
            # restored.
            guest.sh("systemctl stop cutout && umount /media/stick && cp /root/cutout.toml.packaged %s && "
                     "find /var/lib/cutout -mindepth 1 -delete && systemctl start cutout" % CONFIG, START_TIMEOUT)
            fresh = unit("MainPID", "NRestarts")
            check("restore: the new card has a certificate of its own", fingerprint(https_port) != first_fingerprint)
            check("restore: the new card knows no key", key_accepted(port, key) == 403)
            codes = re.findall(SETUP_CODE,
                               guest.value("journalctl -u cutout -b --no-pager -o cat"))
            browser = Browser(https_port)
            _, page = browser.open("/setup")
            csrf = Browser.field(page, "csrf")
            status, page = browser.open("/setup/code", {"csrf": csrf, "code": codes[-1]})
            token = Browser.field(page, "token")
            check("restore: the console's code opens the setup page over HTTPS",
                  status == 200 and token and "Restore and restart" in page, status)
            with open(os.path.join(XFER, "stick.backup"), "rb") as f:
                backup = f.read()
            status, page = browser.open("/setup/restore", {"csrf": csrf, "token": token, "passphrase": PASSPHRASE},
                                        {"backup_file": backup})
            check("restore: the setup page takes the stick's backup, passphrase typed",
                  status == 200 and "Restored" in page, "%s: %s" % (status, re.sub(r"<[^>]+>", " ", page)[-300:]))
            placed = journal_says("put a restored backup in place", 600)
            check("restore: put in place as the program starts again", placed, placed)
            deadline = time.monotonic() + START_TIMEOUT
            while readyz(port) != 200 and time.monotonic() < deadline:
                time.sleep(5)
            # Past the watchdog's limit twice over: the process that exec'd
            # itself pings it as the one systemd started did.
            time.sleep(2 * eval_seconds(unit("WatchdogUSec")["WatchdogUSec"]) + 5)
            props = unit("ActiveState", "MainPID", "NRestarts", "StatusText")
            check("restore: the same process, still active, not restarted (exec under Type=notify)",
                  props["ActiveState"] == "active" and props["MainPID"] == fresh["MainPID"]
                  and props["NRestarts"] == fresh["NRestarts"], "%s -> %s" % (fresh, props))
            rc, out = guest.sh("journalctl -u cutout -b --no-pager -o cat | grep -i watchdog", check=False)
            check("restore: no watchdog timeout", rc == 1, out.strip()[:300])
            check("restore: the old key works again", key_accepted(port, key) == 200)
            check("restore: the old certificate is back (booths' pins hold)", fingerprint(https_port) == first_fingerprint)
            kept = guest.sh("test -f /var/lib/cutout/cutout.toml.from-backup && cmp /root/cutout.toml.packaged %s"
                            % CONFIG, check=False)[0]
            check("restore: the backup's configuration kept beside the database, /etc untouched", kept == 0)
            journal_clean("restore: no EPERM/denied/SECCOMP in the unit's journal")

        with stage("kill"):
            before = unit("MainPID", "NRestarts")
            guest.sh("systemctl kill -s KILL cutout")
            state = wait_active(int(before["NRestarts"]) + 1, START_TIMEOUT, before["MainPID"])
            after = unit("MainPID", "NRestarts", "StatusText")
            check("kill: systemd started it again", state == "active" and after["MainPID"] != before["MainPID"]
                  and int(after["NRestarts"]) == int(before["NRestarts"]) + 1, "%s -> %s" % (before, after))
            journal_clean("kill: no EPERM/denied/SECCOMP in the unit's journal")

        with stage("stop"):
            # A cut-out in flight, the case a stop waits for (up to 60 s).
            results = [None]
            t = threading.Thread(target=post_photo, args=(port, key, photo, results, 0))
            t.start()
            time.sleep(20)
            limit = eval_seconds(unit("TimeoutStopUSec")["TimeoutStopUSec"])
            t0 = time.monotonic()
            guest.sh("systemctl stop cutout", 600, check=False)
            took = time.monotonic() - t0
            props = unit("ActiveState", "Result")
            guest.sh("journalctl -u cutout -b --no-pager -o short-precise | tail -n 8", check=False)
            check("stop: ended within TimeoutStopSec, by itself", took < limit and props["Result"] == "success"
                  and props["ActiveState"] in ("inactive", "failed"),
                  "%.0f s of %d s, Result=%s" % (took, limit, props["Result"]))
            t.join(180)

        with stage("reboot"):
            # Stopped before: only the unit's enablement can bring it back.
            guest.reboot()
            state = wait_active(0, START_TIMEOUT)
            props = unit("NRestarts", "StatusText")
            check("reboot: active after boot, by itself", state == "active" and props["NRestarts"] == "0",
                  "%s, %s" % (state, props))
            check("reboot: the same engine", engine() == first_engine, engine())
            journal_clean("reboot: no EPERM/denied/SECCOMP in the unit's journal")

        for cut in range(1, POWER_CUTS + 1):
            with stage("power cut %d" % cut):
                counted_before = usage()
                n = 3
                results = [None] * n
                threads = [threading.Thread(target=post_photo, args=(port, key, photo, results, i))
                           for i in range(n)]
                for i, t in enumerate(threads):
                    t.start()
                    time.sleep(1)
                deadline = time.monotonic() + REQUEST_TIMEOUT
                while not any(r and r[0] == 200 for r in results) and time.monotonic() < deadline:
                    if all(r for r in results):
                        break
                    time.sleep(0.5)
                # Cut at once after a 200, or a little later, while the next
                # cut-out is under way.
                time.sleep([0, 5, 30][(cut - 1) % 3])
                answered = sum(1 for r in results if r and r[0] == 200)
                in_flight = sum(1 for r in results if r is None)
                guest.power_cut()
                for t in threads:
                    t.join()
                check("power cut %d: cut after a 200 with requests in flight" % cut,
                      answered >= 1 and in_flight >= 1, "%d answered 200, %d in flight" % (answered, in_flight))
                guest.start()
                guest.login()
                state = wait_active(0, START_TIMEOUT)
                props = unit("NRestarts", "StatusText")
                check("power cut %d: active after boot, by itself" % cut, state == "active"
                      and props["NRestarts"] == "0", "%s, %s" % (state, props))
                # As the service user and read-only: a root-owned -wal or
                # -shm file would lock the service out of its database.
                verdict = guest.value(
                    "runuser -u cutout -- python3 -c \"import sqlite3; print(sqlite3.connect("
                    "'file:%s?mode=ro', uri=True).execute('PRAGMA integrity_check').fetchone()[0])\"" % DB)
                check("power cut %d: PRAGMA integrity_check" % cut, verdict == "ok", verdict)
                counted = usage()
                check("power cut %d: every 200 counted" % cut, counted - counted_before >= answered,
                      "count %d -> %d, the client saw %d 200s" % (counted_before, counted, answered))
                check("power cut %d: the same engine" % cut, engine() == first_engine,
                      "%s (before: %s)" % (engine(), first_engine))
                journal_clean("power cut %d: no EPERM/denied/SECCOMP in the unit's journal" % cut)
                guest.sh("journalctl -u cutout -b -1 --no-pager -o short-precise | grep -v healthz | tail -n 6; "
                         "echo ...; journalctl -u cutout -b --no-pager -o short-precise | tail -n 6", check=False)

        with stage("purge"):
            guest.sh("rm -r /etc/systemd/system/cutout.service.d && systemctl daemon-reload")
            rc, _ = guest.sh("DEBIAN_FRONTEND=noninteractive apt-get purge -y cutout", 900, check=False)
            check("purge: apt-get purge", rc == 0)
            for path in ("/etc/cutout", "/var/lib/cutout"):
                check("purge: %s removed" % path, guest.sh("test ! -e " + path, check=False)[0] == 0)
            check("purge: the cutout user removed", guest.sh("! getent passwd cutout", check=False)[0] == 0)
            check("purge: the cutout group removed", guest.sh("! getent group cutout", check=False)[0] == 0)
            guest.poweroff()
    except Exception as e:  # a stage that cannot go on: the rest are not run
        check("the run went to its end", False, "%s: %s" % (type(e).__name__, e))
        if guest.proc and guest.proc.poll() is None:
            guest.power_cut()

    log("\nminutes per stage:")
    for name, minutes in stages:
        log("  %-12s %5.1f" % (name, minutes))
    log("  %-12s %5.1f" % ("all", (time.monotonic() - started) / 60))
    failed = [r for r in check.results if not r[1]]
    log("\n%d checks, %d failed%s" % (len(check.results), len(failed),
                                       "".join("\n  FAIL %s  (%s)" % (n, d) for n, _, d in failed)))
    log("log: %s" % LOG)
    sys.exit(1 if failed else 0)


def eval_seconds(span):
    """systemd's time span as `systemctl show` prints it ("1min 15s") in seconds."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1, "min": 60, "h": 3600}
    return int(sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(us|ms|min|s|h)", span)))


if __name__ == "__main__":
    main()
