//! SASL frame bodies (security section 5.3).

use bytes::{Bytes, BytesMut};

use super::composite::composite;
use super::described::{read_described, Composite, FieldReader, ListWriter};
use super::error::{AmqpCodecError, Result};
use super::types::{Ctx, Str, Symbol};

#[derive(Debug, Clone, PartialEq)]
pub struct SaslMechanisms {
    pub mechanisms: Vec<Symbol>,
}

composite! {
    SaslMechanisms = 0x40, "sasl-mechanisms" {
        mechanisms: with(read_mechanisms, |m: &Vec<Symbol>, w: &mut ListWriter<'_>| w.symbols(m)),
    }
}

/// A multiple-valued symbol field that is also mandatory: at least one.
fn read_mechanisms(r: &mut FieldReader<'_>) -> Result<Vec<Symbol>> {
    let mechanisms = r.symbols("sasl-server-mechanisms")?;
    if mechanisms.is_empty() {
        return Err(AmqpCodecError::MissingField {
            composite: SaslMechanisms::NAME,
            field: "sasl-server-mechanisms",
        });
    }
    Ok(mechanisms)
}

#[derive(Debug, Clone, PartialEq)]
pub struct SaslInit {
    pub mechanism: Symbol,
    pub initial_response: Option<Bytes>,
    pub hostname: Option<Str>,
}

composite! {
    SaslInit = 0x41, "sasl-init" {
        mechanism = "mechanism": req,
        initial_response = "initial-response": opt,
        hostname = "hostname": opt,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SaslChallenge {
    pub challenge: Bytes,
}

composite! {
    SaslChallenge = 0x42, "sasl-challenge" {
        challenge = "challenge": req,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SaslResponse {
    pub response: Bytes,
}

composite! {
    SaslResponse = 0x43, "sasl-response" {
        response = "response": req,
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
    /// The mandatory `code` field of a sasl-outcome.
    fn read(r: &mut FieldReader<'_>) -> Result<Self> {
        let code = r.req::<u8>("code")?;
        SaslCode::from_u8(code).ok_or(AmqpCodecError::InvalidField {
            composite: SaslOutcome::NAME,
            field: "code",
        })
    }

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

composite! {
    SaslOutcome = 0x44, "sasl-outcome" {
        code: with(SaslCode::read, |c: &SaslCode, w: &mut ListWriter<'_>| w.ubyte(Some(*c as u8))),
        additional_data = "additional-data": opt,
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
