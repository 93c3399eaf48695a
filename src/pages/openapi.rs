//! The API contract as an OpenAPI 3.1 document, made from the same error
//! table as the docs page, so the two cannot disagree.

use super::docs::REMOVE_BG_ERRORS;
use crate::domain::{OptionField, REMOVE_BG_OPTIONS, REMOVE_BG_TYPES};
use crate::error::MAX_IMAGE_BYTES;
use serde_json::{json, Map, Value};

pub fn document(version: &str) -> Value {
    let mut responses = Map::new();
    responses.insert(
        "200".into(),
        json!({
            "description": "The cut-out: a PNG with a transparent background (or what format, bg_color and the other output options ask for).",
            "headers": {
                "X-Width": { "schema": { "type": "integer" }, "description": "Width of the result in pixels." },
                "X-Height": { "schema": { "type": "integer" }, "description": "Height of the result in pixels." },
                "X-Model": { "schema": { "type": "string" }, "description": "The model that made the matte: isnet, isnet-int8, modnet or u2netp (with type=auto, modnet where IS-Net was unsure and MODNet's second opinion was kept)." },
                "X-Credits-Charged": { "schema": { "type": "integer" }, "description": "Images this call counted: 1." },
                "X-Foreground-Top": { "schema": { "type": "integer" }, "description": "The box of the subject's pixels at least 3% opaque, in the result (absent when there are none): its top row." },
                "X-Foreground-Left": { "schema": { "type": "integer" }, "description": "The box's left column." },
                "X-Foreground-Width": { "schema": { "type": "integer" }, "description": "The box's width." },
                "X-Foreground-Height": { "schema": { "type": "integer" }, "description": "The box's height." },
                "X-Type": { "schema": { "type": "string", "enum": REMOVE_BG_TYPES }, "description": "remove.bg's kind of subject: the type asked for where it names one of remove.bg's kinds, else other (the appliance does not classify the subject)." },
                "X-RateLimit-Limit": { "schema": { "type": "integer" }, "description": "Images a month (plans with a monthly limit only)." },
                "X-RateLimit-Remaining": { "schema": { "type": "integer" }, "description": "Images left this month (plans with a monthly limit only)." },
                "X-RateLimit-Reset": { "schema": { "type": "integer" }, "description": "Unix time the count resets: the next UTC month (plans with a monthly limit only)." },
                "Server-Timing": { "schema": { "type": "string" }, "description": "Milliseconds spent on each step (queue, decode, prepare, model, compose: the matte, cut-out and PNG made together; blend-prepare and blend-model for type=auto's other views; second-prepare and second-model where a second opinion was asked; finish where output options were asked), e.g. `decode;dur=12.5, model;dur=1610.2`." }
            },
            "content": {
                "image/png": { "schema": { "type": "string", "contentMediaType": "image/png" } },
                "image/jpeg": { "schema": { "type": "string", "contentMediaType": "image/jpeg" } },
                "image/webp": { "schema": { "type": "string", "contentMediaType": "image/webp" } },
                "application/zip": { "schema": { "type": "string", "contentMediaType": "application/zip" } },
                "application/json": { "schema": { "type": "object", "description": "With Accept: application/json, remove.bg's answer.", "properties": { "data": { "type": "object", "properties": {
                    "result_b64": { "type": "string", "contentEncoding": "base64", "description": "The file the answer would have been (a PNG unless format asks for another)." },
                    "foreground_top": { "type": "integer" }, "foreground_left": { "type": "integer" },
                    "foreground_width": { "type": "integer" }, "foreground_height": { "type": "integer" } } } } } }
            }
        }),
    );
    let mut statuses: Vec<u16> = REMOVE_BG_ERRORS.iter().map(|e| e.status).collect();
    statuses.dedup();
    for status in statuses {
        let errors: Vec<_> = REMOVE_BG_ERRORS
            .iter()
            .filter(|e| e.status == status)
            .collect();
        let examples: Map<String, Value> = errors
            .iter()
            .map(|e| {
                (
                    e.code.to_owned(),
                    json!({
                        "summary": e.when,
                        "value": { "errors": [{ "title": e.title, "code": e.code, "detail": e.when }] }
                    }),
                )
            })
            .collect();
        let mut response = json!({
            "description": errors.iter().map(|e| format!("`{}`: {}", e.code, e.when)).collect::<Vec<_>>().join(" "),
            "content": { "application/json": {
                "schema": { "$ref": "#/components/schemas/Error" },
                "examples": examples
            } }
        });
        if matches!(status, 429 | 503) {
            response["headers"] = json!({
                "Retry-After": { "schema": { "type": "integer" }, "description": "Seconds to wait before retrying." }
            });
        }
        responses.insert(status.to_string(), response);
    }
    // remove.bg's route is the same operation, so its clients need only a
    // new address.
    let types: Vec<&str> = ["auto", "general"]
        .into_iter()
        .chain(REMOVE_BG_TYPES.iter().copied())
        .collect();
    let mut properties = json!({
        "image_file": { "type": "string", "contentMediaType": "application/octet-stream",
            "description": format!("JPG, PNG or WEBP, at most {MAX_IMAGE_BYTES} bytes and 50 megapixels; or image_file_b64, the same in base64 (exactly one of the two).") },
        "channels": { "type": "string", "enum": ["rgba", "alpha"], "default": "rgba",
            "description": "rgba: the cut-out; alpha: its matte alone, a grey PNG equal to the cut-out's alpha channel (remove.bg's option)." },
        "image_file_b64": { "type": "string", "contentEncoding": "base64",
            "description": "The image in standard base64, instead of image_file." },
        "size": { "type": "string", "enum": ["auto", "preview", "full", "small", "regular", "medium", "hd", "4k", "50MP"], "default": "auto",
            "description": "auto: the photo's resolution scaled down to 25 MP when larger; preview: at most 0.25 MP, never enlarged; full: the photo's resolution, refused above 25 MP. remove.bg's names: small and regular are preview, medium at most 1.5 MP, hd at most 4 MP, 4k is full, 50MP is auto (the most this appliance gives)." },
        "type": { "type": "string", "enum": types, "default": "auto",
            "description": "Which model makes the matte. auto: the appliance's configured model (where IS-Net is unsure of the subject, MODNet's matte when it is surer of the same subject); person: MODNet at two sizes and U2NetP, their per-pixel median (people, soft hair edges; drops other objects); general: IS-Net (any object). remove.bg's other kinds: IS-Net, as general." },
        "image_url": { "type": "string", "format": "uri",
            "description": "The photo's URL (http or https) instead of image_file, fetched only from the networks the operator lists in [fetch] allow: 5 s to connect, 10 s to arrive, at most 3 redirects, 10 MB." }
    });
    for field in OptionField::ALL {
        let takes = field.takes();
        properties[field.name()] = match field {
            OptionField::BgImageFile => {
                json!({ "type": "string", "contentMediaType": "application/octet-stream", "description": takes })
            }
            _ => json!({ "type": "string", "description": takes }),
        };
    }
    for (name, offered) in REMOVE_BG_OPTIONS {
        properties[name] = json!({ "type": "string", "enum": offered,
            "description": "remove.bg's option, at the values that change nothing the appliance makes; any other value is refused with unsupported_option." });
    }
    // remove.bg's urlencoded and JSON forms: the image in base64.
    let mut encoded = properties.clone();
    encoded
        .as_object_mut()
        .expect("an object")
        .remove("image_file");
    encoded
        .as_object_mut()
        .expect("an object")
        .remove("bg_image_file");
    encoded["image_file_b64"] = json!({ "type": "string", "contentEncoding": "base64",
        "description": format!("The image (JPG, PNG or WEBP, at most {MAX_IMAGE_BYTES} bytes decoded) in standard base64; a data: URL's head and line breaks are allowed.") });
    let encoded =
        json!({ "type": "object", "required": ["image_file_b64"], "properties": encoded });
    let operation = |id: &str| {
        json!({
            "operationId": id,
            "summary": "Remove the background of a photo",
            "requestBody": { "required": true, "content": { "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": properties.clone()
                },
                "encoding": {
                    "image_file": { "contentType": "image/jpeg, image/png, image/webp" },
                    "bg_image_file": { "contentType": "image/jpeg, image/png, image/webp" }
                }
            },
            "application/x-www-form-urlencoded": { "schema": encoded.clone() },
            "application/json": { "schema": encoded.clone() } } },
            "responses": responses.clone()
        })
    };
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "cutout",
            "version": version,
            "description": "Background removal on the local network: POST a photo, get a PNG cut-out with a transparent background."
        },
        "servers": [{ "url": "/" }],
        "components": {
            "securitySchemes": { "apiKey": { "type": "apiKey", "in": "header", "name": "X-Api-Key" } },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["errors"],
                    "properties": { "errors": { "type": "array", "minItems": 1, "items": {
                        "type": "object",
                        "required": ["title", "code", "detail"],
                        "properties": {
                            "title": { "type": "string" },
                            "code": { "type": "string", "enum": REMOVE_BG_ERRORS.iter().map(|e| e.code).collect::<Vec<_>>() },
                            "detail": { "type": "string" },
                            "source": { "type": "object", "description": "Where a form field is at fault, the field.",
                                "properties": { "parameter": { "type": "string" } } }
                        }
                    } } }
                }
            }
        },
        "security": [{ "apiKey": [] }],
        "paths": {
            "/api/remove-bg": { "post": operation("removeBackground") },
            "/v1.0/removebg": { "post": operation("removeBackgroundAsRemoveBg") },
            "/v1.0/account": { "get": {
                "operationId": "account",
                "summary": "The key's account, its plan and this month's use, in remove.bg's shape",
                "responses": {
                    "200": { "description": "credits.total and credits.subscription: images left this month (null on a plan without a monthly limit); the appliance's own figures beside them.",
                        "content": { "application/json": { "schema": { "type": "object", "properties": { "data": { "type": "object", "properties": { "attributes": {
                            "type": "object",
                            "properties": {
                                "credits": { "type": "object", "properties": {
                                    "total": { "type": ["integer", "null"] }, "subscription": { "type": ["integer", "null"] },
                                    "payg": { "type": "integer" }, "enterprise": { "type": "integer" } } },
                                "api": { "type": "object", "properties": { "free_calls": { "type": "integer" }, "sizes": { "type": "string" } } },
                                "account": { "type": "string" }, "plan": { "type": "string" },
                                "month": { "type": "string", "description": "The UTC month, YYYY-MM." },
                                "used": { "type": "integer" }, "monthly_limit": { "type": ["integer", "null"] },
                                "remaining": { "type": ["integer", "null"] }, "concurrency": { "type": "integer" }
                            } } } } } } } } },
                    "401": { "description": "No key, or an unknown or revoked one (missing_api_key, invalid_api_key).", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
                    "403": { "description": "The plan has no API access, or the account is suspended.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
                    "503": { "description": "The database cannot be read now.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
                }
            } },
            "/api/backdrops": { "get": {
                "operationId": "backdrops",
                "summary": "The backdrops a request may name (field backdrop), for any valid key",
                "responses": {
                    "200": { "description": "Each backdrop, by name.", "content": { "application/json": { "schema": { "type": "object", "properties": { "data": { "type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "id": { "type": "string", "description": "Its name in lower case, anything but letters and digits a hyphen; a request may give it instead of the name." },
                            "name": { "type": "string" },
                            "width": { "type": "integer" }, "height": { "type": "integer" },
                            "overlay": { "type": "boolean", "description": "Whether it has an overlay put over the result." },
                            "bytes": { "type": "integer" }
                        } } } } } } } },
                    "401": { "description": "No key, or an unknown or revoked one.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
                }
            } },
            "/api/backdrops/{id}/background": { "get": {
                "operationId": "backdropBackground",
                "summary": "A backdrop's background as uploaded, for any valid key: a booth that composites itself keeps a copy",
                "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "string" } }],
                "responses": {
                    "200": { "description": "The image file.", "content": { "image/jpeg": {}, "image/png": {}, "image/webp": {} } },
                    "401": { "description": "No key, or an unknown or revoked one.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
                    "404": { "description": "not_found: no backdrop with this id.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
                }
            } },
            "/api/backdrops/{id}/overlay": { "get": {
                "operationId": "backdropOverlay",
                "summary": "A backdrop's overlay, a PNG with transparency, for any valid key",
                "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "string" } }],
                "responses": {
                    "200": { "description": "The PNG.", "content": { "image/png": {} } },
                    "401": { "description": "No key, or an unknown or revoked one.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
                    "404": { "description": "not_found: no backdrop with this id, or it has no overlay.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
                }
            } },
            "/api/pair": { "post": {
                "operationId": "pair",
                "summary": "A booth without a key asks to pair (over HTTPS only, no key)",
                "description": "The booth shows a six-digit code it derives itself from the certificate it saw and its request: the first 4 bytes, big-endian, modulo 1,000,000 of SHA-256(\"cutout-pair\\0\" + SHA-256(the certificate, DER) + \"\\0\" + nonce + \"\\0\" + name), written \"042 917\". The operator's dashboard shows the code from the appliance's own certificate and approves the request, or the appliance's button does within button_seconds.",
                "security": [],
                "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["name", "nonce"], "properties": {
                    "name": { "type": "string", "maxLength": 64, "description": "The booth's name: the key's label." },
                    "nonce": { "type": "string", "pattern": "^[A-Za-z0-9_-]{16,128}$", "description": "Random, chosen by the booth for this request." } } } } } },
                "responses": {
                    "202": { "description": "Recorded: poll /api/pair/{id}.", "content": { "application/json": { "schema": { "type": "object", "properties": {
                        "id": { "type": "string", "description": "Secret: the booth polls with it." },
                        "expires_in": { "type": "integer" }, "button_seconds": { "type": "integer" } } } } } },
                    "400": { "description": "invalid_pairing_request: not JSON, or the name or nonce is not as described.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
                    "403": { "description": "https_required: asked over plain HTTP.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
                    "429": { "description": "too_many_pairing_requests: this address asked 6 times in a minute, or 16 requests wait.", "headers": { "Retry-After": { "schema": { "type": "integer" } } }, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
                }
            } },
            "/api/pair/{id}": { "get": {
                "operationId": "pairingAnswer",
                "summary": "The operator's answer to a pairing request (over HTTPS only)",
                "security": [],
                "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "string" } }],
                "responses": {
                    "200": { "description": "Approved: the booth's own key, handed out once.", "content": { "application/json": { "schema": { "type": "object", "properties": {
                        "status": { "const": "approved" }, "api_key": { "type": "string" }, "account": { "type": "string" } } } } } },
                    "202": { "description": "Still waiting.", "content": { "application/json": { "schema": { "type": "object", "properties": {
                        "status": { "const": "pending" }, "expires_in": { "type": "integer" } } } } } },
                    "403": { "description": "pairing_refused, or https_required.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
                    "404": { "description": "pairing_unknown: expired, never made, or its key already collected.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
                }
            } }
        }
    })
}
