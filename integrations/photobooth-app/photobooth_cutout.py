"""photobooth-app 9 plugin: its background removal runs on a cutout appliance.

photobooth-app removes backgrounds in its media-processing pipeline, in
`RemovebgStep` (photobooth/services/mediaprocessing/steps/image.py): the step
asks a model session, kept in that module's `rembg_session`, for the photo's
matte, and composes the cut-out itself. Its plugin hooks (pluggy) have no
background-removal hook (the filter hook runs after the background has been
replaced), so on `start` this plugin hands the step its own session: when
enabled, the matte comes from the appliance (`POST /api/remove-bg`, `size=full`,
`channels=alpha`: the cut-out's alpha, without sending its colours back over
the LAN; the photo sent at most 2048 pixels on its longest side, the matte
enlarged to its size here), and everything else stays the step's.

On any failure (appliance down, hung, refused key, another certificate,
an answer that is not a matte of the photo's size) the matte comes from
photobooth-app's own model, as without the plugin, and one line is logged.
An appliance that is gone costs a photo a second at most, once: the shared
`cutout_booth.Link` remembers it, and checks again, backing off, until it
is back. One that hangs once it has the request (after its headers, in its
body, before its answer) costs two seconds: the cut-out runs in a thread
while `Link.wait` checks the appliance each second.

photobooth-app's plugin hooks hand a plugin no capture (`sm_on_exit_state`
gets the states and the media type, not the job or its files), so each
photo is sent when the pipeline removes its background, after the last
capture of a collage, not during the countdown as the pibooth plugin does.

Backdrops: photobooth-app composites the cut-out itself, onto the files its
actions' settings name, so the plugin keeps a copy of the appliance's
backdrops (the operator's, shared by every booth) in
`userdata/cutout-backdrops/`, checked every minute: `<id>.jpg` (or .png,
.webp) for an action's background image, `<id>-overlay.png` for its frame.

The admin UI's dashboard shows the plugin's stats (`get_stats`): the
appliance, its state (pairing, not answering, this month's cut-outs nearly
or all spent), the cut-outs left, the backdrops kept.

Settings live in photobooth-app's configuration, as for its own plugins:
`config/plugin_cutout.json`, edited in the admin UI under this plugin's name.
Enabled with no address and no key, the plugin finds the appliance on the
LAN and pairs with it when it starts (cutout_booth), in a thread of its own:
the code to approve on the appliance is logged, and once approved the
address, key and certificate pin are saved into those settings. Until then
photos are cut out by photobooth-app's own model, as on a failure.
"""

from __future__ import annotations

import io
import logging
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import cutout_booth
from PIL import Image
from pydantic import BaseModel, Field, SecretStr, SerializationInfo, field_serializer
from pydantic_settings import SettingsConfigDict

from photobooth import CONFIG_PATH, USERDATA_PATH
from photobooth.models.genericstats import GenericStats, SubStats
from photobooth.plugins import hookimpl
from photobooth.plugins.base_plugin import BasePlugin
from photobooth.services.config.baseconfig import BaseConfig
from photobooth.services.config.serializer import contextual_serializer_password

logger = logging.getLogger(__name__)


class Appliance(BaseModel):
    enabled: bool = Field(default=False, description="Remove backgrounds on the cutout appliance instead of on this booth.")
    base_url: str = Field(
        default="",
        description="The appliance's address, e.g. https://photobooth.local:8443. "
        "Empty, with no API key: found on the LAN and paired when photobooth-app starts (the code to approve is in its log).",
    )
    api_key: SecretStr = Field(default=SecretStr(""), description="An API key from the appliance's dashboard (pairing fills it in).")
    fingerprint: str = Field(
        default="",
        description="SHA-256 fingerprint of the appliance's certificate (`cutout tls fingerprint`), pinned. "
        "Empty: the certificate is checked against the system's CAs.",
    )
    timeout_seconds: float = Field(default=30, description="How long to wait for a cut-out before the booth removes the background itself.")
    longest_side_sent: int = Field(
        default=2048,
        description="Longest side, in pixels, of a photo as sent to the appliance (its matte is enlarged to the photo's size); 0: the photo as taken.",
    )
    keep_backdrops: bool = Field(
        default=True,
        description="Keep a copy of the appliance's backdrops in userdata/cutout-backdrops/ (checked every minute), "
        "where an action's background image (<id>.jpg) and frame (<id>-overlay.png) can choose them.",
    )
    booth_name: str = Field(default_factory=socket.gethostname, description="This booth's name, shown on the appliance when it asks to pair.")
    appliance_name: str = Field(
        default="",
        description="The appliance to pair with, by its name on the LAN; empty: the only one found.",
        # The names the last search found, each time the admin UI asks for the form.
        json_schema_extra=lambda schema: schema.update(description=schema["description"] + found_on_the_lan()),
    )

    @field_serializer("api_key")
    def contextual_serializer(self, value, info: SerializationInfo):
        return contextual_serializer_password(value, info)


