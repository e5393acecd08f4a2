//! A Zaqar v2 client for whole-broker tests: blocking reqwest against the
//! broker's HTTP listener, with the `Client-ID` (and, when set, the
//! `X-Project-Id`) every request needs.

#![allow(dead_code)]

use super::BrokerProcess;
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

pub const CLIENT: &str = "3381af92-2b9e-11e3-b191-71861300734c";

pub struct Zaqar {
    pub base: String,
    pub client: Client,
    pub project: Option<&'static str>,
    pub client_id: &'static str,
}

impl Zaqar {
    pub fn new(broker: &BrokerProcess) -> Self {
        Zaqar {
            base: format!("http://{}", broker.http.expect("HTTP listener")),
            client: Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
            project: None,
            client_id: CLIENT,
        }
    }

    pub fn in_project(mut self, project: &'static str) -> Self {
        self.project = Some(project);
        self
    }

    pub fn req(&self, method: &str, path: &str) -> RequestBuilder {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let r = self
            .client
            .request(method, format!("{}{path}", self.base))
            .header("Client-ID", self.client_id);
        match self.project {
            Some(p) => r.header("X-Project-Id", p),
            None => r,
        }
    }

    pub fn send(&self, method: &str, path: &str, body: Option<Value>) -> Response {
        let r = self.req(method, path);
        match body {
            Some(b) => r.json(&b).send().unwrap(),
            None => r.send().unwrap(),
        }
    }

    pub fn json(&self, method: &str, path: &str, body: Option<Value>, status: StatusCode) -> Value {
        let r = self.send(method, path, body);
        assert_eq!(r.status(), status, "{method} {path}");
        r.json().unwrap()
    }

    /// Posts `messages` to `queue` and returns their ids.
    pub fn post_messages(&self, queue: &str, messages: Value) -> Vec<String> {
        let body = self.json(
            "POST",
            &format!("/v2/queues/{queue}/messages"),
            Some(json!({ "messages": messages })),
            StatusCode::CREATED,
        );
        body["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap().rsplit('/').next().unwrap().to_owned())
            .collect()
    }
}
