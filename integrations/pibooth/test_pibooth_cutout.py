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

The plugin is loaded as pibooth's main() loads plugins (its entry point), its
options added by pibooth_configure and read from a pibooth.cfg.

usage: python test_pibooth_cutout.py   (in a venv: `make test-integrations`)
"""

import os
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from appliance import PHOTO, Appliance, Fallbacks, Pairing  # noqa: E402

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pibooth.pictures imports pygame
from PIL import Image  # noqa: E402
from pibooth.config.parser import PiConfigParser  # noqa: E402
from pibooth.pictures import get_picture_factory  # noqa: E402
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
        before = appliance.images_charged()
        with self.assertNoLogs("pibooth.cutout", "WARNING"):
            capture, factory = processing()
        (cutout,) = factory._images
        self.assertEqual(cutout.size, capture.size)
        self.assertEqual(cutout.mode, "RGBA")
        alpha = cutout.getchannel("A")
        self.assertEqual(alpha.getextrema(), (0, 255), "some pixels transparent, some opaque")
        self.assertGreater(alpha.histogram()[0], 1000, "a real background, not a stray pixel")
        self.assertGreater(alpha.histogram()[255], 1000, "a real subject")
        self.assertNotEqual(appliance.images_charged(), before, "the appliance served it")
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
        self.assertEqual(factory._images[0].mode, "RGBA", "the appliance's cut-out")
        self.assertNotEqual(appliance.images_charged(), before, "the appliance served it")

    def assert_unpaired(self):
        super().assert_unpaired()
        self.assertEqual(picture().tobytes(), without_plugin.tobytes(), "pibooth's own picture")


if __name__ == "__main__":
    unittest.main(verbosity=2)
