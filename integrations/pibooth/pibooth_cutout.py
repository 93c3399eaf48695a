"""pibooth plugin: every capture's background removed on a cutout appliance,
while the guest poses for the next one.

Each capture goes to the appliance as soon as it is taken (`state_capture_exit`:
the camera's raw capture, post-processed as pibooth will, rotation, crop and
effect included), in a thread of its own, one at a time, so that the picture
is assembled from results already back: the guest waits for the last
capture's round trip, not one per capture. Cameras whose raw capture cannot
be read twice (gPhoto2's files, deleted from the camera once read) send
their captures when pibooth assembles the picture instead.

Only what the picture needs crosses the LAN: the capture at most 2048 pixels
on its longest side (`[CUTOUT] longest_side_sent`: pibooth's picture shows
each capture smaller than that, on a 4x6" print at 600 dpi), and back only
its matte (`size=full`, `channels=alpha`: a grey PNG), enlarged to the
capture's size on the booth. The plugin keeps nothing but this guest's
mattes, compressed.
pibooth assembles the picture in a `PictureFactory`, which its
`pibooth_setup_picture_factory` hook lets a plugin replace (the hook
pibooth-background-changer uses to swap the captures): this one pastes each
capture by its matte, so the subject stands on the picture's own background
(`[PICTURE] backgrounds`, a colour or an image), under its overlay and texts,
all as pibooth sets them.

On any failure (appliance down, hung, refused key, another certificate, an
answer that is not a matte of the capture's size) the picture is the one
pibooth builds without the plugin, and one line is logged. An appliance that
is gone costs a guest a second at most, once: the shared `cutout_booth.Link`
remembers it, and checks again in the background until it is back. Python's
standard library only: pibooth installs neither requests nor urllib3.

The appliance's backdrops (its dashboard's Backdrops page) are the booth's
themes (`[CUTOUT] backdrops`): the guest picks one with the arrow keys on the
wait screen (its name in a band at the bottom), or each guest gets the next,
or one at random. With a backdrop, the appliance composites each capture on
it, under its overlay, and sends back the picture (a JPEG) instead of the
matte; "No backdrop" keeps pibooth's own background.

What the booth should know shows on its wait screen, in a band at the top,
and in its log: the pairing code to approve, an appliance not found or not
answering, this month's cut-outs nearly or all spent (cutout_booth.Status).

Settings: the `[CUTOUT]` section of pibooth.cfg (`pibooth --config`).
With no url and no api_key, the plugin finds the appliance on the LAN and
pairs with it when pibooth starts (cutout_booth), in a thread of its own: the
code to approve on the appliance is logged, and once approved the url, key
and certificate pin are saved into pibooth.cfg. Until then the captures are
kept as they are.
"""

import io
import logging
import random
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import cutout_booth
import pibooth
from PIL import Image
from pibooth.pictures import sizing
from pibooth.pictures.factory import PilPictureFactory

__version__ = "0.2.0"

LOGGER = logging.getLogger("pibooth.cutout")
SECTION = "CUTOUT"
JPEG_QUALITY = 90  # the matte follows edges a few pixels wide, not the JPEG's 8x8 blocks
FIELDS = {"size": "full", "channels": "alpha"}
CHOICES = ("manual", "cycle", "random", "none")

@pibooth.hookimpl
def pibooth_configure(cfg):
    cfg.add_option(SECTION, "url", "", "The cutout appliance's address, e.g. https://photobooth.local:8443 "
                   "(empty, with an empty api_key: found on the LAN and paired at start; the code to approve is logged)")
    cfg.add_option(SECTION, "api_key", "", "An API key from the appliance's dashboard (pairing fills it in)")
    cfg.add_option(SECTION, "fingerprint", "",
                   "SHA-256 fingerprint of the appliance's certificate, pinned (`cutout tls fingerprint`); "
                   "empty: checked against the system's CAs")
    cfg.add_option(SECTION, "timeout", 30, "Seconds to wait for a cut-out before keeping the captures as they are")
    cfg.add_option(SECTION, "longest_side_sent", 2048,
                   "Longest side, in pixels, of a capture as sent to the appliance (its matte is enlarged to the "
                   "capture's size); 0: the capture as taken")
    cfg.add_option(SECTION, "backdrops", "manual",
                   "The appliance's backdrops as themes: manual (the guest picks one with the arrow keys on the "
                   "wait screen), cycle (the next for each guest), random, or none (the picture's own background)",
                   "Backdrops", list(CHOICES))
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


