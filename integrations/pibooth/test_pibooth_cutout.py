"""pibooth 2.1.1 (from PyPI) with the plugin installed, against a real
appliance over HTTPS with its fingerprint pinned: pibooth's
`pibooth_setup_picture_factory` hook, as its processing state calls it on a
real photo, gives a factory holding the appliance's cut-out at the photo's
size, and the picture pibooth builds shows its own background where the
photo's was; when the appliance is down, slow, refuses the key, shows another
certificate or answers with something else, the picture is the one pibooth
builds without the plugin, and one line says why. Set up with no url and no
api_key, the plugin finds the appliance on the LAN when pibooth starts, pairs
with it once the operator approves the code it logs (on the dashboard, or by
the appliance's button), saves the url, key and pin into pibooth.cfg, and the
next capture is cut out; refused, expired, or through a man in the middle,
it stays unpaired and the captures are kept as they are.

A guest's sequence of captures, with a camera that holds its raw captures
as pibooth's picamera camera does: each capture is cut out while the guest
poses for the next, and the guest waits for about one round trip after the
last, printed beside the wait when every capture is sent after the last
shot (as the plugin did before, and still does for gPhoto2 cameras). An
appliance switched off or hung costs a guest's whole sequence at most 2 s;
the booth uses it again within 30 s of its return. A 12 MP capture crosses
the LAN in a quarter of the bytes the full cut-out took.

The plugin is loaded as pibooth's main() loads plugins (its entry point), its
options added by pibooth_configure and read from a pibooth.cfg; most tests
call its state hooks on the plugin alone, on a real pibooth window where it
draws. One runs pibooth itself (TheWholeProgram): its `pibooth` command, in
a process of its own, on SDL's dummy display and gpiozero's mock pins, with
this file as its plugin from a path ([GENERAL] plugins) for the camera
(`pibooth_setup_camera`) and a guest at its keyboard, whose key presses are
pygame's KEYDOWN and KEYUP events in pibooth's queue: the guest picks the
appliance's "Beach" with the right arrow on the wait screen, takes a
picture with P, and the picture pibooth saves shows the subject on the
backdrop and under its overlay, as the appliance composited each capture,
one cut-out charged per capture.

usage: python test_pibooth_cutout.py   (in a venv: `make test-integrations`)
"""

import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from appliance import CODE, OUTCOME, PHOTO, Appliance, Fallbacks, Pairing, Switch, free_port, other_fingerprint, wait_for  # noqa: E402

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pibooth.pictures imports pygame
import pibooth  # noqa: E402
import pygame  # noqa: E402
from PIL import Image, ImageChops  # noqa: E402
from pibooth.camera.base import BaseCamera  # noqa: E402
from pibooth.config.parser import PiConfigParser  # noqa: E402
from pibooth.pictures import get_picture_factory, sizing  # noqa: E402
from pibooth.plugins import create_plugin_manager  # noqa: E402

GREEN = (0, 255, 0)  # the picture's background: no photo has so much of it


def setUpModule():
    global appliance, plugins, config, without_plugin
    appliance = Appliance().__enter__()
    plugins = create_plugin_manager()
    config = PiConfigParser(os.path.join(tempfile.mkdtemp(prefix="pibooth-"), "pibooth.cfg"), plugins)
    # As pibooth's main() does.
    plugins.load_all_plugins(config.gettuple("GENERAL", "plugins", "path"), config.gettuple("GENERAL", "plugins_disabled", str))
    assert plugins.get_plugin("cutout") is not None, "the plugin is not loaded"
    plugins.hook.pibooth_configure(cfg=config)
    set_appliance("", "", "")
    without_plugin = picture()


def tearDownModule():
    appliance.__exit__()


def ours(hook):
    """pibooth's caller of `hook` on this plugin alone."""
    cutout = plugins.get_plugin("cutout")
    return plugins.subset_hook_caller(hook, remove_plugins=[p for p in plugins.get_plugins() if p is not cutout])


