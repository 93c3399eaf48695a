"""photobooth-app 9.0.0 (from PyPI) with the plugin installed, against a real
appliance over HTTPS with its fingerprint pinned: photobooth-app's own
background-removal step, on a real photo, gets the appliance's cut-out at the
photo's size; when the appliance is down, refuses the key or shows another
certificate, the step gets photobooth-app's own model's cut-out, and one line
says why. Set up with no address and no key, the plugin finds the appliance
on the LAN when photobooth-app starts, pairs with it once the operator
approves the code it logs (on the dashboard, or by the appliance's button),
saves the address, key and pin into its settings, and the next photo is the
appliance's; refused, expired, or through a man in the middle, it stays
unpaired and photos are photobooth-app's own.

The plugin is loaded as photobooth-app loads it (its entry point), started by
photobooth-app's plugin manager, and its settings changed through
photobooth-app's configuration service, as the admin UI does.

usage: python test_photobooth_cutout.py   (in a venv: `make test-integrations`)
"""

import json
import os
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from appliance import PHOTO, Appliance, Fallbacks, Pairing  # noqa: E402

# photobooth-app keeps config/, media/, userdata/ in its working directory.
os.chdir(tempfile.mkdtemp(prefix="photobooth-app-"))

from PIL import Image, ImageOps  # noqa: E402

from photobooth import CONFIG_PATH  # noqa: E402
from photobooth.services.configuration import ConfigurationService  # noqa: E402
from photobooth.services.pluginmanager import PluginManagerService  # noqa: E402
from photobooth.appconfig import appconfig  # noqa: E402
from photobooth.services.mediaprocessing.context import ImageContext  # noqa: E402
from photobooth.services.mediaprocessing.pipeline import Pipeline  # noqa: E402
from photobooth.services.mediaprocessing.steps import image as steps  # noqa: E402
from photobooth.utils.rembg.rembg import remove  # noqa: E402
from photobooth.utils.rembg.session_factory import new_session  # noqa: E402

PLUGIN = "photobooth_cutout"


def setUpModule():
    global appliance, plugins, config, own_alpha
    appliance = Appliance().__enter__()
    plugins = PluginManagerService()
    config = ConfigurationService(plugins)
    assert PLUGIN in config.list_configurables(), f"the plugin is not loaded: {plugins.list_plugins()}"
    set_appliance(appliance.https_url, appliance.key, appliance.fingerprint)
    plugins.start()
    own_alpha = remove(photo(), session=new_session(appconfig.mediaprocessing.remove_background_model)).getchannel("A")


def tearDownModule():
    plugins.stop()
    appliance.__exit__()


def set_appliance(base_url, api_key, fingerprint, timeout=30, enabled=True):
    settings = {"enabled": enabled, "base_url": base_url, "api_key": api_key, "fingerprint": fingerprint, "timeout_seconds": timeout}
    config.validate_and_set_current_and_persist(PLUGIN, {"appliance": settings})


def photo() -> Image.Image:
    with Image.open(PHOTO) as file:
        image = ImageOps.exif_transpose(file)  # as process_image_inner does before its steps
    return image


def remove_background() -> Image.Image:
    """The step as process_image_inner runs it when `remove_background` is on."""
    context = ImageContext(photo(), preview=False)
    Pipeline[ImageContext](steps.RemovebgStep(model_name=appconfig.mediaprocessing.remove_background_model))(context)
    return context.image


