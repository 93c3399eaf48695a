//! The API docs page: the endpoint, its fields, every error, and examples
//! with the reader's own key prefix filled in.

use super::{page, Nav};
use crate::domain::OptionField;
use maud::{html, Markup};

/// One row of the error table that the API docs page and the OpenAPI
/// document are made from.
pub struct Documented {
    pub status: u16,
    pub code: &'static str,
    pub title: &'static str,
    pub when: &'static str,
}

/// Every field of remove.bg's `POST /v1.0/removebg`, and what the
/// appliance does with it; a unit test in `http::form` holds that the form
/// knows each.
pub const REMOVE_BG_FIELDS: &[(&str, &str)] = &[
    ("image_file", "Served."),
    ("image_file_b64", "Served."),
    ("image_url", "Served: fetched from the networks the operator lists in [fetch] allow, else url_fetch_off or url_not_allowed."),
    ("size", "Served: preview, full, auto, and remove.bg's small, regular, medium, hd, 4k, 50MP."),
    ("type", "Served: auto, person (MODNet at two sizes and U2NetP, their median), general, and remove.bg's product, animal, car, car_interior, car_part, transportation, graphics, other (IS-Net); X-Type repeats the kind asked for."),
    ("type_level", "Taken (none, 1, 2, latest) and changes nothing: the appliance does not classify, so X-Type names the type asked for, or other."),
    ("format", "Served: auto, png, jpg, zip, and webp."),
    ("roi", "Served."),
    ("crop", "Served."),
    ("crop_margin", "Served."),
    ("scale", "Served."),
    ("position", "Served."),
    ("channels", "Served: rgba, alpha."),
    ("add_shadow", "Served: a shadow behind the subject, in the result's transparency."),
    ("shadow_type", "Served: car and 3D, the silhouette laid flat at the subject's base; drop, behind it down and to the right. Without add_shadow=true it changes nothing, as at remove.bg."),
    ("shadow_opacity", "Served: 0 to 100, default 50."),
    ("semitransparency", "Served: false makes what a car encloses (its windows) opaque for the car kinds of type, and changes nothing for other types, as at remove.bg."),
    ("bg_color", "Served."),
    ("bg_image_url", "Served: fetched as image_url is."),
    ("bg_image_file", "Served."),
];

