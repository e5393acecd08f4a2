//! Whole AMQP connections through the broker's connection code: protocol header, SASL
//! (PLAIN, SCRAM-SHA-256/512 with a real client proof, EXTERNAL, ANONYMOUS, and anything
//! else), then open/begin/attach/flow/transfer/disposition/detach/end/close with fuzzed
//! fields. Never a panic, and the connection always ends once the client has closed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use weir::protocol::amqp::{self, AmqpOptions};
use weir_fuzz::{amqp::Script, harness, peer};

fuzz_target!(|script: Script| {
    let harness = harness();
    let peer = peer(
        script.tls,
        script.certificate.as_ref().map(|u| u.name().to_owned()),
    );
    let options = AmqpOptions {
        sasl_timeout: Duration::from_secs(2),
        open_timeout: Duration::from_secs(2),
        frame_timeout: Duration::from_secs(2),
        max_frame_size: 64 * 1024,
        max_sessions: 4,
        max_links_per_session: 8,
        ..AmqpOptions::default()
    };
    let broker = harness.broker.clone();
    harness.run(script.steps(), move |io, shutdown| {
        amqp::serve(io, peer, broker, options, shutdown)
    });
});