def set_appliance(url, api_key, fingerprint, timeout=30):
    """pibooth.cfg as an operator writes it, read again."""
    with open(config.filename, "w") as cfg:
        cfg.write(f"[PICTURE]\nbackgrounds = {GREEN}\n\n"
                  f"[CUTOUT]\nurl = {url}\napi_key = {api_key}\nfingerprint = {fingerprint}\ntimeout = {timeout}\n")
    config.load()


def processing():
    """The factory pibooth's processing state gets for one capture (PicturePlugin.state_processing_do)."""
    with Image.open(PHOTO) as file:
        capture = file.convert("RGB")
    default = get_picture_factory((capture,), config.get("PICTURE", "orientation"))
    return capture, plugins.hook.pibooth_setup_picture_factory(cfg=config, opt_index=0, factory=default)


def picture() -> Image.Image:
    return processing()[1].build()


def green_pixels(image: Image.Image) -> int:
    colours = image.convert("RGB").getcolors(maxcolors=image.width * image.height)
    return next((count for count, colour in colours if colour == GREEN), 0)


class ThePictureFactoryHook(Fallbacks, unittest.TestCase):
    another_certificate = "fingerprint is not the pinned one"

    @property
    def appliance(self):
        return appliance

    def point_at(self, url, api_key, fingerprint, timeout=30):
        set_appliance(url, api_key, fingerprint, timeout)

    def test_gets_the_appliances_cutout_at_the_photos_size(self):
        set_appliance(appliance.https_url, appliance.key, appliance.fingerprint)
        served = len(appliance.served())
        before = appliance.images_charged()
        with self.assertNoLogs("pibooth.cutout", "WARNING"):
            capture, factory = processing()
        (((placed, alpha), _, _),) = [factory._image_resize_keep_ratio(pair, *capture.size) for pair in factory._iter_images()]
        self.assertEqual(placed.tobytes(), capture.tobytes(), "the capture itself")
        self.assertEqual((alpha.mode, alpha.size), ("L", capture.size), "pasted by the appliance's matte")
        self.assertEqual(alpha.getextrema(), (0, 255), "some pixels transparent, some opaque")
        self.assertGreater(alpha.histogram()[0], 1000, "a real background, not a stray pixel")
        self.assertGreater(alpha.histogram()[255], 1000, "a real subject")
        self.assertNotEqual(appliance.images_charged(), before, "the appliance served it")
        self.assertRegex(appliance.next_served(served), r"^type=person model=modnet", "a booth asks for people")
        # pibooth's picture: its green background shows where the photo's was.
        self.assertGreater(green_pixels(factory.build()), green_pixels(without_plugin) + 1000)

    def test_asks_once_per_capture_when_pibooth_asks_again_for_the_animation(self):
        set_appliance(appliance.https_url, appliance.key, appliance.fingerprint)
        capture, _ = processing()
        before = appliance.images_charged()
        again = get_picture_factory((capture,), config.get("PICTURE", "orientation"), force_pil=True, dpi=200)
        plugins.hook.pibooth_setup_picture_factory(cfg=config, opt_index=0, factory=again)
        self.assertEqual(appliance.images_charged(), before)

    def assert_programs_own_result(self, why: str):
        with self.assertLogs("pibooth.cutout", "WARNING") as logs:
            built = picture()
        self.assertEqual(len(logs.records), 1, logs.output)
        print(f"\n  logged: {logs.output[0]}", end=" ", file=sys.stderr)
        self.assertIn("the captures are kept as they are", logs.output[0])
        self.assertIn(why, logs.output[0])
        self.assertEqual(built.tobytes(), without_plugin.tobytes(), "pibooth's own picture")


