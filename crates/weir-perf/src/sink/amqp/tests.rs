//! The AMQP sink as an independent client sees it: fe2o3-amqp, with its
//! sender and receiver on one session, so the spec is read by someone else.

use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::messaging::{Body, Message, Outcome};
use fe2o3_amqp::types::primitives::{Binary, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_independent_client_sends_receives_and_closes() -> Result<(), Box<dyn std::error::Error>>
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(super::serve_on(listener));
    let mut connection = Connection::builder()
        .container_id("sink-test")
        .sasl_profile(SaslProfile::Plain {
            username: "any".into(),
            password: "thing".into(),
        })
        .open(format!("amqp://{addr}").as_str())
        .await?;
    let mut session = Session::begin(&mut connection).await?;
    let mut receiver = Receiver::attach(&mut session, "r", "q").await?;
    let mut sender = Sender::attach(&mut session, "s", "q").await?;
    // More than the receiver's credit, the last larger than a frame.
    let bodies: Vec<Vec<u8>> = (0..300u32)
        .map(|i| {
            let len = if i == 299 { 3 << 20 } else { 16 };
            (0..len).map(|j| (i as usize + j) as u8).collect()
        })
        .collect();
    let send = async {
        for body in &bodies {
            let message = Message::builder().data(Binary::from(body.clone())).build();
            let outcome = sender.send(message).await?;
            assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    let receive = async {
        for body in &bodies {
            let d = tokio::time::timeout(WAIT, receiver.recv::<Body<Value>>()).await??;
            match d.body() {
                Body::Data(sections) => {
                    let got: Vec<u8> = sections.iter().flat_map(|s| s.0.to_vec()).collect();
                    assert!(
                        got == *body,
                        "body {} of {} bytes differs",
                        body[0],
                        body.len()
                    );
                }
                other => panic!("unexpected body {other:?}"),
            }
            receiver.accept(&d).await?;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    tokio::time::timeout(WAIT * 3, async { tokio::try_join!(send, receive) }).await??;
    sender.close().await?;
    receiver.close().await?;
    session.end().await?;
    connection.close().await?;
    Ok(())
}
