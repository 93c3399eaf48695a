//! The dashboard as a browser uses it: a cookie jar, forms with their CSRF
//! token, signed-in operators and users.

use super::{request_from, Multipart, Reply, TestApp, MID_MARCH};
use std::net::SocketAddr;
use std::sync::Mutex;

/// A client with a cookie jar that does not follow redirects, so each test
/// sees every status and `Location`.
pub struct Browser {
    addr: SocketAddr,
    source: Option<std::net::IpAddr>,
    cookies: Mutex<Vec<(String, String)>>,
    extra: Vec<(String, String)>,
}

impl Browser {
    pub fn new(app: &TestApp) -> Browser {
        Browser::at(app.addr)
    }

    /// A browser for a server started some other way (`Server`).
    pub fn at(addr: SocketAddr) -> Browser {
        Browser {
            addr,
            source: None,
            cookies: Mutex::default(),
            extra: vec![],
        }
    }

    /// A browser that connects from `source`, one of 127.0.0.0/8.
    pub fn with_address(mut self, source: std::net::IpAddr) -> Browser {
        self.source = Some(source);
        self
    }

    /// A browser that sends `name: value` on every request.
    pub fn with_header(mut self, name: &str, value: &str) -> Browser {
        self.extra.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn cookie(&self, name: &str) -> Option<String> {
        let cookies = self.cookies.lock().unwrap();
        cookies
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    pub fn set_cookie(&self, name: &str, value: &str) {
        let mut cookies = self.cookies.lock().unwrap();
        cookies.retain(|(k, _)| k != name);
        cookies.push((name.to_owned(), value.to_owned()));
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        mut headers: Vec<(String, String)>,
        body: &[u8],
    ) -> Reply {
        let jar = self.cookies.lock().unwrap().clone();
        if !jar.is_empty() {
            let line: Vec<_> = jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
            headers.push(("Cookie".into(), line.join("; ")));
        }
        headers.push(("Accept".into(), "text/html".into()));
        headers.extend(self.extra.iter().cloned());
        let reply = request_from(self.source, self.addr, method, path, &headers, body);
        for set in reply.headers.iter().filter(|(k, _)| k == "set-cookie") {
            let (name, rest) = set.1.split_once('=').unwrap();
            let value = rest.split(';').next().unwrap();
            let deleted = set.1.contains("Max-Age=0");
            let mut cookies = self.cookies.lock().unwrap();
            cookies.retain(|(k, _)| k != name);
            if !deleted {
                cookies.push((name.to_owned(), value.to_owned()));
            }
        }
        reply
    }

    pub fn get(&self, path: &str) -> Reply {
        self.send("GET", path, vec![], b"")
    }

    /// Posts a URL-encoded form.
    pub fn post(&self, path: &str, fields: &[(&str, &str)]) -> Reply {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let headers = vec![(
            "Content-Type".into(),
            "application/x-www-form-urlencoded".into(),
        )];
        self.send("POST", path, headers, body.as_bytes())
    }

    pub fn post_multipart(&self, path: &str, form: &Multipart) -> Reply {
        let headers = vec![("Content-Type".into(), form.content_type())];
        self.send("POST", path, headers, &form.body())
    }

    /// The CSRF token in the form on the page at `path`.
    pub fn csrf(&self, path: &str) -> String {
        csrf_in(&self.get(path))
    }

    pub fn sign_in(&self, name: &str, password: &str) -> Reply {
        let csrf = self.csrf("/login");
        self.post(
            "/login",
            &[("csrf", &csrf), ("name", name), ("password", password)],
        )
    }
}

pub fn csrf_in(reply: &Reply) -> String {
    let html = reply.text();
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no CSRF field in: {html}"));
    html[at + 19..at + 19 + 64].to_owned()
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `Set-Cookie` header that sets cookie `name`.
    pub fn set_cookie(&self, name: &str) -> Option<&str> {
        let prefix = format!("{name}=");
        self.all_headers("set-cookie")
            .into_iter()
            .find(|c| c.starts_with(&prefix))
    }

    pub fn all_headers(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

pub const ADMIN_PASSWORD: &str = "operator password";
pub const USER_PASSWORD: &str = "booth owner password";

impl TestApp {
    pub fn set_admin_password(&self) {
        let hash = cutout::secrets::hash_password(ADMIN_PASSWORD);
        self.store.set_admin_password(&hash, MID_MARCH).unwrap();
    }

    /// An account on `plan` whose user can sign in with `USER_PASSWORD`,
    /// and one key for it.
    pub fn account_with_login(&self, name: &str, plan: &str) -> String {
        let key = self.account(name, plan);
        let hash = cutout::secrets::hash_password(USER_PASSWORD);
        self.store.set_account_password(name, &hash).unwrap();
        key
    }

    pub fn admin(&self) -> Browser {
        self.set_admin_password();
        let browser = Browser::new(self);
        assert_eq!(browser.sign_in("admin", ADMIN_PASSWORD).status, 303);
        browser
    }

    pub fn user(&self, name: &str) -> Browser {
        let browser = Browser::new(self);
        let reply = browser.sign_in(name, USER_PASSWORD);
        assert_eq!(reply.status, 303, "{}", reply.text());
        browser
    }
}
