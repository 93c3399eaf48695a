"""remove.bg's published Python clients from PyPI, unchanged but for the
address they post to, against a real appliance: their cut-outs come back,
the fields they send on every call are taken, a photo by URL is fetched from
a web server the operator allows, and the appliance's refusals raise the
clients' own typed errors (403 for the key, 400 for the file or a
parameter), each costing nothing.

usage: python test_removebg_clients.py   (in a venv: `make test-clients`)
"""

import base64
import json
import os
import sys
import tempfile
import threading
import unittest
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integrations"))
from appliance import PHOTO, Appliance  # noqa: E402

import rembgpy.bg  # noqa: E402
import remove_bg_api  # noqa: E402
import removebg.removebg  # noqa: E402


def setUpModule():
    global appliance, photos, out
    # The booth's own web server, which the operator allows.
    os.environ["CUTOUT_FETCH_ALLOW"] = "127.0.0.1"
    appliance = Appliance().__enter__()
    handler = partial(SimpleHTTPRequestHandler, directory=str(PHOTO.parent))
    handler.log_message = lambda *_: None
    photos = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=photos.serve_forever, daemon=True).start()
    out = Path(tempfile.mkdtemp(prefix="cutout-clients-"))
    # The one change to each client: the address it posts to.
    remove_bg_api.API_URL = f"{appliance.http_url}/v1.0"
    rembgpy.bg.base_url = f"{appliance.http_url}/v1.0/removebg"
    removebg.removebg.API_ENDPOINT = f"{appliance.http_url}/v1.0/removebg"


def tearDownModule():
    photos.shutdown()
    photos.server_close()
    appliance.__exit__()


def images_used() -> int:
    request = urllib.request.Request(f"{appliance.http_url}/v1.0/account", headers={"X-Api-Key": appliance.key})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)["data"]["attributes"]["used"]


def is_cut_out(png: bytes) -> bool:
    """A PNG of RGBA pixels (colour type 6): a cut-out, not the photo back."""
    return png[:8] == b"\x89PNG\r\n\x1a\n" and png[25] == 6


class RemoveBgApi(unittest.TestCase):
    """remove-bg-api 0.2.1: typed errors by status."""

    def test_a_cut_out_and_the_balance_it_keeps(self):
        client = remove_bg_api.RemoveBg(appliance.key)  # reads /v1.0/account
        before = client.account.balance()
        png = client.remove_bg_file(str(PHOTO), size="preview")
        self.assertTrue(is_cut_out(png))
        self.assertEqual(client.account.balance(), before - 1)
        client.account.refresh_balance()
        self.assertEqual(client.account.balance(), before - 1)

    def test_a_wrong_key_raises_its_authentication_error(self):
        with self.assertRaises(remove_bg_api.Errors.ApiErrorCode403):
            remove_bg_api.RemoveBg("ck_" + "0" * 40)

    def test_a_file_it_cannot_use_or_a_bad_parameter_raise_its_invalid_parameters_error(self):
        client = remove_bg_api.RemoveBg(appliance.key)
        used = images_used()
        with self.assertRaises(remove_bg_api.Errors.ApiErrorCode400):
            client.remove_bg_bytes(b"GIF89a not a photo")
        with self.assertRaises(remove_bg_api.Errors.ApiErrorCode400):
            client.remove_bg_file(str(PHOTO), size="huge")
        self.assertEqual(images_used(), used)


class Rembgpy(unittest.TestCase):
    """rembgpy 1.0.1: every option on every call, type_level among them; its
    remove_img takes a URL (a second definition replaces the one for files)."""

    def test_every_option_it_sends_is_taken_by_url_and_in_base64(self):
        client = rembgpy.bg.RemBg(appliance.key, str(out / "rembgpy.log"))
        url = f"http://127.0.0.1:{photos.server_port}/{PHOTO.name}"
        photo_b64 = base64.b64encode(PHOTO.read_bytes()).decode()
        for kind in ["auto", "person", "animal", "car_part", "graphics"]:
            with self.subTest(kind):
                by_url, in_b64 = out / f"rembgpy-{kind}-url.png", out / f"rembgpy-{kind}-b64.png"
                client.remove_img(url, size="preview", type=kind, nfn=str(by_url))
                client.remove_b64(photo_b64, size="preview", type=kind, nfn=str(in_b64))
                self.assertTrue(is_cut_out(by_url.read_bytes()))
                self.assertEqual(by_url.read_bytes(), in_b64.read_bytes())

    def test_a_wrong_key_is_403(self):
        client = rembgpy.bg.RemBg("ck_" + "0" * 40, str(out / "rembgpy.log"))
        with self.assertRaises(Exception) as refused:
            client.remove_b64(base64.b64encode(PHOTO.read_bytes()).decode(), nfn=str(out / "never.png"))
        self.assertEqual(refused.exception.response.status_code, 403)


class Removebg(unittest.TestCase):
    """removebg 0.04: a photo by its URL."""

    def test_a_photo_by_url_from_a_server_the_operator_allows(self):
        client = removebg.removebg.RemoveBg(appliance.key, str(out / "removebg.log"))
        result = out / "by-url.png"
        url = f"http://127.0.0.1:{photos.server_port}/{PHOTO.name}"
        used = images_used()
        client.remove_background_from_img_url(url, size="preview", new_file_name=str(result))
        self.assertTrue(is_cut_out(result.read_bytes()))
        self.assertEqual(images_used(), used + 1)
        with self.assertRaises(Exception) as refused:
            client.remove_background_from_img_url(f"http://127.0.0.1:{photos.server_port}/none.jpg",
                                                  new_file_name=str(out / "never.png"))
        self.assertEqual(refused.exception.response.status_code, 400)
        self.assertEqual(refused.exception.response.json()["errors"][0]["code"], "url_fetch_failed")
        self.assertEqual(images_used(), used + 1)


if __name__ == "__main__":
    unittest.main(verbosity=2, buffer=True)
