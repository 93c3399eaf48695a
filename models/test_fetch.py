#!/usr/bin/env python3
"""models/fetch.py's cache of the files it made: a second checkout on the
machine takes them from there, makes nothing again, and never takes a
corrupt one. `make test-models` runs it (standard library only).

    python3 models/test_fetch.py
"""
import hashlib, tempfile, unittest
from pathlib import Path

import fetch


class Made(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name)
        self.cache = self.root / "cache"
        self.bytes = b"a quantised model" * 1000
        self.sha256 = hashlib.sha256(self.bytes).hexdigest()
        self.made = 0

    def tearDown(self):
        self.dir.cleanup()

    def blocks(self):
        """What a costly step makes, counted when it is really made."""
        self.made += 1
        yield self.bytes

    def install(self, checkout):
        dest = self.root / checkout / "model.onnx"
        dest.parent.mkdir()
        fetch.install(dest, self.blocks(), self.sha256, self.cache)
        self.assertEqual(dest.read_bytes(), self.bytes)

    def test_a_second_checkout_makes_nothing_again(self):
        self.install("first")
        self.install("second")
        self.assertEqual(self.made, 1)

    def test_a_corrupt_file_in_the_cache_is_made_again_and_replaced(self):
        self.install("first")
        kept = self.cache / "made" / self.sha256
        kept.write_bytes(b"not the model")
        self.install("second")
        self.assertEqual(self.made, 2)
        self.assertEqual(kept.read_bytes(), self.bytes)

    def test_bytes_other_than_the_pinned_ones_are_neither_installed_nor_kept(self):
        dest = self.root / "model.onnx"
        with self.assertRaises(fetch.FetchError):
            fetch.install(dest, iter([b"other bytes"]), self.sha256, self.cache)
        self.assertFalse(dest.exists())
        self.assertFalse((self.cache / "made" / self.sha256).exists())

    def test_files_the_manifest_no_longer_names_are_forgotten(self):
        self.install("first")
        old = self.cache / "made" / ("0" * 64)
        old.write_bytes(b"an older model")
        fetch.forget_unlisted(self.cache / "made", f'sha256 = "{self.sha256}"')
        self.assertFalse(old.exists())
        self.assertTrue((self.cache / "made" / self.sha256).exists())


if __name__ == "__main__":
    unittest.main()
