//! Whole STOMP connections through the broker's connection code: CONNECT (or STOMP) with
//! login/passcode variations, over TLS or not, with or without a client certificate, then
//! frames whose commands and headers are mostly ones the broker understands. Never a panic,
//! and the connection always ends once the client has closed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use weir::protocol::stomp::{self, Limits, StompOptions};
use weir_fuzz::{harness, peer, stomp::Script};

fuzz_target!(|script: Script| {
    let harness = harness();
    let peer = peer(
        script.tls,
        script.certificate.as_ref().map(|u| u.name().to_owned()),
    );
    let options = StompOptions {
        connect_timeout: Duration::from_secs(2),
        frame_timeout: Duration::from_secs(2),
        limits: Limits {
            max_frame_size: 64 * 1024,
            max_headers: 32,
            max_header_length: 1024,
        },
        max_subscriptions: 8,
        ..StompOptions::default()
    };
    let broker = harness.broker.clone();
    harness.run(script.steps(), move |io, shutdown| {
        stomp::serve(io, peer, broker, options, shutdown)
    });
});
