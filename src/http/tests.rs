//! The router in-process: readiness, the API before recovery, and the OpenAPI
//! description against the routes actually served.

use super::*;
use crate::core::settings::QueueSettings;
use crate::core::{Broker, BrokerOptions};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt as _;

async fn status(router: &Router, method: &str, path: &str) -> StatusCode {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::empty())
        .unwrap();
    router.clone().oneshot(request).await.unwrap().status()
}

fn broker() -> (tempfile::TempDir, Broker) {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Store::open(dir.path(), Default::default()).unwrap();
    let options = BrokerOptions::with_queue_settings(QueueSettings::default());
    let broker = Broker::open(store, options).unwrap();
    let schedule = crate::core::schedule::Schedule::open(&broker, Default::default()).unwrap();
    broker.set_schedule(schedule);
    (dir, broker)
}

#[tokio::test]
async fn ready_only_once_recovered_and_not_while_stopping() {
    let management = Arc::new(Management::default());
    let router = router(management.clone());
    assert_eq!(status(&router, "GET", "/health/live").await, StatusCode::OK);
    assert_eq!(
        status(&router, "GET", "/health/ready").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        status(&router, "GET", "/api/broker").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let (_dir, broker) = broker();
    management.set_ready(broker, Vec::new());
    assert_eq!(
        status(&router, "GET", "/health/ready").await,
        StatusCode::OK
    );
    assert_eq!(status(&router, "GET", "/api/broker").await, StatusCode::OK);
    management.set_stopping();
    assert_eq!(
        status(&router, "GET", "/health/ready").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

async fn answer(router: &Router, path: &str) -> (StatusCode, serde_json::Value) {
    let request = Request::builder().uri(path).body(Body::empty()).unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let code = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (code, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn before_ready_the_answers_say_whether_recovery_is_still_running() {
    let recovery = crate::core::RecoveryStatus::new();
    let management = Arc::new(Management::new(recovery.clone()));
    let router = router(management.clone());
    let (code, body) = answer(&router, "/health/ready").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["status"], "recovering", "{body}");
    assert_eq!(body["recovery"]["done"], false, "{body}");
    let (code, body) = answer(&router, "/api/broker").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("still recovering: 0 messages read")),
        "{body}"
    );

    // Recovered into the shared status, listeners not up yet.
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Store::open(dir.path(), Default::default()).unwrap();
    let options = BrokerOptions {
        recovery,
        ..BrokerOptions::with_queue_settings(QueueSettings::default())
    };
    let broker = Broker::open(store, options).unwrap();
    let (code, body) = answer(&router, "/health/ready").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["status"], "not_ready", "{body}");
    assert_eq!(body["recovery"]["done"], true, "{body}");
    let (_, body) = answer(&router, "/api/broker").await;
    assert_eq!(
        body["message"], "the broker is starting its listeners",
        "{body}"
    );

    management.set_ready(broker, Vec::new());
    let (code, body) = answer(&router, "/health/ready").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["status"], "ready", "{body}");
}

#[test]
fn openapi_describes_exactly_the_routes_served() {
    let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let served: Vec<(String, String)> = routes()
        .into_iter()
        .map(|(method, path, _)| (method.to_lowercase(), path.to_owned()))
        .collect();
    for (method, path) in &served {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} is served but not in openapi.json"
        );
    }
    let methods = ["get", "put", "post", "delete", "patch", "head", "options"];
    for (path, item) in doc["paths"].as_object().unwrap() {
        // The web console is pages for people, served beside the API but not part of it.
        assert!(
            !path.starts_with("/console"),
            "{path}: the console is not API and stays out of openapi.json"
        );
        for method in methods.iter().filter(|m| item.get(**m).is_some()) {
            assert!(
                served.contains(&(method.to_string(), path.clone())),
                "{method} {path} is in openapi.json but not served"
            );
        }
    }
}

#[tokio::test]
async fn every_route_answers_and_others_are_json_404_or_405() {
    let management = Arc::new(Management::default());
    let (_dir, broker) = broker();
    management.set_ready(broker, Vec::new());
    let router = router(management);
    for (method, path, _) in routes() {
        let path = path.replace("{name}", "q").replace("{id}", "1");
        let status = status(&router, method, &path).await;
        assert!(
            status != StatusCode::METHOD_NOT_ALLOWED && status.as_u16() < 500,
            "{method} {path}: {status}"
        );
    }
    assert_eq!(status(&router, "GET", "/nope").await, StatusCode::NOT_FOUND);
    assert_eq!(status(&router, "GET", "/console/").await, StatusCode::OK);
    assert_eq!(
        status(&router, "POST", "/api/queues/q").await,
        StatusCode::METHOD_NOT_ALLOWED
    );
}