class PairingOnTheLan(Pairing, unittest.TestCase):
    logger = "pibooth.cutout"

    @property
    def appliance(self):
        return appliance

    def start_unpaired(self):
        set_appliance("", "", "")
        plugins.hook.pibooth_startup(cfg=config, app=None)  # as pibooth's main loop does first

    def stop_booth(self):
        # The plugin's own cleanup: pibooth's other plugins' needs its application.
        plugins.get_plugin("cutout").pibooth_cleanup(app=None)

    def saved(self):
        saved = PiConfigParser(config.filename, plugins)
        return saved.get("CUTOUT", "url"), saved.get("CUTOUT", "api_key"), saved.get("CUTOUT", "fingerprint")

    def assert_appliances_cutout(self):
        before = appliance.images_charged()
        with self.assertNoLogs("pibooth.cutout", "WARNING"):
            capture, factory = processing()
        self.assertTrue(factory._mattes, "the appliance's matte")
        self.assertNotEqual(appliance.images_charged(), before, "the appliance served it")

    def assert_unpaired(self):
        super().assert_unpaired()
        self.assertEqual(picture().tobytes(), without_plugin.tobytes(), "pibooth's own picture")


PIBOOTH_RESOLUTION = (1934, 2464)  # pibooth's default [CAMERA] resolution
PIBOOTH_COUNTDOWN = 3.0  # its default [WINDOW] preview_delay, the seconds between a guest's captures


class Camera(BaseCamera):
    """pibooth's picamera camera (camera/rpi2.py) without the camera: each
    raw capture is the sensor's JPEG stream and its effect, post-processed as
    that camera does it (cropped to the resolution's ratio, resized), from a
    dev photo enlarged to the sensor's size with a sensor's noise."""

    def __init__(self, sensor=(4056, 3040), resolution=PIBOOTH_RESOLUTION):
        super().__init__(None)
        self.initialize(100, resolution)
        with Image.open(PHOTO) as photo:
            image = photo.convert("RGB").resize(sensor, Image.Resampling.BICUBIC)
        noise = Image.effect_noise(sensor, 12).convert("RGB")
        image = ImageChops.add(image, noise, scale=1.0, offset=-128)
        stream = io.BytesIO()
        image.save(stream, format="JPEG", quality=92)
        self.jpeg = stream.getvalue()

    def capture(self, effect=None):
        self._captures.append((io.BytesIO(self.jpeg), effect or "none"))

    def preview(self, window, flip=True):
        self._window = window

    def preview_countdown(self, timeout, alpha=60):
        """The guest poses: pibooth's loop held for `timeout` seconds, its
        window's events pumped, as its cameras' countdowns do."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pygame.event.pump()
            time.sleep(1 / 40)

    preview_wait = preview_countdown

    def stop_preview(self):
        self._window = None

    def quit(self):
        pass

    def _post_process_capture(self, capture_data):
        stream, _ = capture_data
        stream.seek(0)
        image = Image.open(stream)
        image = image.crop(sizing.new_size_by_croping_ratio(image.size, self.resolution))
        return image.resize(sizing.new_size_keep_aspect_ratio(image.size, self.resolution, "outer"))


def a_guest(camera, captures=4, countdown=PIBOOTH_COUNTDOWN, at_the_last_shot=lambda: None):
    """A guest's sequence as pibooth's states run it: the picture, and the
    seconds from the last capture to the picture built."""
    app = types.SimpleNamespace(camera=camera)
    ours("state_wait_exit")(cfg=config, app=app, win=None)
    for shot in range(captures):
        if shot:
            time.sleep(countdown)  # the guest poses for the next
        if shot == captures - 1:
            at_the_last_shot()
        camera.capture()
        ours("state_capture_exit")(cfg=config, app=app, win=None)
    last = time.monotonic()
    taken = camera.get_captures()  # pibooth's processing state
    default = get_picture_factory(taken, config.get("PICTURE", "orientation"))
    picture = plugins.hook.pibooth_setup_picture_factory(cfg=config, opt_index=0, factory=default).build()
    return picture, time.monotonic() - last


def after_the_last_shot(camera, captures=4):
    """The same guest with every capture sent after the last shot: the
    seconds from the last capture to the picture built."""
    for _ in range(captures):
        camera.capture()
    last = time.monotonic()
    taken = camera.get_captures()
    default = get_picture_factory(taken, config.get("PICTURE", "orientation"))
    plugins.hook.pibooth_setup_picture_factory(cfg=config, opt_index=0, factory=default).build()
    return time.monotonic() - last


def pibooths_own(camera, captures=4):
    """pibooth's picture without the plugin, and the seconds it takes from the last capture."""
    set_appliance("", "", "")
    return a_guest(camera, captures, countdown=0)


