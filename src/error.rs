//! Every way an API call can fail, and the one place that names each: its
//! code, title and detail. Knows no HTTP: `http/respond.rs` gives each its
//! status.

pub use crate::domain::OptionField;
use crate::fetch::FetchError;

/// An API failure as the client sees it. `Internal` and `Unavailable` carry
/// the cause for the log only; the client gets an opaque detail.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no X-Api-Key header")]
    MissingApiKey,
    #[error("unknown or revoked API key")]
    InvalidApiKey,
    #[error("the account's plan has no API access")]
    PlanNotAllowed,
    #[error("the account is suspended")]
    AccountSuspended,
    /// The key came over plain HTTP, which the operator has switched off
    /// for the API; HTTPS is on `https_port`.
    #[error("API key over plain HTTP")]
    PlainHttpOff { https_port: u16 },
    #[error("monthly quota used up")]
    QuotaExceeded { limit: u32 },
    #[error("too many concurrent requests")]
    TooManyConcurrentRequests { limit: u32 },
    /// No image_file part; `found` names a file part sent under another name.
    #[error("no image_file part")]
    MissingImageFile { found: Option<String> },
    #[error("unknown field {0:?}")]
    UnknownField(String),
    #[error("image_file_b64 is not base64: {0}")]
    InvalidImageFileB64(String),
    /// A remove.bg option, at a value other than those in `offered`.
    #[error("remove.bg option {name}={value:?} not offered")]
    UnsupportedOption {
        name: &'static str,
        value: String,
        offered: &'static [&'static str],
    },
    #[error("invalid size")]
    InvalidSize,
    #[error("invalid type")]
    InvalidType,
    #[error("invalid channels")]
    InvalidChannels,
    /// One of remove.bg's output options (`format`, `crop`, ...) at a value
    /// it does not take; `why` says what it takes.
    #[error("invalid {}: {why}", field.name())]
    InvalidOption { field: OptionField, why: String },
    #[error("invalid image: {0}")]
    InvalidImage(String),
    /// Over `most` pixels: the API's 50 million, or fewer where the
    /// board's memory is small (`server.max_megapixels`).
    #[error("image too large: {width}x{height}")]
    ImageTooLarge { width: u32, height: u32, most: u64 },
    /// At its peak the cut-out would hold `need` bytes (`at` that step),
    /// more than the board's memory budget gives all requests at once.
    #[error("image too large for the memory budget: {width}x{height} needs {need} bytes")]
    NeedsTooMuchMemory {
        width: u32,
        height: u32,
        need: u64,
        at: &'static str,
        budget: u64,
    },
    #[error("resolution too high for size=full: {width}x{height}")]
    ResolutionTooHigh { width: u32, height: u32 },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// remove.bg's `image_url` or `bg_image_url` (`field`) not fetched.
    #[error("{field} not fetched: {why}")]
    Fetch {
        field: &'static str,
        why: crate::fetch::FetchError,
    },
    #[error("request body not received in time")]
    RequestTimeout,
    /// Sent by the HTTP layer itself (vendor/tiny_http, patch 6): the
    /// request never reaches the application.
    #[error("request head too large")]
    HeaderTooLarge,
    #[error("image_file larger than 10 MiB")]
    FileTooLarge,
    #[error("not a JPEG, PNG or WEBP")]
    UnsupportedImageFormat,
    #[error("not found")]
    NotFound,
    #[error("method not allowed")]
    MethodNotAllowed { allow: &'static str },
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// The client hung up before its answer was written (before its model
    /// ran, nothing ran): nothing was charged, and no answer can reach it
    /// (the log's and /metrics' 499, nginx's status for it).
    #[error("the client closed the connection")]
    ClientGone,
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

/// Each output option's error code and title.
fn option_error(field: OptionField) -> (&'static str, &'static str) {
    match field {
        OptionField::Format => ("invalid_format", "Invalid format"),
        OptionField::BgColor => ("invalid_bg_color", "Invalid bg_color"),
        OptionField::BgImageFile => ("invalid_bg_image_file", "Invalid bg_image_file"),
        OptionField::BgImageUrl => ("invalid_bg_image_url", "Invalid bg_image_url"),
        OptionField::Crop => ("invalid_crop", "Invalid crop"),
        OptionField::CropMargin => ("invalid_crop_margin", "Invalid crop_margin"),
        OptionField::Roi => ("invalid_roi", "Invalid roi"),
        OptionField::Scale => ("invalid_scale", "Invalid scale"),
        OptionField::Position => ("invalid_position", "Invalid position"),
        OptionField::AddShadow => ("invalid_add_shadow", "Invalid add_shadow"),
        OptionField::ShadowType => ("invalid_shadow_type", "Invalid shadow_type"),
        OptionField::ShadowOpacity => ("invalid_shadow_opacity", "Invalid shadow_opacity"),
        OptionField::Semitransparency => ("invalid_semitransparency", "Invalid semitransparency"),
        OptionField::Backdrop => ("invalid_backdrop", "Invalid backdrop"),
    }
}

pub const MAX_PIXELS_DECODED: u64 = crate::config::MAX_MEGAPIXELS * 1_000_000;
pub const MAX_PIXELS_OUTPUT: u64 = 25_000_000;
pub const MAX_IMAGE_BYTES: u64 = 10 * 1024 * 1024;

impl ApiError {
    /// The one place that decides each error's code and title.
    fn describe(&self) -> (&'static str, &'static str) {
        use ApiError::*;
        match self {
            MissingApiKey => ("missing_api_key", "Missing API key"),
            InvalidApiKey => ("invalid_api_key", "Invalid API key"),
            PlanNotAllowed => ("plan_not_allowed", "Plan has no API access"),
            AccountSuspended => ("account_suspended", "Account suspended"),
            PlainHttpOff { .. } => ("plain_http_off", "Plain HTTP off"),
            QuotaExceeded { .. } => ("quota_exceeded", "Monthly quota exceeded"),
            TooManyConcurrentRequests { .. } => (
                "too_many_concurrent_requests",
                "Too many concurrent requests",
            ),
            MissingImageFile { .. } => ("missing_image_file", "Missing image file"),
            UnknownField(_) => ("unknown_field", "Unknown field"),
            InvalidImageFileB64(_) => ("invalid_image_file_b64", "Invalid image_file_b64"),
            UnsupportedOption { .. } => ("unsupported_option", "Unsupported option"),
            InvalidSize => ("invalid_size", "Invalid size"),
            InvalidType => ("invalid_type", "Invalid type"),
            InvalidChannels => ("invalid_channels", "Invalid channels"),
            InvalidOption { field, .. } => option_error(*field),
            InvalidImage(_) => ("invalid_image", "Invalid image"),
            ImageTooLarge { .. } | NeedsTooMuchMemory { .. } => {
                ("image_too_large", "Image too large")
            }
            ResolutionTooHigh { .. } => ("resolution_too_high", "Resolution too high"),
            InvalidRequest(_) => ("invalid_request", "Invalid request"),
            Fetch {
                why: FetchError::NoneAllowed,
                ..
            } => ("url_fetch_off", "URL fetching off"),
            Fetch {
                why: FetchError::Refused { .. },
                ..
            } => ("url_not_allowed", "URL not allowed"),
            Fetch { .. } => ("url_fetch_failed", "URL fetch failed"),
            RequestTimeout => ("request_timeout", "Request timeout"),
            HeaderTooLarge => (
                "request_header_fields_too_large",
                "Request header fields too large",
            ),
            FileTooLarge => ("file_too_large", "File too large"),
            UnsupportedImageFormat => ("unsupported_image_format", "Unsupported image format"),
            NotFound => ("not_found", "Not found"),
            MethodNotAllowed { .. } => ("method_not_allowed", "Method not allowed"),
            Unavailable(_) => ("service_unavailable", "Service unavailable"),
            Internal(_) => ("internal_error", "Internal error"),
            ClientGone => ("client_closed_request", "Client closed request"),
        }
    }

    pub fn code(&self) -> &'static str {
        self.describe().0
    }

    pub fn title(&self) -> &'static str {
        self.describe().1
    }

    /// What the client is told; never the internal cause.
    pub fn detail(&self) -> String {
        use ApiError::*;
        match self {
            MissingApiKey => "Send your API key in the X-Api-Key header.".into(),
            InvalidApiKey => "The API key is not valid.".into(),
            PlanNotAllowed => "The account's plan does not include API access.".into(),
            PlainHttpOff { https_port } => format!(
                "This appliance takes API keys over HTTPS alone (port {https_port}). The key was \
                 sent across the network in clear: use HTTPS, and ask the operator for a new key."
            ),
            AccountSuspended => {
                "The account is suspended; ask the appliance's operator to re-enable it.".into()
            }
            QuotaExceeded { limit } => {
                format!("All {limit} images of this month are used; the count resets on the 1st (UTC).")
            }
            TooManyConcurrentRequests { limit } => {
                format!("The account's plan allows {limit} requests at a time; retry when one finishes.")
            }
            MissingImageFile { found: None } => "The multipart form has no image_file part.".into(),
            MissingImageFile { found: Some(name) } => format!(
                "The multipart form has a file part named {name:?} but none named image_file: name the image's part image_file."
            ),
            InvalidImageFileB64(why) => format!("image_file_b64 is not standard base64: {why}."),
            UnknownField(name) => format!(
                "The form has a field named {name:?}, which this API does not know; the fields it takes are in /docs."
            ),
            UnsupportedOption { name, value, offered } => format!(
                "{name}={value:?} is a remove.bg option value this appliance does not offer; it takes {name}={:?} (what it does anyway), or no {name} at all.",
                offered[0]
            ),
            InvalidSize => "size must be one of auto, preview, full (or remove.bg's small, regular, medium, hd, 4k, 50MP).".into(),
            InvalidChannels => "channels must be rgba (the cut-out) or alpha (its matte alone, in grey).".into(),
            InvalidOption { field, why } => format!("{}: {why}.", field.name()),
            InvalidType => "type must be one of auto, person, general, or one of remove.bg's kinds (product, animal, car, car_interior, car_part, transportation, graphics, other).".into(),
            InvalidImage(why) => format!("The image could not be decoded: {why}."),
            ImageTooLarge { width, height, most } if *most < MAX_PIXELS_DECODED => format!(
                "The image is {width}x{height}; this appliance takes at most {most} pixels, what its board's memory holds."
            ),
            ImageTooLarge { width, height, .. } => {
                format!("The image is {width}x{height}; at most {MAX_PIXELS_DECODED} pixels are accepted.")
            }
            NeedsTooMuchMemory { width, height, need, at, budget } => format!(
                "The image is {width}x{height}; with the options asked, its cut-out needs about {} MiB of memory at its peak ({at}), and this appliance gives its requests {} MiB of its board's memory (server.memory_budget_mib). A smaller photo, size=preview, or fewer options need less; /docs lists what each costs.",
                need.div_ceil(1 << 20),
                budget >> 20
            ),
            ResolutionTooHigh { width, height } => format!(
                "The image is {width}x{height}; size=full allows at most {MAX_PIXELS_OUTPUT} pixels. Use size=auto to scale it down."
            ),
            InvalidRequest(why) => format!("The request is not a valid form: {why}."),
            Fetch { field, why: FetchError::NoneAllowed } => format!(
                "{field} asks the appliance to fetch a file, which it does only from the networks its operator lists in the [fetch] allow setting (CUTOUT_FETCH_ALLOW), and none is listed; send the file itself instead."
            ),
            Fetch { field, why: why @ FetchError::Refused { .. } } => format!(
                "{field} was not fetched: {why}; the networks allowed are set in [fetch] allow."
            ),
            Fetch { field, why } => format!("{field} could not be fetched: {why}."),
            RequestTimeout => "The request body was not received in time.".into(),
            HeaderTooLarge => {
                "A request line or header line is over 8 KiB, the whole head over 32 KiB, or there are over 100 headers.".into()
            }
            FileTooLarge => format!(
                "image_file may be at most {MAX_IMAGE_BYTES} bytes, and the whole form (a bg_image_file with it, or the image in base64) about 13.4 MiB."
            ),
            UnsupportedImageFormat => "image_file must be a JPEG, PNG or WEBP image.".into(),
            NotFound => "There is nothing at this path.".into(),
            MethodNotAllowed { allow } => format!("This path accepts {allow}."),
            Unavailable(_) => "The service cannot take this request now; retry shortly.".into(),
            Internal(_) => "Something went wrong on the server; it has been logged.".into(),
            ClientGone => "The client closed the connection before its answer was written.".into(),
        }
    }

    /// The form field the error is about, where it is about one: JSON:API's
    /// `source.parameter`, so that a client can point at the field.
    pub fn field(&self) -> Option<&str> {
        use ApiError::*;
        Some(match self {
            MissingImageFile { .. } => "image_file",
            UnknownField(name) => name,
            InvalidImageFileB64(_) => "image_file_b64",
            UnsupportedOption { name, .. } => name,
            InvalidSize => "size",
            InvalidType => "type",
            InvalidChannels => "channels",
            InvalidOption { field, .. } => field.name(),
            Fetch { field, .. } => field,
            _ => return None,
        })
    }

    /// Seconds after which a retry makes sense, for the `Retry-After` header.
    pub fn retry_after(&self) -> Option<u32> {
        match self {
            ApiError::TooManyConcurrentRequests { .. } => Some(1),
            ApiError::Unavailable(_) => Some(5),
            _ => None,
        }
    }
}
