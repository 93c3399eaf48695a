"""pibooth plugin: every capture's background removed on a cutout appliance.

pibooth assembles the final picture in a `PictureFactory`, which its
`pibooth_setup_picture_factory` hook lets a plugin replace (the hook
pibooth-background-changer uses to swap the captures). This plugin sends each
capture to the appliance (`POST /api/remove-bg`, `size=full`) and returns a
factory holding the cut-outs, which pastes them by their alpha: the subject
stands on the picture's own background (`[PICTURE] backgrounds`, a colour or
an image), under its overlay and texts, all as pibooth sets them.

On any failure (appliance down, timeout, refused key, another certificate,
an answer that is not a cut-out of the capture's size) it returns nothing:
pibooth builds the picture from the captures as it does without the plugin,
and one line is logged. Python's standard library only: pibooth installs
neither requests nor urllib3.

Settings: the `[CUTOUT]` section of pibooth.cfg (`pibooth --config`).
With no url and no api_key, the plugin finds the appliance on the LAN and
pairs with it when pibooth starts (cutout_booth), in a thread of its own: the
code to approve on the appliance is logged, and once approved the url, key
and certificate pin are saved into pibooth.cfg. Until then the captures are
kept as they are.
"""

import hashlib
import http.client
import io
import json
import logging
import socket
import ssl
import uuid
from urllib.parse import urlsplit

import cutout_booth
import pibooth
from PIL import Image
from pibooth.pictures.factory import PilPictureFactory

__version__ = "0.1.0"

LOGGER = logging.getLogger("pibooth.cutout")
SECTION = "CUTOUT"


@pibooth.hookimpl
def pibooth_configure(cfg):
    cfg.add_option(SECTION, "url", "", "The cutout appliance's address, e.g. https://photobooth.local:8443 "
                   "(empty, with an empty api_key: found on the LAN and paired at start; the code to approve is logged)")
    cfg.add_option(SECTION, "api_key", "", "An API key from the appliance's dashboard (pairing fills it in)")
    cfg.add_option(SECTION, "fingerprint", "",
                   "SHA-256 fingerprint of the appliance's certificate, pinned (`cutout tls fingerprint`); "
                   "empty: checked against the system's CAs")
    cfg.add_option(SECTION, "timeout", 30, "Seconds to wait for a cut-out before keeping the captures as they are")
    cfg.add_option(SECTION, "booth_name", socket.gethostname(), "This booth's name, shown on the appliance when it asks to pair")
    cfg.add_option(SECTION, "appliance", "",
                   "The appliance to pair with, by its name on the LAN (the names found are logged); empty: the only one found")


_stop_pairing = []  # the pairing thread's stop, while one runs


@pibooth.hookimpl
def pibooth_startup(cfg, app):
    if cfg.get(SECTION, "url") or cfg.get(SECTION, "api_key"):
        return

    def save(paired):
        cfg.set(SECTION, "url", paired.base_url)
        cfg.set(SECTION, "api_key", paired.api_key)
        cfg.set(SECTION, "fingerprint", paired.fingerprint)
        cfg.save()

    _stop_pairing.append(cutout_booth.find_and_pair(
        cfg.get(SECTION, "booth_name"), lambda: cfg.get(SECTION, "appliance"), "[CUTOUT] appliance", LOGGER, save))


@pibooth.hookimpl
def pibooth_cleanup(app):
    while _stop_pairing:
        _stop_pairing.pop().set()


# (capture, its cut-out or FAILED): pibooth asks again for each capture of
# an animation (`[WINDOW] animate`), which must cost no second call.
_asked = []
FAILED = "failed"


