//! Protocol headers and the SASL layer, up to the point where AMQP frames may flow.
//!
//! SASL first (`AMQP 3 1 0 0`): EXTERNAL when a verified TLS client certificate names the
//! user, SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN against the broker's users (PLAIN only over
//! TLS when the broker keeps passwords to TLS), ANONYMOUS when the config allows it; bad credentials get an `auth` outcome after the
//! configured login failure delay, never a silent close. A plain AMQP header
//! without SASL is accepted only where anonymous access is. Any other header is answered with
//! the one we want and the connection closed, as the spec asks.

use crate::core::security::audit::{self, LoginOutcome};
use crate::core::security::scram::{self, ScramError, ScramSuccess};
use crate::core::security::ScramHash;
use crate::core::Broker;
use crate::protocol::amqp::wire::codec::{
    AmqpFrameCodec, Frame, Inbound, Outbound, ProtocolHeader,
};
use crate::protocol::amqp::wire::error::AmqpCodecError;
use crate::protocol::amqp::wire::sasl::{
    SaslChallenge, SaslCode, SaslFrame, SaslMechanisms, SaslOutcome,
};
use crate::protocol::amqp::wire::types::Symbol;
use crate::protocol::Peer;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::Framed;

#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("peer closed the connection during the handshake")]
    Closed,
    #[error("the protocol header and SASL exchange did not finish within {0:?}")]
    Timeout(Duration),
    #[error("unsupported protocol header {0:?}")]
    Unsupported(ProtocolHeader),
    #[error("SASL authentication failed")]
    AuthFailed,
    #[error("SASL exchange broken: {0}")]
    Sasl(&'static str),
    #[error(transparent)]
    Codec(#[from] AmqpCodecError),
}

/// Who the peer authenticated as (`None` = anonymous).
pub type Principal = Option<String>;

/// A login that succeeded: who, and with which SASL mechanism (`"none"` for a
/// connection without SASL).
#[derive(Debug)]
pub struct Login {
    pub user: Principal,
    pub mechanism: &'static str,
}

async fn next<S>(framed: &mut Framed<S, AmqpFrameCodec>) -> Result<Inbound, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        match framed.next().await {
            None => return Err(HandshakeError::Closed),
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(Inbound::Heartbeat)) => continue,
            Some(Ok(item)) => return Ok(item),
        }
    }
}

/// Runs the header and SASL exchange; on success the AMQP header has been sent and the next
/// inbound item is the peer's `open`.
pub async fn handshake<S>(
    framed: &mut Framed<S, AmqpFrameCodec>,
    broker: &Broker,
    peer: &Peer,
    timeout: Duration,
) -> Result<Login, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut awaiting_outcome = false;
    let result = tokio::time::timeout(
        timeout,
        exchange(framed, broker, peer, &mut awaiting_outcome),
    )
    .await;
    match result {
        Ok(r) => r,
        Err(_) => {
            if awaiting_outcome {
                // A client waiting for its outcome learns why it ends (best effort).
                let outcome = SaslOutcome {
                    code: SaslCode::SysTemp,
                    additional_data: None,
                };
                let send = framed.send(Outbound::Frame(Frame::Sasl(SaslFrame::Outcome(outcome))));
                let _ = tokio::time::timeout(Duration::from_secs(1), send).await;
            }
            Err(HandshakeError::Timeout(timeout))
        }
    }
}