class CutoutConfig(BaseConfig):
    model_config = SettingsConfigDict(
        title="Cutout appliance",
        json_file=f"{CONFIG_PATH}plugin_cutout.json",
        env_prefix="cutout-",
    )

    appliance: Appliance = Appliance()


class PhotoboothCutout(BasePlugin[CutoutConfig]):
    def __init__(self):
        super().__init__()
        self._config: CutoutConfig = CutoutConfig()
        self._stop_pairing = None
        self._stop_keeping = threading.Event()
        self._kept: list[str] = []

    @hookimpl
    def start(self):
        # Imported here, not at the top: photobooth-app imports plugins while
        # its plugin manager loads, and the steps module asks that manager
        # for the plugins' filters when it is first imported (after the
        # configuration, which it imports in a cycle).
        from photobooth.appconfig import appconfig  # noqa: F401
        from photobooth.services.mediaprocessing.steps import image as steps

        # Installed even when disabled, so that enabling it in the admin UI
        # takes effect at the next photo.
        steps.rembg_session = ApplianceSession(self._config)
        self._kept = []
        settings = self._config.appliance
        logger.info(f"background removal: {'the cutout appliance at ' + (settings.base_url or '(not paired yet)') if settings.enabled else 'this booth (cutout appliance disabled)'}")
        if settings.enabled and not settings.base_url and not settings.api_key.get_secret_value():
            self._stop_pairing = cutout_booth.find_and_pair(
                settings.booth_name,
                lambda: self._config.appliance.appliance_name,
                "appliance_name in the plugin's settings",
                logger,
                self._save_pairing,
            )
        self._stop_keeping = threading.Event()
        threading.Thread(target=self._keep_backdrops, args=(self._stop_keeping,), name="cutout-backdrops", daemon=True).start()

    def _keep_backdrops(self, stop: threading.Event):
        while True:
            settings = self._config.appliance  # read each time: the admin UI reloads it in place
            if settings.enabled and settings.keep_backdrops and settings.base_url:
                LINK.use(settings.base_url, settings.api_key.get_secret_value(), settings.fingerprint, settings.timeout_seconds)
                try:
                    if not LINK.gone():
                        for name in cutout_booth.keep_backdrops(LINK, BACKDROPS_FOLDER):
                            logger.info(f"backdrop {name!r} from the cutout appliance kept in {BACKDROPS_FOLDER}: an action's background image and frame can choose it")
                        ids = (os.path.splitext(name)[0] for name in os.listdir(BACKDROPS_FOLDER))
                        self._kept = sorted(i for i in ids if not i.endswith("-overlay") and not i.endswith(".partial"))
                except (cutout_booth.ApplianceError, OSError) as exc:
                    logger.warning(f"could not copy the cutout appliance's backdrops into {BACKDROPS_FOLDER}: {exc}")
            if stop.wait(BACKDROPS_EVERY_SECONDS):
                return

    def _save_pairing(self, paired: cutout_booth.Paired):
        settings = self._config.appliance  # the one in use now: the admin UI reloads it in place
        settings.base_url, settings.api_key, settings.fingerprint = paired.base_url, SecretStr(paired.api_key), paired.fingerprint
        self._config.persist()

    @hookimpl
    def get_stats(self) -> GenericStats | None:
        settings = self._config.appliance
        if not settings.enabled:
            return None  # as photobooth-app's own plugins: no empty panel
        stats = [
            SubStats("Appliance", settings.base_url or "not paired yet"),
            SubStats("State", cutout_booth.STATUS.line(LINK) or "no problem seen"),
        ]
        if LINK.quota:
            left, limit = LINK.quota
            stats.append(SubStats("Cut-outs left this month", f"{left} of {limit}"))
        stats.append(SubStats("Backdrops kept", ", ".join(self._kept) or "none"))
        return GenericStats(id="hook-plugin-cutout", name="Cutout appliance", stats=stats)

    @hookimpl
    def stop(self):
        from photobooth.services.mediaprocessing.steps import image as steps

        self._stop_keeping.set()
        if self._stop_pairing:
            self._stop_pairing.set()
            self._stop_pairing = None
        if isinstance(steps.rembg_session, ApplianceSession):
            steps.rembg_session = None


