//! Every way an API call can fail, and the one place that maps each to its
//! status, code and title. Knows no HTTP crate: `http` renders these.

pub use crate::domain::OptionField;

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
    #[error("resolution too high for size=full: {width}x{height}")]
    ResolutionTooHigh { width: u32, height: u32 },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
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
    /// The client hung up before its model ran: nothing ran, nothing was
    /// charged, and no answer can reach it (the log's and /metrics' 499,
    /// nginx's status for it).
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
        OptionField::Crop => ("invalid_crop", "Invalid crop"),
        OptionField::CropMargin => ("invalid_crop_margin", "Invalid crop_margin"),
        OptionField::Roi => ("invalid_roi", "Invalid roi"),
        OptionField::Scale => ("invalid_scale", "Invalid scale"),
        OptionField::Position => ("invalid_position", "Invalid position"),
    }
}

/// One row of the error table that the API docs page and the OpenAPI
/// document are made from.
pub struct Documented {
    pub status: u16,
    pub code: &'static str,
    pub title: &'static str,
    pub when: &'static str,
}

/// What `POST /api/remove-bg` can answer besides 200, in the order the docs
/// show it. A unit test keeps it in step with `describe`.
pub const REMOVE_BG_ERRORS: &[Documented] = &[
    Documented { status: 400, code: "missing_image_file", title: "Missing image file", when: "The form has no image_file part; the detail names a file part sent under another name (file, image, photo)." },
    Documented { status: 400, code: "unknown_field", title: "Unknown field", when: "The form has a field this API does not know; the detail names it." },
    Documented { status: 400, code: "invalid_image_file_b64", title: "Invalid image_file_b64", when: "image_file_b64 is not standard base64 (a data: URL's head and line breaks are allowed)." },
    Documented { status: 400, code: "unsupported_option", title: "Unsupported option", when: "The form has a remove.bg option this appliance does not offer (image_url, bg_image_url, shadow_type, shadow_opacity), or one at a value other than its default (add_shadow=false, semitransparency=true). The detail names it." },
    Documented { status: 400, code: "invalid_size", title: "Invalid size", when: "size is not auto, preview or full, nor one of remove.bg's names (small, regular, medium, hd, 4k, 50MP)." },
    Documented { status: 400, code: "invalid_type", title: "Invalid type", when: "type is not auto, person or general, nor one of remove.bg's (product, car)." },
    Documented { status: 400, code: "invalid_channels", title: "Invalid channels", when: "channels is not rgba or alpha." },
    Documented { status: 400, code: "invalid_format", title: "Invalid format", when: "format is not auto, png, jpg, webp or zip; or zip with channels=alpha; or the result is wider or taller than the format holds (JPEG 65535, WEBP 16383 pixels)." },
    Documented { status: 400, code: "invalid_bg_color", title: "Invalid bg_color", when: "bg_color is not a hex colour (81d4fa, fff, #81d4fa80) or a CSS colour name; or it comes with bg_image_file or channels=alpha." },
    Documented { status: 400, code: "invalid_bg_image_file", title: "Invalid bg_image_file", when: "bg_image_file is not a JPEG, PNG or WEBP that decodes within the photo's limits; or it comes with channels=alpha." },
    Documented { status: 400, code: "invalid_crop", title: "Invalid crop", when: "crop is not true or false." },
    Documented { status: 400, code: "invalid_crop_margin", title: "Invalid crop_margin", when: "crop_margin is not 1, 2 or 4 lengths (30px, 10%) of at most 500px or 50%; or is not 0 without crop=true." },
    Documented { status: 400, code: "invalid_roi", title: "Invalid roi", when: "roi is not four lengths x1 y1 x2 y2 (px or %) with x1 < x2 and y1 < y2." },
    Documented { status: 400, code: "invalid_scale", title: "Invalid scale", when: "scale is not original or a percentage from 10% to 100%." },
    Documented { status: 400, code: "invalid_position", title: "Invalid position", when: "position is not original, center, or one or two percentages from 0% to 100%." },
    Documented { status: 400, code: "invalid_image", title: "Invalid image", when: "image_file is a JPEG, PNG or WEBP that cannot be decoded (truncated or corrupt)." },
    Documented { status: 400, code: "image_too_large", title: "Image too large", when: "The image has more than 50 million pixels (25 million on a board under 1.5 GiB of memory; server.max_megapixels)." },
    Documented { status: 400, code: "resolution_too_high", title: "Resolution too high", when: "size=full and the image has more than 25 million pixels." },
    Documented { status: 400, code: "invalid_request", title: "Invalid request", when: "The body is not a well-formed multipart/form-data, urlencoded or JSON form (or has two image_file parts, or both image_file and image_file_b64); or the request head is malformed or ambiguous (two Content-Length or Host headers, Content-Length with Transfer-Encoding, a coding other than chunked, control characters, a CR or LF alone), which also closes the connection." },
    Documented { status: 401, code: "missing_api_key", title: "Missing API key", when: "No X-Api-Key header." },
    Documented { status: 401, code: "invalid_api_key", title: "Invalid API key", when: "The key is unknown or revoked." },
    Documented { status: 402, code: "quota_exceeded", title: "Monthly quota exceeded", when: "The month's images are used up (Pro: 500 per UTC calendar month)." },
    Documented { status: 403, code: "plan_not_allowed", title: "Plan has no API access", when: "The account's plan has no API access." },
    Documented { status: 403, code: "account_suspended", title: "Account suspended", when: "The operator has suspended the account." },
    Documented { status: 408, code: "request_timeout", title: "Request timeout", when: "The body did not arrive in time: 10 seconds from its first byte read, a second more for every 16 KiB that came, at most 120 seconds; or it stopped for 30 seconds." },
    Documented { status: 413, code: "file_too_large", title: "File too large", when: "image_file is over 10 MiB (10485760 bytes), or the whole body over 13.4 MiB (a 10 MiB image in base64 and the rest of the form; a bg_image_file counts in it)." },
    Documented { status: 415, code: "unsupported_image_format", title: "Unsupported image format", when: "image_file is not a JPEG, PNG or WEBP." },
    Documented { status: 429, code: "too_many_concurrent_requests", title: "Too many concurrent requests", when: "The account already has its plan's number of requests in flight (Pro 5, Business 50). Retry-After is set." },
    Documented { status: 431, code: "request_header_fields_too_large", title: "Request header fields too large", when: "A request line or header line is over 8 KiB, the whole head over 32 KiB, or there are over 100 headers." },
    Documented { status: 500, code: "internal_error", title: "Internal error", when: "Something failed on the appliance; the cause is in its log." },
    Documented { status: 503, code: "service_unavailable", title: "Service unavailable", when: "The model is still loading, the queue is full, the database cannot be written or the server is stopping. Retry-After is set." },
];

