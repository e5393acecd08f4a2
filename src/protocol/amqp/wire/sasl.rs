//! SASL frame bodies (security section 5.3).

use bytes::{Bytes, BytesMut};

use super::described::{read_described, Composite, FieldReader, ListWriter};
use super::error::{AmqpCodecError, Result};
use super::types::{Ctx, Str, Symbol};

#[derive(Debug, Clone, PartialEq)]
pub struct SaslMechanisms {
    pub mechanisms: Vec<Symbol>,
}

impl Composite for SaslMechanisms {
    const CODE: u64 = 0x40;
    const NAME: &'static str = "sasl-mechanisms";
    fn decode_fields(r: &mut FieldReader<'_>) -> Result<Self> {
        let mechanisms = r.symbols("sasl-server-mechanisms")?;
        if mechanisms.is_empty() {
            return Err(AmqpCodecError::MissingField {
                composite: Self::NAME,
                field: "sasl-server-mechanisms",
            });
        }
        Ok(SaslMechanisms { mechanisms })
    }
    fn encode_fields(&self, w: &mut ListWriter<'_>) {
        w.symbols(&self.mechanisms);
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SaslInit {
    pub mechanism: Symbol,
    pub initial_response: Option<Bytes>,
    pub hostname: Option<Str>,
}

impl Composite for SaslInit {
    const CODE: u64 = 0x41;
    const NAME: &'static str = "sasl-init";
    fn decode_fields(r: &mut FieldReader<'_>) -> Result<Self> {
        Ok(SaslInit {
            mechanism: r.req("mechanism")?,
            initial_response: r.get("initial-response")?,
            hostname: r.get("hostname")?,
        })
    }
    fn encode_fields(&self, w: &mut ListWriter<'_>) {
        w.symbol(Some(&self.mechanism));
        w.binary(self.initial_response.as_ref());
        w.string(self.hostname.as_ref());
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SaslChallenge {
    pub challenge: Bytes,
}

impl Composite for SaslChallenge {
    const CODE: u64 = 0x42;
    const NAME: &'static str = "sasl-challenge";
    fn decode_fields(r: &mut FieldReader<'_>) -> Result<Self> {
        Ok(SaslChallenge {
            challenge: r.req("challenge")?,
        })
    }
    fn encode_fields(&self, w: &mut ListWriter<'_>) {
        w.binary(Some(&self.challenge));
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SaslResponse {
    pub response: Bytes,
}

impl Composite for SaslResponse {
    const CODE: u64 = 0x43;
    const NAME: &'static str = "sasl-response";
    fn decode_fields(r: &mut FieldReader<'_>) -> Result<Self> {
        Ok(SaslResponse {
            response: r.req("response")?,
        })
    }
    fn encode_fields(&self, w: &mut ListWriter<'_>) {
        w.binary(Some(&self.response));
    }
}

/// sasl-code (ubyte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslCode {
    Ok = 0,
    Auth = 1,
    Sys = 2,
    SysPerm = 3,
    SysTemp = 4,
}

impl SaslCode {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => SaslCode::Ok,
            1 => SaslCode::Auth,
            2 => SaslCode::Sys,
            3 => SaslCode::SysPerm,
            4 => SaslCode::SysTemp,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SaslOutcome {
    pub code: SaslCode,
    pub additional_data: Option<Bytes>,
}

impl Composite for SaslOutcome {
    const CODE: u64 = 0x44;
    const NAME: &'static str = "sasl-outcome";
    fn decode_fields(r: &mut FieldReader<'_>) -> Result<Self> {
        let code = r.req::<u8>("code")?;
        Ok(SaslOutcome {
            code: SaslCode::from_u8(code).ok_or(AmqpCodecError::InvalidField {
                composite: Self::NAME,
                field: "code",
            })?,
            additional_data: r.get("additional-data")?,
        })
    }
    fn encode_fields(&self, w: &mut ListWriter<'_>) {
        w.ubyte(Some(self.code as u8));
        w.binary(self.additional_data.as_ref());
    }
}

/// The body of a SASL (type 1) frame.
#[derive(Debug, Clone, PartialEq)]
pub enum SaslFrame {
    Mechanisms(SaslMechanisms),
    Init(SaslInit),
    Challenge(SaslChallenge),
    Response(SaslResponse),
    Outcome(SaslOutcome),
}

impl SaslFrame {
    pub fn encode(&self, buf: &mut BytesMut) {
        match self {
            SaslFrame::Mechanisms(f) => f.encode(buf),
            SaslFrame::Init(f) => f.encode(buf),
            SaslFrame::Challenge(f) => f.encode(buf),
            SaslFrame::Response(f) => f.encode(buf),
            SaslFrame::Outcome(f) => f.encode(buf),
        }
    }

    /// Decodes a SASL body that must fill `buf`.
    pub fn decode(buf: &Bytes) -> Result<Self> {
        let cx = Ctx::new(buf);
        let (rest, d, mut r) = read_described(cx, buf, 0, "sasl-frame")?;
        let f = match d.code() {
            Some(SaslMechanisms::CODE) => {
                SaslFrame::Mechanisms(SaslMechanisms::decode_fields(&mut r)?)
            }
            Some(SaslInit::CODE) => SaslFrame::Init(SaslInit::decode_fields(&mut r)?),
            Some(SaslChallenge::CODE) => {
                SaslFrame::Challenge(SaslChallenge::decode_fields(&mut r)?)
            }
            Some(SaslResponse::CODE) => SaslFrame::Response(SaslResponse::decode_fields(&mut r)?),
            Some(SaslOutcome::CODE) => SaslFrame::Outcome(SaslOutcome::decode_fields(&mut r)?),
            _ => return Err(AmqpCodecError::UnknownDescriptor(d)),
        };
        if !rest.is_empty() {
            return Err(AmqpCodecError::TrailingBytes(rest.len()));
        }
        Ok(f)
    }
}