class ApplianceSession:
    """What `RemovebgStep` asks for a matte: the appliance's, or else the
    program's own model's. Named after the model the step is configured
    with, so the step keeps it."""

    def __init__(self, config: CutoutConfig):
        self._config = config  # read at each call: the admin UI reloads it in place
        self._own = None

    def name(self) -> str:
        from photobooth.appconfig import appconfig

        return appconfig.mediaprocessing.remove_background_model

    def predict(self, img: Image.Image, *args, **kwargs) -> Image.Image:
        settings = self._config.appliance
        if not settings.enabled:
            return self._own_session().predict(img, *args, **kwargs)
        try:
            return matte_from_appliance(img, settings)
        except Exception as exc:
            why = exc if isinstance(exc, cutout_booth.ApplianceError) else f"{type(exc).__name__}: {exc}"
            logger.warning(f"cutout appliance at {settings.base_url or '(no address set)'} failed ({why}): removing the background on this booth with {self.name()}")
        return self._own_session().predict(img, *args, **kwargs)

    def _own_session(self):
        from photobooth.utils.rembg.session_factory import new_session

        if self._own is None or self._own.name() != self.name():
            self._own = new_session(model_name=self.name())
        return self._own


LINK = cutout_booth.Link()
# A hung request holds its thread until its timeout: the next photo's goes on another.
SENDER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="cutout")
BACKDROPS_FOLDER = os.path.join(USERDATA_PATH, "cutout-backdrops")
BACKDROPS_EVERY_SECONDS = 60
FIELDS = {"size": "full", "channels": "alpha"}


def matte_from_appliance(img: Image.Image, settings: Appliance) -> Image.Image:
    """The appliance's matte of `img`, at `img`'s size, or an exception."""
    if not settings.base_url:
        raise cutout_booth.ApplianceError("not paired with an appliance yet")
    LINK.use(settings.base_url, settings.api_key.get_secret_value(), settings.fingerprint, settings.timeout_seconds)
    sent = img.convert("RGB")
    if 0 < settings.longest_side_sent < max(sent.size):
        sent.thumbnail((settings.longest_side_sent,) * 2, Image.Resampling.BILINEAR, reducing_gap=2.0)
    photo = io.BytesIO()
    sent.save(photo, format="JPEG", quality=90)
    body = LINK.wait(SENDER.submit(LINK.cut_out, photo.getvalue(), FIELDS)).body
    try:
        matte = Image.open(io.BytesIO(body))
        matte.load()
    except Exception as exc:
        raise cutout_booth.ApplianceError("the answer is not an image") from exc
    if matte.format != "PNG" or matte.mode != "L" or matte.size != sent.size:
        raise cutout_booth.ApplianceError(f"the answer is a {matte.mode} {matte.format} of {matte.size}, not a grey PNG of the {sent.size} sent")
    return matte if matte.size == img.size else matte.resize(img.size, Image.Resampling.BILINEAR)


def found_on_the_lan() -> str:
    found = cutout_booth.last_found
    return f" Found on the LAN: {', '.join(f'{f.name} ({f.addresses[0]})' for f in found)}." if found else ""