/// What `POST /api/remove-bg` can answer besides 200, in the order the docs
/// show it. A unit test keeps it in step with `describe`.
pub const REMOVE_BG_ERRORS: &[Documented] = &[
    Documented { status: 400, code: "missing_image_file", title: "Missing image file", when: "The form has no image_file part; the detail names a file part sent under another name (file, image, photo)." },
    Documented { status: 400, code: "unknown_field", title: "Unknown field", when: "The form has a field this API does not know; the detail names it." },
    Documented { status: 400, code: "invalid_image_file_b64", title: "Invalid image_file_b64", when: "image_file_b64 is not standard base64 (a data: URL's head and line breaks are allowed)." },
    Documented { status: 400, code: "unsupported_option", title: "Unsupported option", when: "type_level at a value remove.bg does not take (none, 1, 2, latest). The detail names it." },
    Documented { status: 400, code: "invalid_size", title: "Invalid size", when: "size is not auto, preview or full, nor one of remove.bg's names (small, regular, medium, hd, 4k, 50MP)." },
    Documented { status: 400, code: "invalid_type", title: "Invalid type", when: "type is not auto, person or general, nor one of remove.bg's kinds (product, animal, car, car_interior, car_part, transportation, graphics, other)." },
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
    Documented { status: 400, code: "image_too_large", title: "Image too large", when: "The image has more than 50 million pixels (25 million on a board under 1.5 GiB of memory; server.max_megapixels); or, with the options asked, its cut-out needs more memory at its peak than the board gives requests (server.memory_budget_mib; see What a request costs). The detail says which, and how much." },
    Documented { status: 400, code: "resolution_too_high", title: "Resolution too high", when: "size=full and the image has more than 25 million pixels." },
    Documented { status: 400, code: "invalid_add_shadow", title: "Invalid add_shadow", when: "add_shadow is not true or false." },
    Documented { status: 400, code: "invalid_shadow_type", title: "Invalid shadow_type", when: "shadow_type is not car, 3D or drop." },
    Documented { status: 400, code: "invalid_shadow_opacity", title: "Invalid shadow_opacity", when: "shadow_opacity is not a whole number from 0 to 100." },
    Documented { status: 400, code: "invalid_semitransparency", title: "Invalid semitransparency", when: "semitransparency is not true or false." },
    Documented { status: 400, code: "invalid_backdrop", title: "Invalid backdrop", when: "backdrop names none of the appliance's backdrops, or comes with bg_color, bg_image_file or bg_image_url, or with channels=alpha." },
    Documented { status: 400, code: "invalid_bg_image_url", title: "Invalid bg_image_url", when: "bg_image_url comes with bg_color or bg_image_file, or with channels=alpha." },
    Documented { status: 400, code: "url_fetch_off", title: "URL fetching off", when: "image_url or bg_image_url, and the operator lists no network in [fetch] allow." },
    Documented { status: 400, code: "url_not_allowed", title: "URL not allowed", when: "image_url or bg_image_url names a host (or redirects to one) that does not resolve, or whose address is not in [fetch] allow; loopback, link-local and multicast addresses only where a network of their own kind is listed. The detail is the same for every refusal; the log says which." },
    Documented { status: 400, code: "url_fetch_failed", title: "URL fetch failed", when: "The file at image_url or bg_image_url could not be fetched: not http or https, no connection in 5 s, not whole in 10 s, a status other than 200, over 3 redirects, over 10 MB, or not a JPEG, PNG or WEBP as sent (a Content-Encoding such as gzip is not undone). Nothing is charged." },
    Documented { status: 400, code: "invalid_request", title: "Invalid request", when: "The body is not a well-formed multipart/form-data, urlencoded or JSON form (or has two image_file parts, or both image_file and image_file_b64); or the request head is malformed or ambiguous (two Content-Length or Host headers, Content-Length with Transfer-Encoding, a coding other than chunked, control characters, a CR or LF alone), which also closes the connection." },
    Documented { status: 401, code: "missing_api_key", title: "Missing API key", when: "No X-Api-Key header." },
    Documented { status: 401, code: "invalid_api_key", title: "Invalid API key", when: "The key is unknown or revoked." },
    Documented { status: 402, code: "quota_exceeded", title: "Monthly quota exceeded", when: "The month's images are used up (Pro: 500 per UTC calendar month)." },
    Documented { status: 403, code: "plan_not_allowed", title: "Plan has no API access", when: "The account's plan has no API access." },
    Documented { status: 403, code: "account_suspended", title: "Account suspended", when: "The operator has suspended the account." },
    Documented { status: 403, code: "plain_http_off", title: "Plain HTTP off", when: "The key came over plain HTTP and the operator has switched plain HTTP off for the API (Status page): send it over HTTPS. It crossed the network in clear, so replace it." },
    Documented { status: 408, code: "request_timeout", title: "Request timeout", when: "The body did not arrive in time: 10 seconds from its first byte read, a second more for every 16 KiB that came, at most 120 seconds; or it stopped for 30 seconds." },
    Documented { status: 413, code: "file_too_large", title: "File too large", when: "image_file is over 10 MiB (10485760 bytes), or the whole body over 13.4 MiB (a 10 MiB image in base64 and the rest of the form; a bg_image_file counts in it)." },
    Documented { status: 415, code: "unsupported_image_format", title: "Unsupported image format", when: "image_file is not a JPEG, PNG or WEBP." },
    Documented { status: 429, code: "too_many_concurrent_requests", title: "Too many concurrent requests", when: "The account already has its plan's number of requests in flight (Pro 5, Business 50). Retry-After is set." },
    Documented { status: 431, code: "request_header_fields_too_large", title: "Request header fields too large", when: "A request line or header line is over 8 KiB, the whole head over 32 KiB, or there are over 100 headers." },
    Documented { status: 500, code: "internal_error", title: "Internal error", when: "Something failed on the appliance; the cause is in its log." },
    Documented { status: 503, code: "service_unavailable", title: "Service unavailable", when: "The model is still loading, the queue is full, the requests ahead already need twice the memory the board gives requests, the database cannot be written or the server is stopping. Retry-After is set." },
];