LINK = cutout_booth.Link()
# One capture at a time: the appliance serves a booth's photos one after
# another anyway, and the booth's CPU stays on the live preview.
SENDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cutout")
FAILED = "failed"
_settings = {"longest_side": 2048, "backdrops": "manual"}


def _use_settings(cfg):
    url = cfg.get(SECTION, "url")
    LINK.use(url, cfg.get(SECTION, "api_key"), cfg.get(SECTION, "fingerprint"), cfg.getfloat(SECTION, "timeout"))
    _settings["longest_side"] = cfg.getint(SECTION, "longest_side_sent")
    _settings["backdrops"] = cfg.get(SECTION, "backdrops").strip().lower()
    return url


class Guest:
    """This guest's sequence: the backdrop chosen for it (None: the
    picture's own background), a future of each capture's result sent so
    far (a matte's PNG, or the composite's JPEG on the backdrop)."""

    def __init__(self, backdrop=None):
        self.backdrop = backdrop
        self.sent = []

    def send(self, function, *args):
        self.sent.append(SENDER.submit(function, *args, self.backdrop))

    def cancel(self):
        for future in self.sent:
            future.cancel()


class Themes:
    """The appliance's backdrops as the wait screen offers them: "no
    backdrop" first, fetched again at most every 30 s while it shows."""

    REFRESH_SECONDS = 30.0

    def __init__(self):
        self.backdrops = []  # (id, name)
        self.index = 0
        self.fetched = float("-inf")
        self._fetching = None

    def refresh(self):
        if time.monotonic() - self.fetched > self.REFRESH_SECONDS and not (self._fetching and not self._fetching.done()):
            self.fetched = time.monotonic()
            self._fetching = SENDER.submit(self._fetch)

    def _fetch(self):
        try:
            listed = [(b["id"], b["name"]) for b in LINK.backdrops()]
        except Exception as exc:
            LOGGER.info("the cutout appliance's backdrops are not known now (%s)", exc)
            return
        if listed != self.backdrops:
            chosen = self.chosen()
            self.backdrops = listed
            self.index = next((n + 1 for n, (id, _) in enumerate(listed) if id == chosen), 0)
            LOGGER.info("the cutout appliance's backdrops: %s", ", ".join(name for _, name in listed) or "none")

    def step(self, by):
        self.index = (self.index + by) % (len(self.backdrops) + 1)

    def chosen(self):
        return self.backdrops[self.index - 1][0] if self.index else None

    def title(self):
        return self.backdrops[self.index - 1][1] if self.index else "No backdrop"

    def for_the_next_guest(self, choice):
        if choice == "random":
            self.index = random.randrange(len(self.backdrops) + 1)
        chosen = self.chosen()
        if choice == "cycle":
            self.step(1)
        return chosen


THEMES = Themes()
_guest = [Guest()]
_pictured = []  # (capture, its result or FAILED, its backdrop) of the last picture: pibooth asks again for the animation
_bands = {"status": ["", None], "theme": ["", None]}  # each band's line on the wait screen, and its rendering
_checked = [0.0]  # when the wait screen last had the appliance checked


@pibooth.hookimpl(trylast=True)  # over what pibooth's own plugins draw
def state_wait_enter(cfg, app, win):
    for band in _bands.values():
        band[1] = None
    state_wait_do(cfg, app, win, [])


