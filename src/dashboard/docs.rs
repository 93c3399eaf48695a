//! The API docs page: the endpoint, its fields, every error, and examples
//! with the reader's own key prefix filled in.

use super::{page, Nav};
use crate::domain::{OptionField, REMOVE_BG_OPTIONS};
use crate::error::REMOVE_BG_ERRORS;
use maud::{html, Markup};

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
                                    li { code { "person" } ": MODNet, for people: soft edges in hair, but objects beside the person are dropped." }
                                    li { code { "general" } ": IS-Net, for any object, person or animal." }
                                    li { "remove.bg's " code { "product" } " and " code { "car" } ": IS-Net, as " code { "general" } "." }
                                }
                            }
                        }
                        @for field in OptionField::ALL {
                            tr { td { "form field" } td { code { (field.name()) } } td { "Optional. " (field.takes()) } }
                        }
                        tr {
                            td { "form fields" } td { "remove.bg's options" }
                            td {
                                "Optional. Not offered, but taken at the values that ask for what the appliance does anyway (remove.bg's defaults, which its clients often send); any other value is refused with " code { "unsupported_option" } ", never ignored. A bad value of an option above is refused with a code that names it (" code { "invalid_crop_margin" } "). A field this API does not know is refused with " code { "unknown_field" } "."
                                ul {
                                    @for (name, offered) in REMOVE_BG_OPTIONS {
                                        li {
                                            code { (name) } ": "
                                            @if offered.is_empty() { "not offered" }
                                            @for (i, value) in offered.iter().enumerate() {
                                                @if i > 0 { " or " }
                                                code { (format!("{value:?}")) }
                                            }
                                        }
                                    }
                                }
                            }
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
                li { code { "X-Type" } ": remove.bg's kind of subject: the " code { "type" } " asked for where it names one (person, product, car), else " code { "other" } "." }
                li { code { "X-Foreground-Top" } ", " code { "-Left" } ", " code { "-Width" } ", " code { "-Height" } ": the box of the subject's pixels at least 3% opaque, in the result; " code { "X-Credits-Charged" } ": 1." }
                li { code { "Server-Timing" } ": milliseconds spent on each step: " code { "queue" } ", " code { "decode" } ", " code { "prepare" } ", " code { "model" } ", " code { "compose" } " (the matte at full size, the cut-out and its PNG, made together); " code { "blend-prepare" } " and " code { "blend-model" } " for " code { "type=auto" } "'s other views; " code { "second-prepare" } " and " code { "second-model" } " where a second opinion was asked; " code { "finish" } " where output options (" code { "format" } ", " code { "crop" } ", ...) were asked." }
            }
            p { "With " code { "Accept: application/json" } ", the body is remove.bg's JSON answer instead: " code { "{\"data\": {\"result_b64\": …, \"foreground_top\": …, \"foreground_left\": …, \"foreground_width\": …, \"foreground_height\": …}}" } ", the PNG in base64." }
            p { code { "GET /v1.0/account" } " with the key: the images left this month as " code { "credits.total" } " (remove.bg's shape; " code { "null" } " without a monthly limit), the account, plan and use." }
            p { "Only successful calls are counted. Months are UTC calendar months. Pro: 500 images a month, 5 requests at a time. Business: no monthly limit, 50 at a time." }
        }
        section {
            h2 { "Errors" }
            p { "Every error is JSON, " code { "{\"errors\": [{\"title\": …, \"code\": …, \"detail\": …}]}" } ", and costs nothing." }
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
