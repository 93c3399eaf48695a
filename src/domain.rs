//! Values parsed at the edge into types that cannot hold bad ones: account
//! and plan names, API keys, the `size` and `type` fields, the billing month.

use crate::secrets::{random_hex, sha256_hex};
use std::fmt;

/// The `size` form field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeMode {
    /// The input's resolution, scaled down to 25 MP when larger.
    Auto,
    /// At most 0.25 MP, aspect kept, never upscaled.
    Preview,
    /// At most 1.5 MP (remove.bg's `medium`).
    Medium,
    /// At most 4 MP (remove.bg's `hd`).
    Hd,
    /// The input's resolution; above 25 MP is refused.
    Full,
}

impl SizeMode {
    pub fn parse(s: &str) -> Option<SizeMode> {
        match s {
            "auto" => Some(SizeMode::Auto),
            "preview" | "small" | "regular" => Some(SizeMode::Preview),
            "medium" => Some(SizeMode::Medium),
            "hd" => Some(SizeMode::Hd),
            "full" | "4k" => Some(SizeMode::Full),
            // remove.bg's largest: here, the most this appliance gives.
            "50MP" => Some(SizeMode::Auto),
            _ => None,
        }
    }
}

/// The `channels` form field (remove.bg's): the cut-out, or its matte alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Channels {
    /// The photo's colours with the matte as alpha: an RGBA PNG.
    #[default]
    Rgba,
    /// The matte alone, the RGBA cut-out's alpha: a grey PNG.
    Alpha,
}

impl Channels {
    pub fn parse(s: &str) -> Option<Channels> {
        match s {
            "rgba" => Some(Channels::Rgba),
            "alpha" => Some(Channels::Alpha),
            _ => None,
        }
    }
}

/// The `type` form field: which model makes the matte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectType {
    /// The configured default model.
    Auto,
    /// People: the manifest's `person` model (MODNet, soft hair edges).
    Person,
    /// Anything: the manifest's `general` model (IS-Net).
    General,
}

impl SubjectType {
    pub fn parse(s: &str) -> Option<SubjectType> {
        match s {
            "auto" => Some(SubjectType::Auto),
            "person" => Some(SubjectType::Person),
            // remove.bg's other kinds: whole objects, IS-Net's work.
            "general" => Some(SubjectType::General),
            kind if REMOVE_BG_TYPES.contains(&kind) => Some(SubjectType::General),
            _ => None,
        }
    }
}

/// remove.bg's output options this appliance offers (`http::options`
/// reads them, `imaging::finish` applies them). All are optional; absent,
/// the answer is the plain PNG cut-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionField {
    Format,
    BgColor,
    BgImageFile,
    BgImageUrl,
    Crop,
    CropMargin,
    Roi,
    Scale,
    Position,
    AddShadow,
    ShadowType,
    ShadowOpacity,
    Semitransparency,
    Backdrop,
}

impl OptionField {
    pub const ALL: [OptionField; 14] = [
        OptionField::Format,
        OptionField::BgColor,
        OptionField::BgImageFile,
        OptionField::BgImageUrl,
        OptionField::Crop,
        OptionField::CropMargin,
        OptionField::Roi,
        OptionField::Scale,
        OptionField::Position,
        OptionField::AddShadow,
        OptionField::ShadowType,
        OptionField::ShadowOpacity,
        OptionField::Semitransparency,
        OptionField::Backdrop,
    ];