/// `awaiting_outcome`: the client was offered mechanisms and has no outcome yet.
async fn exchange<S>(
    framed: &mut Framed<S, AmqpFrameCodec>,
    broker: &Broker,
    peer: &Peer,
    awaiting_outcome: &mut bool,
) -> Result<Login, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let anonymous = broker.auth().allows_anonymous();
    let header = match next(framed).await {
        Ok(Inbound::Header(h)) => h,
        Ok(_) => return Err(HandshakeError::Sasl("expected a protocol header")),
        Err(HandshakeError::Codec(e @ AmqpCodecError::BadProtocolHeader(_))) => {
            let _ = framed.send(Outbound::Header(ProtocolHeader::SASL)).await;
            return Err(e.into());
        }
        Err(e) => return Err(e),
    };
    if header == ProtocolHeader::AMQP && anonymous {
        framed.send(Outbound::Header(ProtocolHeader::AMQP)).await?;
        return Ok(Login {
            user: None,
            mechanism: "none",
        });
    }
    if header != ProtocolHeader::SASL {
        // Answer with the header we would accept, then close (spec 2.2).
        let _ = framed.send(Outbound::Header(ProtocolHeader::SASL)).await;
        return Err(HandshakeError::Unsupported(header));
    }
    framed.feed(Outbound::Header(ProtocolHeader::SASL)).await?;
    let auth = broker.auth();
    let passwords = auth.passwords_allowed(peer.tls);
    let mut mechanisms = Vec::with_capacity(5);
    // The certificate already proved who the client is: first choice when there is one.
    if peer.certified_user.is_some() {
        mechanisms.push(Symbol::from_static("EXTERNAL"));
    }
    // SCRAM needs a credential to prove itself with, so it is offered only with users.
    if auth.has_users() {
        mechanisms.push(Symbol::from_static("SCRAM-SHA-512"));
        mechanisms.push(Symbol::from_static("SCRAM-SHA-256"));
    }
    if passwords {
        mechanisms.push(Symbol::from_static("PLAIN"));
    }
    if anonymous {
        mechanisms.push(Symbol::from_static("ANONYMOUS"));
    }
    if mechanisms.is_empty() {
        // The list may not be empty (spec 5.3.3.1); PLAIN is then offered only to be refused.
        mechanisms.push(Symbol::from_static("PLAIN"));
    }
    framed
        .send(Outbound::Frame(Frame::Sasl(SaslFrame::Mechanisms(
            SaslMechanisms { mechanisms },
        ))))
        .await?;
    *awaiting_outcome = true;
    let init = match next(framed).await? {
        Inbound::Frame(Frame::Sasl(SaslFrame::Init(init))) => init,
        _ => return Err(HandshakeError::Sasl("expected sasl-init")),
    };
    let response = init.initial_response.as_deref().unwrap_or_default();
    let (principal, additional_data) = match init.mechanism.as_str() {
        "PLAIN" if !passwords => {
            tracing::info!(
                "SASL PLAIN refused: passwords are accepted only over TLS \
                 (security.require_tls_for_passwords)"
            );
            (Err(HandshakeError::AuthFailed), None)
        }
        "PLAIN" => (plain(broker, response), None),
        "EXTERNAL" => (external(broker, peer, response), None),
        "ANONYMOUS" if anonymous => (Ok(None), None),
        name => match ScramHash::from_mechanism(name).filter(|_| auth.has_users()) {
            Some(hash) => match scram_exchange(framed, broker, hash, response).await? {
                Ok(success) => (Ok(Some(success.user)), Some(success.server_final)),
                Err(e) => {
                    tracing::debug!(error = %e, "SCRAM refused");
                    (Err(HandshakeError::AuthFailed), None)
                }
            },
            None => (Err(HandshakeError::AuthFailed), None),
        },
    };
    *awaiting_outcome = false;
    let mechanism = match init.mechanism.as_str() {
        "PLAIN" => "PLAIN",
        "EXTERNAL" => "EXTERNAL",
        "ANONYMOUS" => "ANONYMOUS",
        "SCRAM-SHA-256" => "SCRAM-SHA-256",
        "SCRAM-SHA-512" => "SCRAM-SHA-512",
        _ => "unknown",
    };
    let code = if principal.is_ok() {
        SaslCode::Ok
    } else {
        audit::login(
            peer.addr,
            claimed_user(mechanism, response).as_deref(),
            mechanism,
            peer.tls,
            None,
            LoginOutcome::Refused,
        );
        // Guessing passwords gets slow; the delay is fixed so it tells nothing.
        tokio::time::sleep(auth.failure_delay()).await;
        SaslCode::Auth
    };
    framed
        .send(Outbound::Frame(Frame::Sasl(SaslFrame::Outcome(
            SaslOutcome {
                code,
                additional_data: additional_data.map(Bytes::from),
            },
        ))))
        .await?;
    let principal = principal?;
    match next(framed).await? {
        Inbound::Header(h) if h == ProtocolHeader::AMQP => {
            framed.send(Outbound::Header(ProtocolHeader::AMQP)).await?;
            Ok(Login {
                user: principal,
                mechanism,
            })
        }
        Inbound::Header(h) => {
            let _ = framed.send(Outbound::Header(ProtocolHeader::AMQP)).await;
            Err(HandshakeError::Unsupported(h))
        }
        _ => Err(HandshakeError::Sasl("expected the AMQP header after SASL")),
    }
}