def charged() -> int:
    return int(appliance.images_charged().split()[0])


class TheCountdown(unittest.TestCase):
    def setUp(self):
        self.camera = Camera()

    def test_cuts_each_capture_out_while_the_guest_poses_for_the_next(self):
        # Each figure is the median of three: one guest's wait is a
        # difference of two timings over a second long, each with its noise.
        set_appliance(appliance.https_url, appliance.key, appliance.fingerprint)
        round_trip = statistics.median(self.one_round_trip() for _ in range(3))
        own = statistics.median(pibooths_own(self.camera)[1] for _ in range(3))
        set_appliance(appliance.https_url, appliance.key, appliance.fingerprint)
        waits = []
        for _ in range(3):
            before = charged()
            at_the_last_shot = []
            picture, wait = a_guest(self.camera, countdown=max(PIBOOTH_COUNTDOWN, 1.5 * round_trip),
                                    at_the_last_shot=lambda: at_the_last_shot.append(charged()))
            self.assertEqual(at_the_last_shot, [before + 3], "the first three cut out while the guest posed")
            self.assertEqual(charged(), before + 4)
            self.assertGreater(green_pixels(picture), 4000, "pibooth's background shows where the photos' was")
            waits.append(wait)
        wait = statistics.median(waits)
        late = after_the_last_shot(self.camera)
        plugin_wait = wait - own
        print(f"\n  4 captures of {PIBOOTH_RESOLUTION[0]}x{PIBOOTH_RESOLUTION[1]}, one round trip {round_trip:.2f} s, "
              f"pibooth's own assembly {own:.2f} s; from the last capture to the picture: during the countdown "
              f"{wait:.2f} s, after the last shot {late:.2f} s; the plugin's share: "
              f"{plugin_wait / round_trip:.2f}x against {(late - own) / round_trip:.2f}x a round trip",
              end=" ", file=sys.stderr)
        # The 1.3x holds on most runs here, but the booth and the
        # appliance share two cores, and the share measured 1.0-1.7x: what
        # is asserted is the countdown's work above and half of the wait of
        # a plugin sending after the last shot; the ratio is printed.
        self.assertLess(plugin_wait, (late - own) / 2)

    def one_round_trip(self):
        """A capture's JPEG to its matte back, as the plugin does it."""
        plugin = plugins.get_plugin("cutout")
        plugin._use_settings(config)
        self.camera.capture()
        (capture,) = self.camera.get_captures()
        started = time.monotonic()
        plugin._result_of(capture, None)
        return time.monotonic() - started

    def test_a_switched_off_or_hung_appliance_costs_a_guest_two_seconds_at_most(self):
        for state in ("down", "hung", *Switch.STALLS):
            own_picture, own = pibooths_own(self.camera)
            with self.subTest(state), Switch(appliance, state) as switch:
                set_appliance(switch.url, appliance.key, appliance.fingerprint)
                started = time.monotonic()
                with self.assertLogs("pibooth.cutout", "WARNING") as logs:
                    picture, wait = a_guest(self.camera, countdown=0.5)
                added = time.monotonic() - started - 3 * 0.5 - own
                print(f"\n  appliance {state}: {added:.2f} s added to the guest's sequence; logged: {logs.output[0]}",
                      end=" ", file=sys.stderr)
                self.assertEqual(len(logs.records), 1, logs.output)
                self.assertIn("the captures are kept as they are", logs.output[0])
                self.assertEqual(picture.tobytes(), own_picture.tobytes(), "pibooth's own picture")
                self.assertLessEqual(added, 2.0)

    def test_uses_the_appliance_again_within_30_s_of_its_return(self):
        with Switch(appliance, "down") as switch:
            set_appliance(switch.url, appliance.key, appliance.fingerprint)
            gone = time.monotonic()
            while time.monotonic() - gone < 10:  # a guest a second: the checks back off, 1, 2, 4, 8 s apart
                with self.assertLogs("pibooth.cutout", "WARNING"):
                    a_guest(self.camera, captures=1)
                time.sleep(1)
            switch.state = "up"
            back = time.monotonic()
            while True:
                before = charged()
                picture, _ = a_guest(self.camera, captures=1, countdown=0)
                if charged() == before + 1:
                    break
                self.assertLess(time.monotonic() - back, 30, "the booth still keeps the captures as they are")
                time.sleep(1)  # the next guest
            print(f"\n  cut out again {time.monotonic() - back:.1f} s after the appliance came back", end=" ", file=sys.stderr)

    def test_a_12_mp_capture_crosses_the_lan_in_a_quarter_of_the_bytes(self):
        camera = Camera(sensor=(4608, 2592), resolution=(4608, 2592))
        plugin = plugins.get_plugin("cutout")
        with Switch(appliance) as switch:
            set_appliance(switch.url, appliance.key, appliance.fingerprint)
            plugin._use_settings(config)
            camera.capture()
            (capture,) = camera.get_captures()
            # What the plugin sent and fetched before: a JPEG at quality 95, the RGBA cut-out back.
            photo = io.BytesIO()
            capture.save(photo, format="JPEG", quality=95)
            switch.reset_counts()
            cutout = plugin.LINK.cut_out(photo.getvalue(), {"size": "full"}).body
            before = switch.bytes_counted()
            self.assertEqual(Image.open(io.BytesIO(cutout)).mode, "RGBA")
            switch.reset_counts()
            a_guest(camera, captures=1)
            now = switch.bytes_counted()
            kept = sum(len(result) for _, result, _ in plugin._pictured)
        print(f"\n  a 4608x2592 capture: {before / 1e6:.1f} MB over the LAN before, {now / 1e6:.1f} MB now "
              f"({now / before:.2f}x); the plugin keeps {kept / 1e3:.0f} kB of it", end=" ", file=sys.stderr)
        self.assertLessEqual(now, before / 4)
        self.assertLess(kept, 1_000_000, "the matte, compressed: not the capture's 36 MB of RGB")