    /// The form field's name.
    pub fn name(self) -> &'static str {
        self.describe().0
    }

    /// What it takes, for the docs page and the OpenAPI document.
    pub fn takes(self) -> &'static str {
        self.describe().1
    }

    fn describe(self) -> (&'static str, &'static str) {
        match self {
            OptionField::Format => ("format", "png (the default), jpg, webp (lossless), zip (color.jpg, the colours, and alpha.png, the matte, to compose), or auto: a PNG where the result has transparency, else a JPEG. A JPEG of a cut-out without a background is on white."),
            OptionField::BgColor => ("bg_color", "A colour behind the subject: hex with or without # (81d4fa, fff, 81d4fa80 with alpha) or a CSS colour name (green). Not with bg_image_file or bg_image_url."),
            OptionField::BgImageFile => ("bg_image_file", "An image behind the subject, a second file part (JPG, PNG or WEBP, at most 25 megapixels; the whole body stays within its limit): scaled to cover the result and cut to it, centred, never stretched."),
            OptionField::BgImageUrl => ("bg_image_url", "The URL (http or https) of such an image instead, fetched by the appliance only from the networks its operator lists in [fetch] allow; see image_url."),
            OptionField::Crop => ("crop", "true: the result is cut to the subject's box (its pixels at least 3% opaque)."),
            OptionField::CropMargin => ("crop_margin", "With crop=true, room around the subject: 1, 2 or 4 lengths in CSS order (top, right, bottom, left), in px or % of the subject's size, at most 500px or 50% a side; past the photo it is transparent."),
            OptionField::Roi => ("roi", "x1 y1 x2 y2 in px of the uploaded photo or % of its size: only what lies inside can be the subject."),
            OptionField::Scale => ("scale", "original (the default) or 10% to 100%: the subject fitted into that share of the result, aspect kept, centred unless position says otherwise."),
            OptionField::AddShadow => ("add_shadow", "false (the default) or true: a shadow behind the subject, black, softened, part of the result's transparency (and of its matte)."),
            OptionField::ShadowType => ("shadow_type", "With add_shadow=true: 3D or car (the default), the silhouette laid flat where the subject meets the ground; drop, the silhouette behind it, down and to the right. Without add_shadow it changes nothing, as at remove.bg."),
            OptionField::ShadowOpacity => ("shadow_opacity", "With add_shadow=true, 0 to 100 (default 50): how dark the shadow is at its darkest."),
            OptionField::Semitransparency => ("semitransparency", "true (the default) or false: for the car kinds of type, whatever the car encloses (its windows) is made opaque, as remove.bg does; for any other type false changes nothing, as at remove.bg."),
            OptionField::Backdrop => ("backdrop", "The name of one of the appliance's backdrops (GET /api/backdrops lists them; the operator keeps them on the dashboard's Backdrops page): the subject on its background, under its overlay, both scaled to cover the result and cut to it, centred. Not with bg_color, bg_image_file or bg_image_url, nor with channels=alpha."),
            OptionField::Position => ("position", "original (the default), center, or one or two percentages (horizontal, vertical): where the subject goes in the room the result leaves beside it, 0% left or top, 100% right or bottom."),
        }
    }
}

/// Options remove.bg documents that change nothing this appliance makes,
/// with the values taken: remove.bg's defaults, and the values for which
/// remove.bg itself would change nothing on most photos (`type_level` only
/// names the kind in `X-Type`, which the appliance does not classify). Any
/// other value is refused by name, never served as if it were not there.
pub const REMOVE_BG_OPTIONS: &[(&str, &[&str])] = &[("type_level", &["none", "1", "2", "latest"])];

/// remove.bg's kinds of subject (its `X-Type` values), each taken as a
/// `type`: `person` is MODNet's, every other kind IS-Net's.
pub const REMOVE_BG_TYPES: &[&str] = &[
    "person",
    "product",
    "animal",
    "car",
    "car_interior",
    "car_part",
    "transportation",
    "graphics",
    "other",
];

/// An account's name: 1 to 64 of `A-Z a-z 0-9 . _ -`, so it is safe in logs,
/// URLs and shell lines without quoting. Not `.` or `..`, which are no
/// path segment (the dashboard's `/admin/accounts/NAME` could not reach
/// them). `admin` is the operator's login name, so no account may take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountName(String);