/// Each step of a cut-out and what it holds (`pipeline::memory`).
const COSTS: &[(&str, &str)] = &[
    ("Decoding the photo", "3 bytes a pixel of P, 4 with transparency, whatever the file's bit depth; a progressive JPEG 2 more a sample until its last scan, a WEBP 4 more."),
    ("Running the model", "The photo, a quarter of it more while it is scaled (half with transparency), and what each model run holds on its engine (U2NetP 70 MiB on tract, 16 MiB on ONNX Runtime, whose own working memory is the idle server's; IS-Net 470 and 120 MiB; each model's figures are in models/manifest.toml), summed over the runs of type=auto's rung."),
    ("Scaling to the size asked", "The photo, the same quarter or half, and the result: 3 or 4 bytes a pixel of R."),
    ("The PNG, without output options", "The photo as the result has it, and its PNG: up to 4.5 bytes a pixel of R."),
    ("Output options", "The cut-out, 4 bytes a pixel of R; beside it semitransparency=false 1, add_shadow 3; crop_margin makes the canvas C larger; scale or position 8 a pixel of C; bg_image_file its own decoding and 7 a pixel of C."),
    ("The file, with output options", "Beside the canvas (4 bytes a pixel of C): a PNG up to 4.5, a JPEG 6, a WEBP 15, a ZIP about 13 bytes a pixel of C."),
];