@pibooth.hookimpl(trylast=True)
def state_wait_do(cfg, app, win, events):
    url = _use_settings(cfg)
    if url and time.monotonic() - _checked[0] > 2:
        # Know before the next guest whether the appliance is there (the
        # link asks it only when its last answer is ten seconds old).
        _checked[0] = time.monotonic()
        SENDER.submit(LINK.gone)
    manual = url and _settings["backdrops"] == "manual"
    if url and _settings["backdrops"] in CHOICES[:3]:
        THEMES.refresh()
    if manual and THEMES.backdrops:
        import pygame

        for event in events:
            if event.type == pygame.KEYDOWN and event.key in (pygame.K_LEFT, pygame.K_RIGHT):
                THEMES.step(-1 if event.key == pygame.K_LEFT else 1)
                LOGGER.info("backdrop %r chosen on the wait screen", THEMES.title())
    status = cutout_booth.STATUS.line(LINK)
    if status != _bands["status"][0]:
        if status:
            LOGGER.warning("on the wait screen: %s", status)
        else:
            LOGGER.info("the wait screen shows no word from the cutout appliance now: all is well")
    theme = "<   {}   >".format(THEMES.title()) if manual and THEMES.backdrops else ""
    _show(win, "status", status, top=True)
    _show(win, "theme", theme, top=False)


def _show(win, which, line, top):
    band = _bands[which]
    if line != band[0]:
        if not line:
            win.update()  # repaint what the band covered
        band[:] = [line, None]
    if line:
        width, height = win.surface.get_size()
        if band[1] is None or band[1].get_width() != width:
            band[1] = _band(line, width, height)
        win.surface.blit(band[1], (0, 0 if top else height - band[1].get_height()))