impl AccountName {
    pub fn parse(s: &str) -> Option<AccountName> {
        let ok = (1..=MAX_NAME_BYTES).contains(&s.len())
            && !matches!(s, "." | "..")
            && !s.eq_ignore_ascii_case(ADMIN_LOGIN)
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        ok.then(|| AccountName(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AccountName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub const ACCOUNT_NAME_RULE: &str =
    "Account names are 1 to 64 of A-Z a-z 0-9 . _ -, and may not be \".\", \"..\" or \"admin\".";

/// The longest account name, in bytes (all ASCII).
pub const MAX_NAME_BYTES: usize = 64;

/// A key's label, as the key list shows it: at most 64 characters on one
/// line, and none that reorders the text around it. A bidi override
/// (U+202E) in a label would make the list show other text than it holds,
/// e.g. a label that reads as another key's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLabel(String);

const MAX_LABEL_CHARS: usize = 64;

pub const KEY_LABEL_RULE: &str = "Use at most 64 characters, on one line, \
    without control or text-direction characters.";

impl KeyLabel {
    /// `s` with surrounding white space removed, if it follows the rule.
    pub fn parse(s: &str) -> Option<KeyLabel> {
        let s = s.trim();
        let forbidden = |c: char| {
            c.is_control()
                || matches!(
                    c,
                    '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{2028}' | '\u{2029}'
                )
                || ('\u{202A}'..='\u{202E}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
        };
        let ok = s.chars().count() <= MAX_LABEL_CHARS && !s.chars().any(forbidden);
        ok.then(|| KeyLabel(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The name the operator signs in to the dashboard with.
pub const ADMIN_LOGIN: &str = "admin";

/// A secret API key: `ck_` and 40 hex digits (160 bits from the OS RNG).
/// Only its SHA-256 is stored; its first 12 characters are a non-secret
/// prefix for listing. No `Display`, so it cannot end up in a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

const KEY_TAG: &str = "ck_";
const KEY_HEX_DIGITS: usize = 40;
pub const KEY_PREFIX_LEN: usize = 12;

impl ApiKey {
    pub fn generate() -> ApiKey {
        ApiKey(format!("{KEY_TAG}{}", random_hex(KEY_HEX_DIGITS / 2)))
    }

    /// Accepts only the shape `generate` makes; anything else cannot be a key.
    pub fn parse(s: &str) -> Option<ApiKey> {
        let digits = s.strip_prefix(KEY_TAG)?;
        let ok = digits.len() == KEY_HEX_DIGITS
            && digits
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| ApiKey(s.to_owned()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn prefix(&self) -> &str {
        &self.0[..KEY_PREFIX_LEN]
    }

    pub fn hash(&self) -> String {
        sha256_hex(&self.0)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({}…)", self.prefix())
    }
}

/// A UTC calendar month: the period a monthly quota counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Month {
    year: i64,
    month: u32,
}

impl Month {
    pub fn of_unix(secs: i64) -> Month {
        let (year, month, _) = civil_from_days(secs.div_euclid(86_400));
        Month { year, month }
    }

    pub fn next(self) -> Month {
        if self.month == 12 {
            Month {
                year: self.year + 1,
                month: 1,
            }
        } else {
            Month {
                year: self.year,
                month: self.month + 1,
            }
        }
    }

    /// Unix time of this month's first second.
    pub fn start_unix(self) -> i64 {
        days_from_civil(self.year, self.month, 1) * 86_400
    }
}

impl fmt::Display for Month {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

/// A Unix time as a UTC date, `YYYY-MM-DD`.
pub fn utc_date(unix: i64) -> String {
    let (y, m, d) = civil_from_days(unix.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// A Unix time as `YYYY-MM-DD HH:MM UTC`.
pub fn utc_datetime(unix: i64) -> String {
    let secs = unix.rem_euclid(86_400);
    format!(
        "{} {:02}:{:02} UTC",
        utc_date(unix),
        secs / 3600,
        secs % 3600 / 60
    )
}

// Howard Hinnant's days <-> civil date algorithms (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_kind_remove_bg_reports_is_a_type_person_modnets_the_rest_isnets() {
        for kind in REMOVE_BG_TYPES {
            let expected = match *kind {
                "person" => SubjectType::Person,
                _ => SubjectType::General,
            };
            assert_eq!(SubjectType::parse(kind), Some(expected), "{kind}");
        }
        assert_eq!(SubjectType::parse("truck"), None);
    }

    #[test]
    fn months_roll_over_at_utc_midnight_on_the_first() {
        // 2026-01-31T23:59:59Z and 2026-02-01T00:00:00Z
        assert_eq!(Month::of_unix(1_769_903_999).to_string(), "2026-01");
        assert_eq!(Month::of_unix(1_769_904_000).to_string(), "2026-02");
        assert_eq!(
            Month::of_unix(1_769_903_999).next().start_unix(),
            1_769_904_000
        );
        assert_eq!(Month::of_unix(1_798_761_600).to_string(), "2027-01");
        assert_eq!(Month::of_unix(1_796_083_200).next().to_string(), "2027-01");
    }

    #[test]
    fn dates_are_utc() {
        assert_eq!(utc_date(1_769_903_999), "2026-01-31");
        assert_eq!(utc_datetime(1_769_903_999), "2026-01-31 23:59 UTC");
        assert_eq!(utc_datetime(1_769_904_000), "2026-02-01 00:00 UTC");
    }

    #[test]
    fn no_account_may_be_named_like_the_operator_login() {
        assert!(AccountName::parse("admin").is_none());
        assert!(AccountName::parse("Admin").is_none());
        assert!(AccountName::parse("admin2").is_some());
    }

    #[test]
    fn no_account_may_be_named_like_a_path_step() {
        assert!(AccountName::parse(".").is_none());
        assert!(AccountName::parse("..").is_none());
        assert!(AccountName::parse("...").is_some());
        assert!(AccountName::parse(".booth").is_some());
        assert!(ACCOUNT_NAME_RULE.contains("\"..\""));
    }

    #[test]
    fn labels_refuse_controls_text_direction_marks_and_line_separators() {
        for c in [
            '\n', '\u{7f}', '\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202E}', '\u{2066}',
            '\u{2069}', '\u{2028}', '\u{2029}',
        ] {
            assert_eq!(KeyLabel::parse(&format!("front{c}door")), None, "{c:?}");
        }
        assert_eq!(
            KeyLabel::parse("  Booth <2> ü 写真 ").unwrap().as_str(),
            "Booth <2> ü 写真"
        );
        assert!(KeyLabel::parse(&"é".repeat(64)).is_some());
        assert!(KeyLabel::parse(&"é".repeat(65)).is_none());
    }

    #[test]
    fn a_generated_key_parses_and_its_prefix_is_twelve_characters() {
        let key = ApiKey::generate();
        assert_eq!(ApiKey::parse(key.expose()), Some(key.clone()));
        assert_eq!(key.prefix().len(), 12);
        assert_ne!(key, ApiKey::generate());
        assert!(!format!("{key:?}").contains(key.expose()));
    }

    #[test]
    fn size_modes_parse_only_their_three_names() {
        assert_eq!(SizeMode::parse("auto"), Some(SizeMode::Auto));
        assert_eq!(SizeMode::parse("preview"), Some(SizeMode::Preview));
        assert_eq!(SizeMode::parse("full"), Some(SizeMode::Full));
        assert_eq!(SizeMode::parse("Full"), None);
        assert_eq!(SizeMode::parse(""), None);
        assert_eq!(SubjectType::parse("auto"), Some(SubjectType::Auto));
        assert_eq!(SubjectType::parse("person"), Some(SubjectType::Person));
        assert_eq!(SubjectType::parse("general"), Some(SubjectType::General));
        assert_eq!(SubjectType::parse("Person"), None);
        assert_eq!(SubjectType::parse("car"), Some(SubjectType::General));
        assert_eq!(SubjectType::parse("truck"), None);
        assert_eq!(SizeMode::parse("hd"), Some(SizeMode::Hd));
        assert_eq!(SizeMode::parse("50mp"), None);
    }

    proptest! {
        #[test]
        fn every_second_lies_within_its_month(secs in -2_000_000_000i64..8_000_000_000) {
            let m = Month::of_unix(secs);
            prop_assert!(m.start_unix() <= secs && secs < m.next().start_unix());
        }

        #[test]
        fn key_parse_accepts_only_the_generated_shape(s in "\\PC{0,60}") {
            if let Some(k) = ApiKey::parse(&s) {
                prop_assert_eq!(k.expose().len(), 43);
                prop_assert!(k.expose().starts_with("ck_"));
            }
        }

        #[test]
        fn account_names_are_shell_and_url_safe(s in "\\PC{0,80}") {
            if let Some(n) = AccountName::parse(&s) {
                prop_assert!(n.as_str().bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
                prop_assert!(n.as_str() != "." && n.as_str() != "..");
            }
        }

        #[test]
        fn a_label_is_one_line_that_keeps_its_direction(s in "\\PC{0,80}") {
            if let Some(l) = KeyLabel::parse(&s) {
                let one_line = !l.as_str().contains(['\u{202E}', '\u{2028}', '\n']);
                prop_assert!(one_line);
                prop_assert!(l.as_str().chars().count() <= 64);
            }
        }
    }
}