class TheWaitScreen(unittest.TestCase):
    """The band pibooth's wait screen shows, in a real pibooth window (SDL's dummy display)."""

    @classmethod
    def setUpClass(cls):
        from pibooth.view import PiWindow

        cls.win = PiWindow("pibooth", (800, 480))

    def band_shown(self) -> bool:
        """Whether the plugin's band is at the top of the wait screen after a frame."""
        ours("state_wait_do")(cfg=config, app=None, win=self.win, events=[])
        return tuple(self.win.surface.get_at((2, 2)))[:3] == (20, 20, 20)

    def test_says_nothing_while_all_is_well(self):
        set_appliance(appliance.https_url, appliance.key, appliance.fingerprint)
        plugin = plugins.get_plugin("cutout")
        plugin._use_settings(config)
        plugin.LINK.raise_if_gone()
        self.assertEqual(line(), "")
        self.assertFalse(self.band_shown())

    def test_says_when_the_appliance_does_not_answer(self):
        with Switch(appliance, "down") as switch:
            set_appliance(switch.url, appliance.key, appliance.fingerprint)
            with self.assertLogs("pibooth.cutout", "WARNING") as logs:
                deadline = time.monotonic() + 5  # the wait screen has the appliance checked every 2 s at most
                while not self.band_shown() and time.monotonic() < deadline:
                    time.sleep(0.02)  # pibooth's frames
            self.assertIn("does not answer", line())
            self.assertIn("on the wait screen: The cutout appliance does not answer", logs.output[-1])
            switch.state = "up"

    def test_shows_the_pairing_code_to_approve(self):
        pairing = PairingOnTheLan("test_pairs_when_the_operator_presses_the_appliances_button")
        pairing.setUp()
        try:
            with self.assertLogs("pibooth.cutout", "INFO") as logs:
                pairing.start_unpaired()
                code = wait_for(logs, CODE)[3]
                self.assertTrue(self.band_shown())
                self.assertIn(f"Pairing code {code}: approve it", line())
                appliance.press_button()
                wait_for(logs, OUTCOME)
            self.assertEqual(line(), "")
        finally:
            pairing.tearDown()