@pibooth.hookimpl
def pibooth_setup_picture_factory(cfg, opt_index, factory):
    url = cfg.get(SECTION, "url")
    if not url:
        return None
    captures = factory._images  # the factory's captures; it has no public getter
    cutouts = [_asked_before(capture) for capture in captures]
    if any(cutout is FAILED for cutout in cutouts):
        return None
    if any(cutout is None for cutout in cutouts):
        try:
            cutouts = [cutout_of(capture, cfg) if cutout is None else cutout for capture, cutout in zip(captures, cutouts)]
        except Exception as exc:
            why = exc if isinstance(exc, ApplianceError) else "{}: {}".format(type(exc).__name__, exc)
            LOGGER.warning("cutout appliance at %s failed (%s): the captures are kept as they are", url, why)
            cutouts = [FAILED] * len(captures)
        _asked[:] = _asked[-8:] + list(zip(captures, cutouts))
        if cutouts[0] is FAILED:
            return None  # pibooth's own factory: the captures as they are
    return CutoutPictureFactory(factory.width, factory.height, *cutouts)


def _asked_before(capture):
    """This very capture's cut-out, FAILED, or None if it was not asked for."""
    for asked, cutout in _asked:
        if asked is capture:
            return cutout
    return None


class CutoutPictureFactory(PilPictureFactory):
    """pibooth's PIL factory, pasting each capture by its alpha."""

    def _image_paste(self, image, dest_image, pos_x, pos_y):
        dest_image.paste(image, (pos_x, pos_y), image)


class ApplianceError(Exception):
    pass


def cutout_of(capture, cfg):
    """The appliance's RGBA cut-out of `capture`, at its size, or an exception."""
    photo = io.BytesIO()
    capture.convert("RGB").save(photo, format="JPEG", quality=95)
    body = post_photo(cfg.get(SECTION, "url"), cfg.get(SECTION, "api_key"), cfg.get(SECTION, "fingerprint"),
                      cfg.getfloat(SECTION, "timeout"), photo.getvalue())
    try:
        cutout = Image.open(io.BytesIO(body))
        cutout.load()
    except Exception as exc:
        raise ApplianceError("the answer is not an image") from exc
    if cutout.format != "PNG" or cutout.mode != "RGBA" or cutout.size != capture.size:
        raise ApplianceError("the answer is a {} {} of {}, not an RGBA PNG of the capture's {}".format(
            cutout.mode, cutout.format, cutout.size, capture.size))
    return cutout


def post_photo(url, api_key, fingerprint, timeout, jpeg):
    """The body of the appliance's 200 to `jpeg`, or an exception. With a
    fingerprint, the certificate is checked against it before anything is sent."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        context = ssl.create_default_context()
        if fingerprint:
            # The appliance's certificate is self-signed: the pin is the check.
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        connection = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout, context=context)
    elif parts.scheme == "http":
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    else:
        raise ApplianceError("the address {!r} is not an http(s) URL".format(url))
    boundary = uuid.uuid4().hex
    body = b"".join([
        "--{}\r\nContent-Disposition: form-data; name=\"image_file\"; filename=\"capture.jpg\"\r\n"
        "Content-Type: image/jpeg\r\n\r\n".format(boundary).encode(), jpeg,
        "\r\n--{0}\r\nContent-Disposition: form-data; name=\"size\"\r\n\r\nfull\r\n--{0}--\r\n".format(boundary).encode(),
    ])
    try:
        connection.connect()
        if parts.scheme == "https" and fingerprint:
            got = hashlib.sha256(connection.sock.getpeercert(binary_form=True)).hexdigest()
            if got != fingerprint.replace(":", "").lower():
                raise ApplianceError("its certificate's fingerprint is not the pinned one")
        connection.request("POST", parts.path.rstrip("/") + "/api/remove-bg", body, {
            "X-Api-Key": api_key, "Content-Type": "multipart/form-data; boundary=" + boundary})
        reply = connection.getresponse()
        answer = reply.read()
    finally:
        connection.close()
    if reply.status != 200:
        raise ApplianceError("HTTP {}{}".format(reply.status, error_title(answer)))
    return answer


def error_title(body):
    """`: code, title` from the appliance's JSON error, or nothing."""
    try:
        error = json.loads(body)["errors"][0]
        return ": {}, {}".format(error["code"], error["title"])
    except Exception:
        return ""