pub const MAX_PIXELS_DECODED: u64 = 50_000_000;
pub const MAX_PIXELS_OUTPUT: u64 = 25_000_000;
pub const MAX_IMAGE_BYTES: u64 = 10 * 1024 * 1024;

impl ApiError {
    /// The one place that decides each error's status, code and title.
    fn describe(&self) -> (u16, &'static str, &'static str) {
        use ApiError::*;
        match self {
            MissingApiKey => (401, "missing_api_key", "Missing API key"),
            InvalidApiKey => (401, "invalid_api_key", "Invalid API key"),
            PlanNotAllowed => (403, "plan_not_allowed", "Plan has no API access"),
            AccountSuspended => (403, "account_suspended", "Account suspended"),
            QuotaExceeded { .. } => (402, "quota_exceeded", "Monthly quota exceeded"),
            TooManyConcurrentRequests { .. } => (
                429,
                "too_many_concurrent_requests",
                "Too many concurrent requests",
            ),
            MissingImageFile { .. } => (400, "missing_image_file", "Missing image file"),
            UnknownField(_) => (400, "unknown_field", "Unknown field"),
            InvalidImageFileB64(_) => (400, "invalid_image_file_b64", "Invalid image_file_b64"),
            UnsupportedOption { .. } => (400, "unsupported_option", "Unsupported option"),
            InvalidSize => (400, "invalid_size", "Invalid size"),
            InvalidType => (400, "invalid_type", "Invalid type"),
            InvalidChannels => (400, "invalid_channels", "Invalid channels"),
            InvalidOption { field, .. } => {
                let (code, title) = option_error(*field);
                (400, code, title)
            }
            InvalidImage(_) => (400, "invalid_image", "Invalid image"),
            ImageTooLarge { .. } => (400, "image_too_large", "Image too large"),
            ResolutionTooHigh { .. } => (400, "resolution_too_high", "Resolution too high"),
            InvalidRequest(_) => (400, "invalid_request", "Invalid request"),
            RequestTimeout => (408, "request_timeout", "Request timeout"),
            HeaderTooLarge => (
                431,
                "request_header_fields_too_large",
                "Request header fields too large",
            ),
            FileTooLarge => (413, "file_too_large", "File too large"),
            UnsupportedImageFormat => (415, "unsupported_image_format", "Unsupported image format"),
            NotFound => (404, "not_found", "Not found"),
            MethodNotAllowed { .. } => (405, "method_not_allowed", "Method not allowed"),
            Unavailable(_) => (503, "service_unavailable", "Service unavailable"),
            Internal(_) => (500, "internal_error", "Internal error"),
            ClientGone => (499, "client_closed_request", "Client closed request"),
        }
    }