class TheBackgroundRemovalStep(Fallbacks, unittest.TestCase):
    another_certificate = "fingerprint is not the pinned one"

    @property
    def appliance(self):
        return appliance

    def point_at(self, url, api_key, fingerprint, timeout=30):
        set_appliance(url, api_key, fingerprint, timeout)

    def setUp(self):
        set_appliance(appliance.https_url, appliance.key, appliance.fingerprint)
        steps.REMOVE_CACHE.clear()  # the step keeps the last cut-outs by the photo's pixels

    def test_gets_the_appliances_cutout_at_the_photos_size(self):
        before = appliance.images_charged()
        with self.assertNoLogs(PLUGIN, "WARNING"):
            cutout = remove_background()
        self.assertEqual(cutout.size, photo().size)
        self.assertEqual(cutout.mode, "RGBA")
        alpha = cutout.getchannel("A")
        self.assertEqual(alpha.getextrema(), (0, 255), "some pixels transparent, some opaque")
        self.assertGreater(alpha.histogram()[0], 1000, "a real background, not a stray pixel")
        self.assertGreater(alpha.histogram()[255], 1000, "a real subject")
        self.assertNotEqual(alpha.tobytes(), own_alpha.tobytes(), "not the booth's own model")
        self.assertNotEqual(appliance.images_charged(), before, "the appliance served it")

    def test_uses_the_booths_own_model_when_disabled(self):
        before = appliance.images_charged()
        set_appliance(appliance.https_url, appliance.key, appliance.fingerprint, enabled=False)
        with self.assertNoLogs(PLUGIN, "WARNING"):
            cutout = remove_background()
        self.assertEqual(cutout.getchannel("A").tobytes(), own_alpha.tobytes(), "photobooth-app's own cut-out")
        self.assertEqual(appliance.images_charged(), before)

    def assert_programs_own_result(self, why: str):
        with self.assertLogs(PLUGIN, "WARNING") as logs:
            cutout = remove_background()
        self.assertEqual(len(logs.records), 1, logs.output)
        print(f"\n  logged: {logs.output[0]}", end=" ", file=sys.stderr)
        self.assertIn("removing the background on this booth", logs.output[0])
        self.assertIn(why, logs.output[0])
        self.assertEqual(cutout.getchannel("A").tobytes(), own_alpha.tobytes(), "photobooth-app's own cut-out")


class OnANewCard(unittest.TestCase):
    """The appliance's SD card dies: its backup restored onto a new one, at
    the same address. The booth, unchanged (its key, its pinned certificate),
    goes on cutting out, charged to the same account's month."""

    def test_the_booth_goes_on_unchanged(self):
        set_appliance(appliance.https_url, appliance.key, appliance.fingerprint)
        steps.REMOVE_CACHE.clear()
        remove_background()
        charged = int(appliance.images_charged().split()[0])
        self.assertGreater(charged, 0)
        fingerprint = appliance.fingerprint
        appliance.move_to_a_new_card()
        self.assertEqual(appliance.fingerprint, fingerprint, "the certificate came with the backup")
        steps.REMOVE_CACHE.clear()
        with self.assertNoLogs(PLUGIN, "WARNING"):
            cutout = remove_background()
        self.assertNotEqual(cutout.getchannel("A").tobytes(), own_alpha.tobytes(), "the appliance's cut-out")
        self.assertEqual(int(appliance.images_charged().split()[0]), charged + 1, "the month's count goes on")


class PairingOnTheLan(Pairing, unittest.TestCase):
    logger = PLUGIN
    assert_programs_own_result = TheBackgroundRemovalStep.assert_programs_own_result

    @property
    def appliance(self):
        return appliance

    def start_unpaired(self):
        """Enabled with no address and no key, then photobooth-app (re)started,
        as the admin UI's save with reload does."""
        plugins.stop()
        set_appliance("", "", "")
        plugins.start()

    def stop_booth(self):
        plugins.stop()
        set_appliance(appliance.https_url, appliance.key, appliance.fingerprint)
        plugins.start()

    def saved(self):
        with open(f"{CONFIG_PATH}plugin_cutout.json") as file:
            settings = json.load(file)["appliance"]
        return settings["base_url"], settings["api_key"], settings["fingerprint"]

    def assert_appliances_cutout(self):
        before = appliance.images_charged()
        steps.REMOVE_CACHE.clear()
        with self.assertNoLogs(PLUGIN, "WARNING"):
            cutout = remove_background()
        self.assertNotEqual(cutout.getchannel("A").tobytes(), own_alpha.tobytes(), "not the booth's own model")
        self.assertNotEqual(appliance.images_charged(), before, "the appliance served it")

    def assert_unpaired(self):
        super().assert_unpaired()
        steps.REMOVE_CACHE.clear()
        self.assert_programs_own_result("not paired with an appliance yet")


if __name__ == "__main__":
    unittest.main(verbosity=2)