/// `base_url` is how the reader reached this server; `key_prefix` is the
/// start of the reader's newest active key, when they have one.
pub fn docs_page(nav: &Nav, base_url: &str, key_prefix: Option<&str>) -> Markup {
    let key = key_prefix.map_or("YOUR_API_KEY".to_owned(), |p| format!("{p}…"));
    let url = format!("{base_url}/api/remove-bg");
    let curl = format!(
        "curl -f -H 'X-Api-Key: {key}' \\\n     -F image_file=@photo.jpg -F size=auto \\\n     {url} -o cutout.png"
    );
    let python = format!(
        "import requests\n\nwith open(\"photo.jpg\", \"rb\") as photo:\n    reply = requests.post(\n        \"{url}\",\n        headers={{\"X-Api-Key\": \"{key}\"}},\n        files={{\"image_file\": photo}},\n        data={{\"size\": \"auto\"}},\n        timeout=60,\n    )\nif reply.ok:\n    open(\"cutout.png\", \"wb\").write(reply.content)\nelse:\n    print(reply.status_code, reply.json()[\"errors\"][0][\"detail\"])"
    );
    let fetch = format!(
        "const form = new FormData();\nform.append(\"image_file\", fileInput.files[0]);\nform.append(\"size\", \"auto\");\n\nconst reply = await fetch(\"{url}\", {{\n  method: \"POST\",\n  headers: {{ \"X-Api-Key\": \"{key}\" }},\n  body: form,\n}});\nif (reply.ok) {{\n  const png = await reply.blob(); // image/png, transparent background\n}} else {{\n  const {{ errors }} = await reply.json();\n  console.error(reply.status, errors[0].code, errors[0].detail);\n}}"
    );
    let body = html! {
        section {
            h2 { "Remove a background" }
            p.endpoint { code { "POST " (url) } }
            p { "Send a photo as a multipart form; the answer is a PNG of the same photo with a transparent background (" code { "Content-Type: image/png" } "). Save it as a file." }
            p { "remove.bg's clients can call " code { "POST " (base_url) "/v1.0/removebg" } " instead, its route: the same form, answer and errors, with remove.bg's names for sizes and types." }
            @if let Some(prefix) = key_prefix {
                p.hint { "The examples use your key " code { (prefix) "…" } ". Put the whole key there: it was shown once, when you created it." }
            } @else {
                p.hint { "Replace " code { "YOUR_API_KEY" } " with a key from your account page." }
            }
            p { "The same contract as an OpenAPI 3.1 document: " a href="/api/openapi.json" { "/api/openapi.json" } "." }
        }
        section {
            h2 { "Request" }
            div.scroll {
                table {
                    thead { tr { th { "Part" } th { "Name" } th { "Value" } } }
                    tbody {
                        tr { td { "header" } td { code { "X-Api-Key" } } td { "Your API key. Required on every call." } }
                        tr { td { "form field" } td { code { "image_file" } } td { "The photo: JPG, PNG or WEBP, at most 10 MB (10485760 bytes) and 50 megapixels. Required, unless it comes as " code { "image_file_b64" } "." } }
                        tr { td { "form field" } td { code { "channels" } } td { "Optional, default " code { "rgba" } ", the cut-out; " code { "alpha" } ": its matte alone, a grey PNG equal to the cut-out's alpha channel." } }
                        tr { td { "form field" } td { code { "image_file_b64" } } td { "The photo in standard base64 instead, as remove.bg's clients send it; the form may then be urlencoded or a JSON object. At most 10 MB decoded." } }
                        tr {
                            td { "form field" } td { code { "size" } }
                            td {
                                "Optional, default " code { "auto" } "."
                                ul {
                                    li { code { "auto" } ": the photo's resolution, scaled down to 25 megapixels when larger." }
                                    li { code { "preview" } ": at most 0.25 megapixels, aspect ratio kept, never enlarged." }
                                    li { code { "full" } ": the photo's resolution; above 25 megapixels is refused with " code { "resolution_too_high" } "." }
                                    li { "remove.bg's names: " code { "small" } " and " code { "regular" } " are " code { "preview" } "; " code { "medium" } " at most 1.5 and " code { "hd" } " at most 4 megapixels; " code { "4k" } " is " code { "full" } "; " code { "50MP" } " is " code { "auto" } ", the most this appliance gives." }
                                }
                            }
                        }
                        tr {
                            td { "form field" } td { code { "type" } }
                            td {
                                "Optional, default " code { "auto" } ". Which model makes the matte; any other value is refused with " code { "invalid_type" } "."
                                ul {
                                    li { code { "auto" } ": the appliance's configured model (IS-Net unless the operator chose another). Where IS-Net is unsure of the subject, MODNet is asked too, and its matte is used when it is surer of the same subject." }
                                    li { code { "person" } ": for people: soft edges in hair, objects beside the person dropped; MODNet at two sizes and U2NetP, where two of the three agree." }
                                    li { code { "general" } ": IS-Net, for any object, person or animal." }
                                    li { "remove.bg's other kinds (" code { "product" } ", " code { "animal" } ", " code { "car" } ", …): IS-Net, as " code { "general" } "." }
                                }
                            }
                        }
                        @for field in OptionField::ALL {
                            tr { td { "form field" } td { code { (field.name()) } } td { "Optional. " (field.takes()) } }
                        }
                    }
                }
            }
        }
        section #removebg-fields {
            h2 { "remove.bg's fields" }
            p { "Every field of remove.bg's " code { "POST /v1.0/removebg" } ", on both routes. A value a field does not take is refused with a 400 that names the field; a field this API does not know, with " code { "unknown_field" } ". On " code { "/v1.0/" } ", remove.bg's statuses: a missing or wrong key is 403, a file too large or not an image 400." }
            div.scroll {
                table {
                    thead { tr { th { "Field" } th { "Here" } } }
                    tbody {
                        @for (name, here) in REMOVE_BG_FIELDS {
                            tr { td { code { (name) } } td { (here) } }
                        }
                    }
                }
            }
        }
        section {
            h2 { "Response" }
            p { code { "200" } " with the PNG (or the file " code { "format" } " asks for) as the body, and these headers:" }
            ul {
                li { code { "X-Width" } ", " code { "X-Height" } ": the result's size in pixels." }
                li { code { "X-Model" } ": the model that made the matte (" code { "modnet" } " where " code { "auto" } " kept MODNet's second opinion)." }
                li { code { "X-RateLimit-Limit" } ", " code { "X-RateLimit-Remaining" } ", " code { "X-RateLimit-Reset" } " (Unix time): on plans with a monthly limit." }
                li { code { "X-Type" } ": remove.bg's kind of subject: the " code { "type" } " asked for where it names one of remove.bg's kinds, else " code { "other" } "." }
                li { code { "X-Foreground-Top" } ", " code { "-Left" } ", " code { "-Width" } ", " code { "-Height" } ": the box of the subject's pixels at least 3% opaque, in the result; " code { "X-Credits-Charged" } ": 1." }
                li { code { "Server-Timing" } ": milliseconds spent on each step: " code { "queue" } ", " code { "decode" } ", " code { "prepare" } ", " code { "model" } ", " code { "compose" } " (the matte at full size, the cut-out and its PNG, made together); " code { "blend-prepare" } " and " code { "blend-model" } " for " code { "type=auto" } "'s other views; " code { "second-prepare" } " and " code { "second-model" } " where a second opinion was asked; " code { "finish" } " where output options (" code { "format" } ", " code { "crop" } ", ...) were asked." }
            }
            p { "With " code { "Accept: application/json" } ", the body is remove.bg's JSON answer instead: " code { "{\"data\": {\"result_b64\": …, \"foreground_top\": …, \"foreground_left\": …, \"foreground_width\": …, \"foreground_height\": …}}" } ", the PNG in base64." }
            p { code { "GET /v1.0/account" } " with the key: the images left this month as " code { "credits.total" } " (remove.bg's shape; " code { "null" } " without a monthly limit), the account, plan and use." }
            p { "Only successful calls are counted. Months are UTC calendar months. Pro: 500 images a month, 5 requests at a time. Business: no monthly limit, 50 at a time." }
        }
        section #memory {
            h2 { "What a request costs" }
            p { "A cut-out's memory follows its pixels and its options, not the size of its upload. Before a photo is decoded, the appliance works out from its header and the options what the request will hold at its peak, and reserves that from the memory its board gives requests (" code { "server.memory_budget_mib" } "; the Status page shows it). A request waits its turn while others hold that memory; if the requests ahead already need twice the budget it is answered " code { "503" } " with " code { "Retry-After" } "; if it needs more than the whole budget it is refused with " code { "image_too_large" } ", saying how much it needs and where. Neither costs an image." }
            div.scroll {
                table {
                    thead { tr { th { "Step" } th { "Holds at most" } } }
                    tbody {
                        @for (step, holds) in COSTS {
                            tr { td { (step) } td { (holds) } }
                        }
                    }
                }
            }
            p { "P is the photo's pixels, R the result's (" code { "size" } "), C the canvas's (R, larger with " code { "crop_margin" } "). For example: a 12 MP JPEG, about 110 MiB; 25 MP with " code { "format=zip" } ", about 390 MiB; a 50 MP 16-bit PNG, about 380 MiB, as an 8-bit one; a 192-byte progressive JPEG claiming 7071×7071, about 430 MiB." }
        }
        section {
            h2 { "Errors" }
            p { "Every error is JSON, " code { "{\"errors\": [{\"title\": …, \"code\": …, \"detail\": …}]}" } ", with " code { "source.parameter" } " naming the form field where one is at fault, and costs nothing." }
            div.scroll {
                table {
                    thead { tr { th.num { "Status" } th { "Code" } th { "When" } } }
                    tbody {
                        @for e in REMOVE_BG_ERRORS {
                            tr { td.num { (e.status) } td { code { (e.code) } } td { (e.when) } }
                        }
                    }
                }
            }
        }
        section {
            h2 { "Examples" }
            (example("curl", "example-curl", &curl))
            (example("Python (requests)", "example-python", &python))
            (example("JavaScript (fetch)", "example-js", &fetch))
        }
    };
    page("API docs", nav, None, body)
}

fn example(title: &str, id: &str, code: &str) -> Markup {
    html! {
        div.example {
            div.example-head {
                h3 { (title) }
                button type="button" data-copy=(id) { "Copy" }
            }
            pre #(id) { code { (code) } }
        }
    }
}