    pub fn status(&self) -> u16 {
        self.describe().0
    }

    pub fn code(&self) -> &'static str {
        self.describe().1
    }

    pub fn title(&self) -> &'static str {
        self.describe().2
    }

    /// What the client is told; never the internal cause.
    pub fn detail(&self) -> String {
        use ApiError::*;
        match self {
            MissingApiKey => "Send your API key in the X-Api-Key header.".into(),
            InvalidApiKey => "The API key is not valid.".into(),
            PlanNotAllowed => "The account's plan does not include API access.".into(),
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
            UnsupportedOption { name, offered: [], .. } => format!(
                "{name} is a remove.bg option this appliance does not offer; send the request without it."
            ),
            UnsupportedOption { name, value, offered } => format!(
                "{name}={value:?} is a remove.bg option value this appliance does not offer; it takes {name}={:?} (what it does anyway), or no {name} at all.",
                offered[0]
            ),
            InvalidSize => "size must be one of auto, preview, full (or remove.bg's small, regular, medium, hd, 4k, 50MP).".into(),
            InvalidChannels => "channels must be rgba (the cut-out) or alpha (its matte alone, in grey).".into(),
            InvalidOption { field, why } => format!("{}: {why}.", field.name()),
            InvalidType => "type must be one of auto, person, general (or remove.bg's product, car).".into(),
            InvalidImage(why) => format!("The image could not be decoded: {why}."),
            ImageTooLarge { width, height, most } if *most < MAX_PIXELS_DECODED => format!(
                "The image is {width}x{height}; this appliance takes at most {most} pixels, what its board's memory holds."
            ),
            ImageTooLarge { width, height, .. } => {
                format!("The image is {width}x{height}; at most {MAX_PIXELS_DECODED} pixels are accepted.")
            }
            ResolutionTooHigh { width, height } => format!(
                "The image is {width}x{height}; size=full allows at most {MAX_PIXELS_OUTPUT} pixels. Use size=auto to scale it down."
            ),
            InvalidRequest(why) => format!("The request is not a valid form: {why}."),
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
            ClientGone => "The client closed the connection before its image was cut out.".into(),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One of every error `POST /api/remove-bg` can answer (`ClientGone`
    /// reaches no client).
    fn remove_bg_errors() -> Vec<ApiError> {
        use ApiError::*;
        let options = OptionField::ALL.map(|field| InvalidOption {
            field,
            why: "x".into(),
        });
        options
            .into_iter()
            .chain([
                MissingApiKey,
                InvalidApiKey,
                PlanNotAllowed,
                AccountSuspended,
                QuotaExceeded { limit: 1 },
                TooManyConcurrentRequests { limit: 1 },
                MissingImageFile { found: None },
                UnknownField("x".into()),
                InvalidImageFileB64("x".into()),
                UnsupportedOption {
                    name: "x",
                    value: "y".into(),
                    offered: &[],
                },
                InvalidSize,
                InvalidType,
                InvalidChannels,
                InvalidImage("x".into()),
                ImageTooLarge {
                    width: 1,
                    height: 1,
                    most: MAX_PIXELS_DECODED,
                },
                ResolutionTooHigh {
                    width: 1,
                    height: 1,
                },
                InvalidRequest("x".into()),
                RequestTimeout,
                HeaderTooLarge,
                FileTooLarge,
                UnsupportedImageFormat,
                Unavailable("x".into()),
                Internal(anyhow::anyhow!("x")),
            ])
            .collect()
    }

    #[test]
    fn the_documented_table_is_exactly_what_describe_says() {
        let described: Vec<_> = remove_bg_errors()
            .iter()
            .map(|e| (e.status(), e.code(), e.title()))
            .collect();
        let documented: Vec<_> = REMOVE_BG_ERRORS
            .iter()
            .map(|d| (d.status, d.code, d.title))
            .collect();
        for pair in &described {
            assert!(documented.contains(pair), "{pair:?} is not documented");
        }
        for pair in &documented {
            assert!(
                described.contains(pair),
                "{pair:?} is documented but never made"
            );
        }
        assert_eq!(described.len(), documented.len());
    }
}