def _band(line, width, height):
    import pygame

    band = pygame.Surface((width, max(32, height // 16)))  # opaque: drawn again at every frame
    band.fill((20, 20, 20))
    font = pygame.font.Font(None, int(band.get_height() * 0.6))
    text = font.render(line, True, (255, 255, 255))
    if text.get_width() > width - 20:
        text = pygame.transform.smoothscale(text, (width - 20, text.get_height() * (width - 20) // text.get_width()))
    band.blit(text, text.get_rect(center=band.get_rect().center))
    return band


@pibooth.hookimpl
def state_wait_exit(cfg, app):
    _guest[0].cancel()
    url = _use_settings(cfg)
    choice = _settings["backdrops"]
    backdrop = THEMES.for_the_next_guest(choice) if url and choice in CHOICES[:3] else None
    _guest[0] = Guest(backdrop)
    if backdrop:
        LOGGER.info("this guest's backdrop: %r", THEMES.title() if choice == "manual" else backdrop)


@pibooth.hookimpl
def state_failsafe_enter(cfg, app):
    _guest[0].cancel()
    _guest[0] = Guest()


@pibooth.hookimpl
def state_capture_exit(cfg, app):
    if not _use_settings(cfg):
        return
    raw = _copy_of(app.camera._captures[-1])  # the camera's buffer; it has no public getter
    if raw is not None:
        _guest[0].send(_result_of_raw, app.camera, raw)


def _copy_of(raw):
    """A copy of a raw capture that the camera still reads itself later: a
    picamera JPEG stream or an OpenCV frame, with its effect; None for other
    cameras (gPhoto2 deletes its file once read)."""
    try:
        data, effect = raw
    except (TypeError, ValueError):
        return None
    if hasattr(data, "getvalue"):
        return io.BytesIO(data.getvalue()), effect
    if hasattr(data, "copy") and hasattr(data, "shape"):
        return data.copy(), effect
    return None


def _result_of_raw(camera, raw, backdrop):
    LINK.raise_if_gone()  # before the booth decodes the capture for nothing
    return _result_of(camera._post_process_capture(raw), backdrop)  # pibooth's own rotation, crop, flip and effect


@pibooth.hookimpl
def pibooth_setup_picture_factory(cfg, opt_index, factory):
    url = _use_settings(cfg)
    if not url:
        return None
    captures = factory._images  # the factory's captures; it has no public getter
    known = [_pictured_before(capture) for capture in captures]
    if None in known:
        guest = _guest[0]
        if len(guest.sent) != len(captures):  # a camera whose captures could not be sent early
            guest.cancel()
            guest.sent = []
            for capture in captures:
                guest.send(_result_of, capture)
        try:
            results = [LINK.wait(future) for future in guest.sent]
        except Exception as exc:
            guest.cancel()
            why = exc if isinstance(exc, cutout_booth.ApplianceError) else "{}: {}".format(type(exc).__name__, exc)
            LOGGER.warning("cutout appliance at %s failed (%s): the captures are kept as they are", url, why)
            results = [FAILED] * len(captures)
        guest.sent = []
        known = [(result, guest.backdrop) for result in results]
        _pictured[:] = [(capture, result, backdrop) for capture, (result, backdrop) in zip(captures, known)]
    if any(result is FAILED for result, _ in known):
        return None  # pibooth's own factory: the captures as they are
    if known[0][1]:  # on a backdrop: the appliance's composites are the captures
        return PilPictureFactory(factory.width, factory.height, *[_opened(result) for result, _ in known])
    return CutoutPictureFactory(factory.width, factory.height, captures, [matte for matte, _ in known])


def _pictured_before(capture):
    """This very capture's (result or FAILED, backdrop), or None if it was not asked for."""
    for pictured, result, backdrop in _pictured:
        if pictured is capture:
            return result, backdrop
    return None


def _opened(data):
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


class CutoutPictureFactory(PilPictureFactory):
    """pibooth's PIL factory, pasting each capture by its matte: both scaled
    to the capture's place in the picture, the matte from the size it came
    back at, never the capture in RGBA at full size."""

    def __init__(self, width, height, captures, mattes):
        super().__init__(width, height, *captures)
        self._mattes = mattes  # PNG, by capture

    def _iter_images(self):
        return zip(self._images, self._mattes)

    def _image_resize_keep_ratio(self, image, max_w, max_h, crop=False):
        capture, matte_png = image
        placed, width, height = super()._image_resize_keep_ratio(capture, max_w, max_h, crop)
        # The matte as sent has the capture's shape: scaled straight to where the capture goes.
        matte = _opened(matte_png)
        if crop:
            outer = sizing.new_size_keep_aspect_ratio(capture.size, (max_w, max_h), "outer")
            matte = matte.resize(outer, Image.Resampling.BILINEAR).crop(sizing.new_size_by_croping(outer, (max_w, max_h)))
        else:
            matte = matte.resize(placed.size, Image.Resampling.BILINEAR)
        return (placed, matte), width, height

    def _image_paste(self, image, dest_image, pos_x, pos_y):
        placed, matte = image
        dest_image.paste(placed, (pos_x, pos_y), matte)


def _result_of(capture, backdrop):
    """What the appliance makes of `capture`, as bytes, at the size sent:
    its matte (a grey PNG), or with a backdrop the composite (a JPEG); or an
    exception."""
    sent = capture.convert("RGB")
    longest = _settings["longest_side"]
    if 0 < longest < max(sent.size):
        sent.thumbnail((longest, longest), Image.Resampling.BILINEAR, reducing_gap=2.0)
    photo = io.BytesIO()
    sent.save(photo, format="JPEG", quality=JPEG_QUALITY)
    fields = {"size": "full", "backdrop": backdrop, "format": "jpg"} if backdrop else FIELDS
    body = LINK.cut_out(photo.getvalue(), fields).body
    try:
        result = Image.open(io.BytesIO(body))  # reads the header only
    except Exception as exc:
        raise cutout_booth.ApplianceError("the answer is not an image") from exc
    wanted = ("JPEG", "RGB") if backdrop else ("PNG", "L")
    if (result.format, result.mode) != wanted or result.size != sent.size:
        raise cutout_booth.ApplianceError("the answer is a {} {} of {}, not a {} {} of the {} sent".format(
            result.mode, result.format, result.size, *wanted[::-1], sent.size))
    return body
