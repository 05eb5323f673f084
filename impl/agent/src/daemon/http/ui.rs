//! The web UI at `/ui/` (Nomad's path; `/` redirects there): plain HTML, CSS and JavaScript
//! modules under `impl/agent/ui/`, built into the binary by `include_bytes!`, so nothing is
//! fetched from elsewhere at run time and `cargo build` stays the only step (there is no
//! bundler and nothing to reproduce). The page reads and writes Nomad's API like any other
//! client, with the token the operator pasted; the API's own checks stay the only ones.
//!
//! Served to anyone who passes the browser guard (a page carries no data; Nomad serves its UI
//! without a token too). Every answer forbids framing and inline or evaluated script:
//! [`CONTENT_SECURITY_POLICY`]. A path under `/ui/` that names no file is a page of the
//! single-page app, answered with `index.html` so that a bookmark of `/ui/jobs/web` loads.

use super::server::AnswerBody;
use super::Method;
use bytes::Bytes;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, LOCATION};
use hyper::{Response, StatusCode};

/// No inline script, no `eval`, no style attributes, nothing from another origin, and no
/// framing; the page talks only to the agent that served it.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

struct Asset {
    path: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

macro_rules! assets {
    ($($path:literal => $type:expr),* $(,)?) => {
        &[$(Asset {
            path: $path,
            content_type: $type,
            bytes: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/", $path)),
        }),*]
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the UI; a test checks the list against the folder.
const ASSETS: &[Asset] = assets![
    "index.html" => "text/html; charset=utf-8",
    "style.css" => "text/css; charset=utf-8",
    "favicon.svg" => "image/svg+xml",
    "js/main.js" => JS,
    "js/api.js" => JS,
    "js/dom.js" => JS,
    "js/format.js" => JS,
    "js/access.js" => JS,
    "js/actions.js" => JS,
    "js/timeline.js" => JS,
    "js/pages/jobs.js" => JS,
    "js/pages/job.js" => JS,
    "js/pages/allocation.js" => JS,
    "js/pages/clients.js" => JS,
    "js/pages/evaluations.js" => JS,
    "js/pages/tokens.js" => JS,
];

/// Whether the UI answers this path: `/`, `/ui` and everything under `/ui/`.
pub(super) fn serves(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

/// The UI's answer to a `GET` or `HEAD` of `path` (one [`serves`] took).
pub(super) fn answer(method: &Method, path: &str) -> Response<AnswerBody> {
    if !matches!(method, Method::Get | Method::Head) {
        return text(405, "Invalid method: the web UI is read with GET");
    }
    let Some(rest) = path.strip_prefix("/ui/") else {
        let mut response = text(307, "");
        response
            .headers_mut()
            .insert(LOCATION, HeaderValue::from_static("/ui/"));
        return response;
    };
    let asset = match ASSETS.iter().find(|asset| asset.path == rest) {
        Some(asset) => asset,
        // A file the UI does not have is a 404 (its scripts are under `js/`, its other
        // files at the top); any other path is one of its pages, whose IDs may hold dots.
        None if rest.starts_with("js/") || (!rest.contains('/') && rest.contains('.')) => {
            return text(404, &format!("the web UI has no file {rest:?}"));
        }
        None => &ASSETS[0],
    };
    let body = match method {
        Method::Head => None,
        _ => Some(Bytes::from_static(asset.bytes)),
    };
    let mut response = Response::new(AnswerBody::Whole(body));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    // Revalidated on every load: an upgraded agent's page never runs with old modules.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    secure(&mut response);
    response
}

/// The headers every answer of the agent carries for a browser's sake: no framing, no
/// sniffing of content types, no referrer, and the UI's policy.
pub(super) fn secure<B>(response: &mut Response<B>) {
    let headers = response.headers_mut();
    headers.insert(
        "Content-Security-Policy",
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert("X-Frame-Options", HeaderValue::from_static("DENY"));
    headers.insert(
        "X-Content-Type-Options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("Referrer-Policy", HeaderValue::from_static("no-referrer"));
}

fn text(status: u16, message: &str) -> Response<AnswerBody> {
    let body = Bytes::from(message.to_string());
    let mut response = Response::new(AnswerBody::Whole(Some(body)));
    *response.status_mut() = StatusCode::from_u16(status).expect("a valid status");
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    secure(&mut response);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Every file under `ui/` is served, and every asset listed is a file there.
    #[test]
    fn the_asset_list_is_the_folder() {
        fn walk(dir: &Path, root: &Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, root, found);
                } else {
                    let relative = path.strip_prefix(root).unwrap();
                    found.push(relative.to_str().unwrap().to_string());
                }
            }
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
        let mut found = Vec::new();
        walk(&root, &root, &mut found);
        found.sort();
        let mut listed: Vec<String> = ASSETS.iter().map(|a| a.path.to_string()).collect();
        listed.sort();
        assert_eq!(found, listed);
    }

    #[test]
    fn pages_get_the_app_and_missing_files_a_404() {
        let page = answer(&Method::Get, "/ui/jobs/web.v2");
        assert_eq!(page.status(), 200);
        assert_eq!(page.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
        assert_eq!(answer(&Method::Get, "/ui/js/nope.js").status(), 404);
        let root = answer(&Method::Get, "/");
        assert_eq!(root.status(), 307);
        assert_eq!(root.headers()[LOCATION], "/ui/");
        assert_eq!(answer(&Method::Post, "/ui/jobs").status(), 405);
        let script = answer(&Method::Get, "/ui/js/main.js");
        assert_eq!(script.headers()[CONTENT_TYPE], JS);
        assert_eq!(script.headers()["X-Frame-Options"], "DENY");
        let policy = script.headers()["Content-Security-Policy"]
            .to_str()
            .unwrap();
        assert!(!policy.contains("unsafe"), "{policy}");
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    }
}