def add_backdrops():
    """The appliance's backdrops, as its operator adds them on its dashboard:
    "Beach", blue under an opaque red band over its top tenth, and "日本" (an id beyond ASCII)."""
    blue = io.BytesIO()
    Image.new("RGB", (300, 200), (0, 0, 255)).save(blue, format="PNG")
    band = Image.new("RGBA", (300, 200), (0, 0, 0, 0))
    band.paste((255, 0, 0, 255), (0, 0, 300, 20))
    overlay = io.BytesIO()
    band.save(overlay, format="PNG")
    appliance.add_backdrop("Beach", blue.getvalue(), overlay.getvalue())
    appliance.add_backdrop("日本", blue.getvalue())


def assert_on_the_beach(test, picture: Image.Image):
    """The picture shows the backdrop's blue, and its overlay's red over it."""
    colours = dict((colour, n) for n, colour in picture.convert("RGB").getcolors(maxcolors=picture.width * picture.height))
    blueish = sum(n for (r, g, b), n in colours.items() if b > 200 and r < 40 and g < 40)
    reddish = sum(n for (r, g, b), n in colours.items() if r > 200 and g < 40 and b < 40)
    print(f"\n  the picture: {blueish} pixels of the backdrop's blue, {reddish} of its overlay's red", end=" ", file=sys.stderr)
    test.assertGreater(blueish, picture.width * picture.height // 10, "the subject stands on the backdrop")
    test.assertGreater(reddish, picture.width * picture.height // 100, "under its overlay")


class TheBackdrops(unittest.TestCase):
    """The appliance's backdrops as pibooth's themes: the guest picks one on the wait screen."""

    @classmethod
    def setUpClass(cls):
        from pibooth.view import PiWindow

        cls.win = PiWindow("pibooth", (800, 480))

    def tearDown(self):
        appliance.remove_backdrops()
        plugins.get_plugin("cutout").THEMES.index = 0

    def test_a_guest_picks_a_backdrop_with_the_arrow_keys_and_stands_on_it(self):
        add_backdrops()
        set_appliance(appliance.https_url, appliance.key, appliance.fingerprint)
        themes = plugins.get_plugin("cutout").THEMES
        themes.fetched = float("-inf")  # as at pibooth's start
        ours("state_wait_enter")(cfg=config, app=None, win=self.win)
        deadline = time.monotonic() + 10
        while len(themes.backdrops) < 2 and time.monotonic() < deadline:
            ours("state_wait_do")(cfg=config, app=None, win=self.win, events=[])
            time.sleep(0.02)
        self.assertEqual([name for _, name in themes.backdrops], ["Beach", "日本"])
        self.assertEqual(themes.title(), "No backdrop")
        right = pygame.event.Event(pygame.KEYDOWN, key=pygame.K_RIGHT)
        with self.assertLogs("pibooth.cutout", "INFO") as logs:
            ours("state_wait_do")(cfg=config, app=None, win=self.win, events=[right])
        self.assertIn("backdrop 'Beach' chosen on the wait screen", logs.output[-1])
        self.assertEqual(tuple(self.win.surface.get_at((2, 470)))[:3], (20, 20, 20), "its name in the band at the bottom")
        before = charged()
        picture, _ = a_guest(Camera(), captures=2, countdown=0.5)
        self.assertEqual(charged(), before + 2)
        assert_on_the_beach(self, picture)
        left = pygame.event.Event(pygame.KEYDOWN, key=pygame.K_LEFT)
        ours("state_wait_do")(cfg=config, app=None, win=self.win, events=[left])
        self.assertEqual(themes.title(), "No backdrop")
        plain, _ = a_guest(Camera(), captures=2, countdown=0.5)
        self.assertGreater(green_pixels(plain), green_pixels(picture) + 1000,
                           "without a backdrop, pibooth's own background behind the subject")


# The plugin that TheWholeProgram has pibooth load from this file ([GENERAL]
# plugins), in pibooth's own process: its camera, and a guest at its
# keyboard. Nothing else calls these hooks.
GUEST = {"band": None, "pressed_p": False}
BAND = (20, 20, 20)  # the plugin's bands on the wait screen


@pibooth.hookimpl
def pibooth_setup_camera(cfg):
    return Camera()


def press(key, unicode=""):
    """A key pressed and released, as a keyboard's events reach pygame's queue."""
    for type in (pygame.KEYDOWN, pygame.KEYUP):
        pygame.event.post(pygame.event.Event(type, key=key, mod=pygame.KMOD_NONE, unicode=unicode))


@pibooth.hookimpl
def state_wait_validate(win):
    """The guest at the wait screen, as pibooth has just drawn it: once the
    band at the bottom offers the appliance's backdrops, the right arrow to
    the next; once the band shows another name, P for the picture."""
    width, height = win.surface.get_size()
    if tuple(win.surface.get_at((2, height - 10)))[:3] != BAND:
        return
    band_height = max(32, height // 16)  # as the plugin draws it
    band = pygame.image.tobytes(win.surface.subsurface((0, height - band_height, width, band_height)), "RGB")
    if GUEST["band"] is None:
        GUEST["band"] = band
        press(pygame.K_RIGHT)
    elif band != GUEST["band"] and not GUEST["pressed_p"]:
        GUEST["pressed_p"] = True
        press(pygame.K_p, "p")  # pibooth 2.1.1's key for a picture (PiApplication.find_capture_event)


@pibooth.hookimpl
def state_choose_enter():
    press(pygame.K_LEFT)  # the layout on the left: [PICTURE] captures' first, two captures


@pibooth.hookimpl
def state_wait_enter(app):
    if app.previous_picture_file:  # the guest's picture is saved: the operator closes pibooth
        pygame.event.post(pygame.event.Event(pygame.QUIT))


class TheWholeProgram(unittest.TestCase):
    """pibooth's `pibooth` command, as an operator starts it, with this file
    as its plugin from a path: a guest picks a backdrop with the arrow keys
    and the picture pibooth saves shows the subject on it."""

    def tearDown(self):
        appliance.remove_backdrops()

    def test_a_guest_picks_a_backdrop_with_the_arrow_keys_and_the_picture_shows_the_subject_on_it(self):
        add_backdrops()
        booth = Path(tempfile.mkdtemp(prefix="pibooth-booth-"))
        self.addCleanup(shutil.rmtree, booth, ignore_errors=True)
        (booth / "config").mkdir()
        pictures = booth / "pictures"
        # Short delays, so that the guest's whole sequence takes seconds; no
        # print view, as no printer is installed here.
        (booth / "config" / "pibooth.cfg").write_text(
            f'[GENERAL]\ndirectory = "{pictures}"\nplugins = "{Path(__file__).resolve()}"\n\n'
            "[WINDOW]\nchosen_delay = 0.5\npreview_delay = 1\nfinish_picture_delay = 0.5\n\n"
            "[PICTURE]\ncaptures = (2, 1)\n\n"
            "[PRINTER]\nprinter_delay = 0\n\n"
            f"[CUTOUT]\nurl = {appliance.https_url}\napi_key = {appliance.key}\n"
            f"fingerprint = {appliance.fingerprint}\nbackdrops = manual\n")
        # A home of its own: pibooth removes ~/.config/autostart/pibooth.desktop at its start.
        env = dict(os.environ, HOME=str(booth), SDL_VIDEODRIVER="dummy", SDL_AUDIODRIVER="dummy",
                   GPIOZERO_PIN_FACTORY="mock")
        before = charged()
        started = time.monotonic()
        try:
            run = subprocess.run([Path(sys.executable).with_name("pibooth"), booth / "config", "--nolog", "--verbose"],
                                 env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired as stopped:
            said = b"".join(out or b"" for out in (stopped.stdout, stopped.stderr)).decode(errors="replace")
            self.fail(f"pibooth still ran after 60 s:\n{said}")
        took = time.monotonic() - started
        said = run.stdout + run.stderr
        self.assertEqual(run.returncode, 0, said)
        self.assertNotRegex(said, r"\[ (ERROR|CRITICAL)", "pibooth's loop caught an error")
        self.assertNotRegex(said, r"WARNING *\] pibooth\.cutout", "the plugin had a word for the wait screen")
        states = re.findall(r"Activate state '(\w+)'", said)
        print(f"\n  pibooth ran {took:.1f} s through {', '.join(states)}", end=" ", file=sys.stderr)
        self.assertEqual(states, ["wait", "choose", "chosen", "preview", "capture", "preview", "capture",
                                  "processing", "finish", "wait"], said)
        self.assertIn("backdrop 'Beach' chosen on the wait screen", said)
        self.assertIn("this guest's backdrop: 'Beach'", said)
        self.assertEqual(charged(), before + 2, "one cut-out a capture")
        saved = list(pictures.glob("*_pibooth.jpg"))
        self.assertEqual(len(saved), 1, f"{saved}: one picture saved\n{said}")
        with Image.open(saved[0]) as picture:
            assert_on_the_beach(self, picture)


def line() -> str:
    import cutout_booth

    return cutout_booth.STATUS.line(plugins.get_plugin("cutout").LINK)


class TheCheckBeforeAnEvent(unittest.TestCase):
    """`cutout-booth check`, the command installed with the plugin, on the booth's pibooth.cfg."""

    def check(self, *args):
        command = Path(sys.executable).with_name("cutout-booth")
        done = subprocess.run([command, "check", str(PHOTO), "--settings", config.filename, *args],
                              capture_output=True, text=True, timeout=60)
        print(f"\n{done.stdout}", end=" ", file=sys.stderr)
        return done

    def test_checks_the_pin_and_the_key_and_times_a_cut_out(self):
        set_appliance(appliance.https_url, appliance.key, appliance.fingerprint)
        before = charged()
        done = self.check()
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("ready:     yes, the certificate is the pinned one", done.stdout)
        self.assertIn("key:       account booth on the pro plan", done.stdout)
        self.assertRegex(done.stdout, r"cut-out:   \d+\.\d\d s for 106024.jpg .* served by modnet\+u2netp")
        self.assertIn(f"quota:     {500 - before - 1} of 500 cut-outs left this month", done.stdout)

    def test_fails_on_a_refused_key_another_certificate_or_no_appliance(self):
        for url, key, fingerprint, said in [
            (appliance.https_url, "ck_" + "0" * 40, appliance.fingerprint, "key:       refused: HTTP 403: invalid_api_key"),
            (appliance.https_url, appliance.key, other_fingerprint(appliance.fingerprint), "fingerprint is not the pinned one"),
            (f"https://127.0.0.1:{free_port()}", appliance.key, appliance.fingerprint, "ready:     no: ConnectionRefusedError"),
        ]:
            with self.subTest(said):
                set_appliance(url, key, fingerprint)
                done = self.check()
                self.assertEqual(done.returncode, 1)
                self.assertIn(said, done.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
