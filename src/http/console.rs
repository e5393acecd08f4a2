//! The web console: a few hand-written pages, scripts and a style sheet, built into the
//! binary and served at `/console/`. They are plain ES modules with no build step and no
//! URL outside the broker, so the console works offline and behind any firewall.
//!
//! The assets need no login (they are the same in every Weir of a version); the pages
//! call the JSON API with the credentials the user gives the console, so every refusal
//! comes from the API's own checks. These routes are not part of the API, which is why
//! they sit outside [`super::routes`] and the OpenAPI description.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use super::error::ApiError;

/// One file of the console.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_bytes!(concat!("console/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file the console serves; `index.html` is the page at `/console/`.
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("ui.js", JS),
    asset!("chart.js", JS),
    asset!("sampler.js", JS),
    asset!("overview.js", JS),
    asset!("queues.js", JS),
    asset!("queue.js", JS),
    asset!("schedule.js", JS),
    asset!("connections.js", JS),
];

/// Only the broker's own origin: a page that cannot load or call anything else cannot
/// leak what it shows, and an injected script would not run.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// `/console` (to `/console/`), `/console/` and its files.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        // Relative, so it also holds behind a proxy that serves Weir under a prefix.
        .route("/console", get(|| async { Redirect::to("console/") }))
        .route("/console/", get(|| async { serve("index.html") }))
        .route(
            "/console/{*file}",
            get(|Path(file): Path<String>| async move { serve(&file) }),
        )
}

fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

fn serve(name: &str) -> Response {
    let Some(asset) = find(name) else {
        return ApiError::NotFound(format!("the console has no file '{name}'")).into_response();
    };
    let mut response = (StatusCode::OK, asset.body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    // Revalidated on each load, so a broker upgrade is never shown with old scripts.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt as _;

    async fn get(path: &str) -> Response {
        let request = Request::builder().uri(path).body(Body::empty()).unwrap();
        router::<()>().oneshot(request).await.unwrap()
    }

    fn header(response: &Response, name: header::HeaderName) -> &str {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }

    #[tokio::test]
    async fn every_asset_is_served_with_its_content_type() {
        for asset in ASSETS {
            let response = get(&format!("/console/{}", asset.name)).await;
            assert_eq!(response.status(), StatusCode::OK, "{}", asset.name);
            assert_eq!(
                header(&response, header::CONTENT_TYPE),
                asset.content_type,
                "{}",
                asset.name
            );
            assert_eq!(header(&response, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
            let extension = asset.name.rsplit('.').next().unwrap();
            let expected = match extension {
                "html" => "text/html",
                "css" => "text/css",
                "js" => "text/javascript",
                "svg" => "image/svg+xml",
                other => panic!("{}: no content type known for .{other}", asset.name),
            };
            assert!(asset.content_type.starts_with(expected), "{}", asset.name);
        }
        let index = get("/console/").await;
        assert_eq!(index.status(), StatusCode::OK);
        assert!(header(&index, header::CONTENT_TYPE).starts_with("text/html"));
        assert!(header(&index, header::CONTENT_SECURITY_POLICY).contains("default-src 'none'"));
    }

    #[tokio::test]
    async fn console_without_slash_redirects_and_unknown_files_are_404() {
        let response = get("/console").await;
        assert!(response.status().is_redirection());
        assert_eq!(header(&response, header::LOCATION), "console/");
        for missing in [
            "/console/nope.js",
            "/console/../Cargo.toml",
            "/console/app.js/x",
        ] {
            assert_eq!(
                get(missing).await.status(),
                StatusCode::NOT_FOUND,
                "{missing}"
            );
        }
    }

    /// Works offline and leaks nothing: no file names a URL outside the broker. The SVG
    /// namespace is a name that is never fetched (the charts are built as markup in HTML,
    /// which needs none; only the icon file must declare it).
    #[test]
    fn no_asset_refers_to_anything_outside_the_broker() {
        for asset in ASSETS {
            let text = std::str::from_utf8(asset.body)
                .expect("assets are text")
                .replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
            for needle in ["http://", "https://", "ws://", "wss://", "//cdn", "@import"] {
                assert!(
                    !text.to_ascii_lowercase().contains(needle),
                    "{} contains {needle}",
                    asset.name
                );
            }
        }
    }

    /// Every module a page or script imports, and every file the page links, is served.
    #[test]
    fn every_file_the_console_refers_to_is_an_asset() {
        for asset in ASSETS {
            let text = std::str::from_utf8(asset.body).unwrap();
            for quote in ["'./", "\"./"] {
                for rest in text.split(quote).skip(1) {
                    let end = rest.find(&quote[..1]).unwrap();
                    let name = &rest[..end];
                    assert!(
                        find(name).is_some(),
                        "{} refers to ./{name}, which is not served",
                        asset.name
                    );
                }
            }
        }
    }

    #[test]
    fn every_asset_file_is_in_the_table() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http/console");
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            assert!(
                find(&name).is_some(),
                "src/http/console/{name} is not served"
            );
        }
    }
}
