//! What an API key gives away: nothing in the database or the log, and
//! nothing that tells a revoked key from one that never existed.

use crate::helpers::*;

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = vec![];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else if path.is_file() {
            files.push(path);
        }
    }
    files
}

#[test]
fn keys_are_never_written_in_clear_to_the_database_or_the_log() {
    let data = tempfile::tempdir().unwrap();
    let key = cli_account(data.path(), "acme", "pro");
    let revoked = cli_account(data.path(), "gone", "pro");
    cutout_cli(data.path(), &["key", "revoke", &revoked[..12]]);
    let server = Server::start(data.path(), "trace", &[]);

    assert_eq!(
        post_form(
            server.addr,
            Some(&key),
            Multipart::new().file("image_file", &jpeg(64, 48))
        )
        .status,
        200
    );
    let mut near_miss = key.clone();
    near_miss.pop();
    near_miss.push(if key.ends_with('0') { '1' } else { '0' });
    for bad in [revoked.as_str(), &near_miss, &format!("{key}x")] {
        let reply = post_form(
            server.addr,
            Some(bad),
            Multipart::new().file("image_file", b"x"),
        );
        assert_eq!(reply.status, 401, "{bad}");
    }
    // The trace log records the calls, the served one with its account.
    let log = server.log_once_it_says("POST /api/remove-bg 200 account=acme");
    server.kill_9();

    let secrets = [&key[12..], &revoked[12..], &near_miss[12..]];
    for secret in secrets {
        assert!(
            !log.contains(secret),
            "the log holds a key's secret part:\n{log}"
        );
    }
    for file in files_under(data.path()) {
        let bytes = std::fs::read(&file).unwrap();
        for secret in secrets {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds a key's secret part in clear",
                file.display()
            );
        }
    }
}

#[test]
fn a_revoked_key_and_an_unknown_key_get_the_same_answer() {
    let app = spawn_app();
    let revoked = app.account("gone", "pro");
    app.store.revoke_key(&revoked[..12], MID_MARCH).unwrap();
    let unknown = format!("ck_{}", "7".repeat(revoked.len() - 3));
    let photo = jpeg(64, 48);
    let answer = |key: &str| {
        let reply = app.post_image(Some(key), &photo, None);
        let mut headers = reply.headers.clone();
        headers.retain(|(name, _)| !name.eq_ignore_ascii_case("date"));
        (reply.status, headers, reply.body)
    };
    assert_eq!(answer(&revoked), answer(&unknown));
    assert_eq!(answer(&revoked).0, 401);
    // Both are one lookup of the key's hash among the active keys
    // (Store::authenticate); `make bench` prints the time each takes
    // (key_check_ms), as a test build's timings prove nothing.
}
