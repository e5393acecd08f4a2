//! The OpenStack Messaging (Zaqar) API v2, served on the management HTTP
//! listener, so the clients Zaqar's users run (python-zaqarclient, the
//! `openstack messaging` CLI, plain HTTP) reach Weir's queues unchanged.
//!
//! It sits on the core API like a protocol: a Zaqar queue is a Weir queue,
//! a posted message is a core message (a JSON body, `content-type:
//! application/json`), a claim is a core claim (see
//! [`crate::core::claims`]). Queues in the default project (no
//! `X-Project-Id`) are the Weir queues of the same name; a queue `NAME` of
//! project `P` is the Weir queue `P/NAME` (see [`names`]).
//!
//! Subscriptions, pools, flavors, topics and signed URLs answer 501.

mod canonical;
mod claims;
mod context;
mod error;
pub(crate) use error::ZaqarError;
mod home;
mod limits;
mod messages;
pub(crate) mod metadata;
mod names;
mod posted;
mod queues;
mod render;

use crate::http::Management;
use axum::routing::{any, get, post};
use axum::Router;
use std::sync::Arc;

/// The Zaqar routes, to merge into the management router.
pub fn router() -> Router<Arc<Management>> {
    Router::new()
        .route("/", get(home::document))
        .route("/v2", get(home::document))
        .route("/v2/", get(home::document))
        .route("/v2/ping", get(home::ping).head(home::ping))
        .route("/v2/health", get(home::health))
        .route("/v2/queues", get(queues::list))
        .route(
            "/v2/queues/{queue}",
            get(queues::get)
                .put(queues::create)
                .delete(queues::delete)
                .patch(queues::update),
        )
        .route("/v2/queues/{queue}/stats", get(queues::stats))
        .route("/v2/queues/{queue}/purge", post(queues::purge))
        .route(
            "/v2/queues/{queue}/messages",
            get(messages::list)
                .post(messages::post)
                .delete(messages::delete_many),
        )
        .route(
            "/v2/queues/{queue}/messages/{id}",
            get(messages::get_one).delete(messages::delete_one),
        )
        .route("/v2/queues/{queue}/claims", post(claims::create))
        .route(
            "/v2/queues/{queue}/claims/{claim}",
            get(claims::get)
                .patch(claims::renew)
                .delete(claims::release),
        )
        .route("/v2/queues/{queue}/subscriptions", any(home::not_offered))
        .route(
            "/v2/queues/{queue}/subscriptions/{*rest}",
            any(home::not_offered),
        )
        .route("/v2/queues/{queue}/share", any(home::not_offered))
        .route("/v2/pools", any(home::not_offered))
        .route("/v2/pools/{*rest}", any(home::not_offered))
        .route("/v2/flavors", any(home::not_offered))
        .route("/v2/flavors/{*rest}", any(home::not_offered))
        .route("/v2/topics", any(home::not_offered))
        .route("/v2/topics/{*rest}", any(home::not_offered))
}
