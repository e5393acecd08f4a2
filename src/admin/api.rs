//! The management HTTP API as the `weir admin` and `weir schedule` commands call it:
//! where it is, whom to log in as, and its answers as JSON or its errors as messages.

use clap::Args;
use reqwest::blocking::{Client, RequestBuilder};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// Where the running broker's management API is and whom to log in as.
#[derive(Args)]
pub struct ApiArgs {
    /// The broker's management API.
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:8161",
        env = "WEIR_URL",
        global = true
    )]
    url: String,
    /// Log in as this user (HTTP Basic).
    #[arg(long, env = "WEIR_USER", global = true)]
    user: Option<String>,
    /// The user's password.
    #[arg(long, env = "WEIR_PASSWORD", hide_env_values = true, global = true)]
    password: Option<String>,
    /// Trust this CA certificate (PEM) for an https URL.
    #[arg(long, value_name = "FILE", global = true)]
    ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("{status}: {message}")]
    Api { status: u16, message: String },
    #[error("--ca {0}: {1}")]
    Ca(String, String),
}

pub struct Api {
    base: String,
    client: Client,
    user: Option<String>,
    password: Option<String>,
}

impl Api {
    pub fn new(args: &ApiArgs) -> Result<Api, AdminError> {
        let mut client = Client::builder().timeout(Duration::from_secs(30));
        if let Some(path) = &args.ca {
            let shown = path.display().to_string();
            let pem =
                std::fs::read(path).map_err(|e| AdminError::Ca(shown.clone(), e.to_string()))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| AdminError::Ca(shown, e.to_string()))?;
            client = client.add_root_certificate(cert);
        }
        Ok(Api {
            base: args.url.trim_end_matches('/').to_owned(),
            client: client.build()?,
            user: args.user.clone(),
            password: args.password.clone(),
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        let r = self.client.request(method, format!("{}{path}", self.base));
        match &self.user {
            Some(user) => r.basic_auth(user, self.password.as_deref()),
            None => r,
        }
    }

    /// The JSON answer, or the API's error message.
    fn send(&self, request: RequestBuilder) -> Result<Value, AdminError> {
        let response = request.send()?;
        let status = response.status();
        let text = response.text()?;
        let body: Value = match text.is_empty() {
            true => Value::Null,
            false => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        };
        if status.is_success() {
            return Ok(body);
        }
        let message = body["message"]
            .as_str()
            .map_or_else(|| body.to_string(), str::to_owned);
        Err(AdminError::Api {
            status: status.as_u16(),
            message,
        })
    }

    pub fn get(&self, path: &str) -> Result<Value, AdminError> {
        self.send(self.request(reqwest::Method::GET, path))
    }

    pub fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, AdminError> {
        let request = self.request(method, path);
        self.send(match body {
            Some(body) => request.json(&body),
            None => request,
        })
    }
}

/// A path segment or query value: queue and group names may hold anything.
pub fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