/// SCRAM's middle: the challenge carries server-first, the response client-final. The
/// outer error is a broken exchange (close); the inner one a refused login (`auth` outcome).
async fn scram_exchange<S>(
    framed: &mut Framed<S, AmqpFrameCodec>,
    broker: &Broker,
    hash: ScramHash,
    client_first: &[u8],
) -> Result<Result<ScramSuccess, ScramError>, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (server, server_first) = match scram::start(broker.auth(), hash, client_first) {
        Ok(started) => started,
        Err(e) => return Ok(Err(e)),
    };
    framed
        .send(Outbound::Frame(Frame::Sasl(SaslFrame::Challenge(
            SaslChallenge {
                challenge: Bytes::from(server_first),
            },
        ))))
        .await?;
    let response = match next(framed).await? {
        Inbound::Frame(Frame::Sasl(SaslFrame::Response(response))) => response,
        _ => return Err(HandshakeError::Sasl("expected sasl-response")),
    };
    Ok(server.finish(&response.response))
}

/// The user name a refused login claimed, for the audit log: PLAIN's authcid, SCRAM's
/// `n=` attribute (RFC 5802, with `=2C` and `=3D` left as sent).
fn claimed_user(mechanism: &str, response: &[u8]) -> Option<String> {
    let text = match mechanism {
        "PLAIN" => response.split(|b| *b == 0).nth(1)?,
        m if m.starts_with("SCRAM-") => response
            .split(|b| *b == b',')
            .skip(2)
            .find_map(|part| part.strip_prefix(b"n="))?,
        _ => return None,
    };
    std::str::from_utf8(text).ok().map(str::to_owned)
}

/// EXTERNAL (RFC 4422 appendix A): the user is the one the verified TLS client certificate
/// names; the client may send that name as its authorization identity, or nothing.
fn external(broker: &Broker, peer: &Peer, response: &[u8]) -> Result<Principal, HandshakeError> {
    let Some(certified) = peer.certified_user.as_deref() else {
        return Err(HandshakeError::AuthFailed);
    };
    if !response.is_empty() && response != certified.as_bytes() {
        tracing::info!(
            certified,
            "SASL EXTERNAL refused: asked to act as another user"
        );
        return Err(HandshakeError::AuthFailed);
    }
    broker
        .auth()
        .authenticate_certified(certified)
        .map(Some)
        .map_err(|e| {
            tracing::info!(certified, error = %e, "SASL EXTERNAL refused");
            HandshakeError::AuthFailed
        })
}

/// PLAIN: `authzid NUL authcid NUL password` (RFC 4616).
fn plain(broker: &Broker, response: &[u8]) -> Result<Principal, HandshakeError> {
    let mut parts = response.split(|b| *b == 0);
    let (Some(_authzid), Some(user), Some(pass), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HandshakeError::AuthFailed);
    };
    let user = std::str::from_utf8(user).map_err(|_| HandshakeError::AuthFailed)?;
    let pass = std::str::from_utf8(pass).map_err(|_| HandshakeError::AuthFailed)?;
    broker
        .auth()
        .authenticate(Some(user), Some(pass))
        .map_err(|_| HandshakeError::AuthFailed)
}
