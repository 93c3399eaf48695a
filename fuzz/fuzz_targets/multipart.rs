//! Any bytes as the body of `POST /api/remove-bg`: the form parser refuses
//! or gives fields within their caps; it never panics or hangs. The first
//! byte picks whether a Content-Length is declared, as chunked bodies have none.
#![no_main]

use cutout::http::form::{read_form, MAX_BODY_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&declare_length, body)) = data.split_first() else {
        return;
    };
    let length = (declare_length & 1 == 1).then_some(body.len() as u64);
    let content_type = "multipart/form-data; boundary=fuzz";
    if let Ok(form) = read_form(Some(content_type), length, body) {
        let image = form.image_file.map_or(0, |f| f.len() as u64);
        assert!(image <= MAX_BODY_BYTES);
    }
});
