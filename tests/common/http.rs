//! A client of the management API for whole-broker tests: blocking reqwest
//! against the broker's HTTP listener, logging in as the test configs' users
//! (password `pw`).

#![allow(dead_code)]

use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::StatusCode;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;

pub struct Api {
    pub base: String,
    pub client: Client,
    /// Who [`Api::json`] reads as.
    viewer: &'static str,
}

impl Api {
    /// Against the listener at `addr`; `json` reads as `viewer`.
    pub fn new(addr: SocketAddr, viewer: &'static str) -> Self {
        Api {
            base: format!("http://{addr}"),
            client: Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
            viewer,
        }
    }

    pub fn request(&self, method: &str, path: &str, user: Option<&str>) -> RequestBuilder {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let r = self.client.request(method, format!("{}{path}", self.base));
        match user {
            Some(u) => r.basic_auth(u, Some("pw")),
            None => r,
        }
    }

    pub fn get(&self, path: &str, user: Option<&str>) -> Response {
        self.call("GET", path, user)
    }

    pub fn call(&self, method: &str, path: &str, user: Option<&str>) -> Response {
        self.request(method, path, user).send().unwrap()
    }

    pub fn post(&self, path: &str, user: Option<&str>, body: Value) -> Response {
        self.request("POST", path, user).json(&body).send().unwrap()
    }

    /// A PATCH with `body` sent as it is (bad JSON included).
    pub fn patch(&self, path: &str, user: Option<&str>, body: &str) -> Response {
        self.request("PATCH", path, user)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .unwrap()
    }

    /// GET as the viewer, 200 and its JSON.
    pub fn json(&self, path: &str) -> Value {
        let r = self.get(path, Some(self.viewer));
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        r.json().unwrap()
    }

    /// Every message of a queue, `limit` per page.
    pub fn browse_all(&self, queue: &str, limit: usize) -> Vec<Value> {
        let mut all = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = self.json(&format!(
                "/api/queues/{queue}/messages?limit={limit}{cursor}"
            ));
            let items = page["items"].as_array().unwrap();
            assert!(items.len() <= limit);
            all.extend(items.iter().cloned());
            match page["next"].as_str() {
                Some(next) => cursor = format!("&cursor={next}"),
                None => return all,
            }
        }
    }
}

/// The status is `status` and the body the JSON error with `code`; returns its message.
pub fn assert_error(r: Response, status: StatusCode, code: &str) -> String {
    assert_eq!(r.status(), status);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let body: Value = r.json().unwrap();
    assert_eq!(body["error"], code, "{body}");
    let message = body["message"].as_str().expect("a message").to_owned();
    assert!(!message.is_empty());
    message
}
