//! Every way an API call can fail, and the one place that maps each to its
//! status, code and title. Knows no HTTP crate: `http` renders these.

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
    #[error("monthly quota used up")]
    QuotaExceeded { limit: u32 },
    #[error("too many concurrent requests")]
    TooManyConcurrentRequests { limit: u32 },
    #[error("no image_file part")]
    MissingImageFile,
    #[error("invalid size")]
    InvalidSize,
    #[error("invalid image: {0}")]
    InvalidImage(String),
    #[error("image too large: {width}x{height}")]
    ImageTooLarge { width: u32, height: u32 },
    #[error("resolution too high for size=full: {width}x{height}")]
    ResolutionTooHigh { width: u32, height: u32 },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("request body not received in time")]
    RequestTimeout,
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
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

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
            QuotaExceeded { .. } => (402, "quota_exceeded", "Monthly quota exceeded"),
            TooManyConcurrentRequests { .. } => (
                429,
                "too_many_concurrent_requests",
                "Too many concurrent requests",
            ),
            MissingImageFile => (400, "missing_image_file", "Missing image file"),
            InvalidSize => (400, "invalid_size", "Invalid size"),
            InvalidImage(_) => (400, "invalid_image", "Invalid image"),
            ImageTooLarge { .. } => (400, "image_too_large", "Image too large"),
            ResolutionTooHigh { .. } => (400, "resolution_too_high", "Resolution too high"),
            InvalidRequest(_) => (400, "invalid_request", "Invalid request"),
            RequestTimeout => (408, "request_timeout", "Request timeout"),
            FileTooLarge => (413, "file_too_large", "File too large"),
            UnsupportedImageFormat => (415, "unsupported_image_format", "Unsupported image format"),
            NotFound => (404, "not_found", "Not found"),
            MethodNotAllowed { .. } => (405, "method_not_allowed", "Method not allowed"),
            Unavailable(_) => (503, "service_unavailable", "Service unavailable"),
            Internal(_) => (500, "internal_error", "Internal error"),
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
            QuotaExceeded { limit } => {
                format!("All {limit} images of this month are used; the count resets on the 1st (UTC).")
            }
            TooManyConcurrentRequests { limit } => {
                format!("The account's plan allows {limit} requests at a time; retry when one finishes.")
            }
            MissingImageFile => "The multipart form has no image_file part.".into(),
            InvalidSize => "size must be one of auto, preview, full.".into(),
            InvalidImage(why) => format!("The image could not be decoded: {why}."),
            ImageTooLarge { width, height } => {
                format!("The image is {width}x{height}; at most {MAX_PIXELS_DECODED} pixels are accepted.")
            }
            ResolutionTooHigh { width, height } => format!(
                "The image is {width}x{height}; size=full allows at most {MAX_PIXELS_OUTPUT} pixels. Use size=auto to scale it down."
            ),
            InvalidRequest(why) => format!("The request is not a valid multipart form: {why}."),
            RequestTimeout => "The request body was not received in time.".into(),
            FileTooLarge => format!("image_file may be at most {MAX_IMAGE_BYTES} bytes."),
            UnsupportedImageFormat => "image_file must be a JPEG, PNG or WEBP image.".into(),
            NotFound => "There is nothing at this path.".into(),
            MethodNotAllowed { allow } => format!("This path accepts {allow}."),
            Unavailable(_) => "The service cannot take this request now; retry shortly.".into(),
            Internal(_) => "Something went wrong on the server; it has been logged.".into(),
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
