//! Shared definitions: the error composite, link roles and settle modes, delivery states,
//! termini (source, target, coordinator) and transaction control bodies.

use bytes::{Bytes, BytesMut};

use super::composite::{composite, ToField};
use super::described::{Composite, FieldReader, ListWriter};
use super::error::{AmqpCodecError, Result};
use super::types::{Descriptor, Map, Str, Symbol, Value};

fn invalid(composite: &'static str, field: &'static str) -> AmqpCodecError {
    AmqpCodecError::InvalidField { composite, field }
}

/// An address field (`*` requiring `address`): every client sends a string; a symbol is
/// tolerated.
pub(crate) fn read_address(
    r: &mut FieldReader<'_>,
    composite: &'static str,
) -> Result<Option<Str>> {
    match r.value()? {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Symbol(s)) => Ok(Some(Str::from_bytes(s.as_bytes().clone())?)),
        Some(_) => Err(invalid(composite, "address")),
    }
}

/// The `error` composite carried by close, end, detach and rejected.
#[derive(Debug, Clone, PartialEq)]
pub struct AmqpError {
    pub condition: Symbol,
    pub description: Option<Str>,
    pub info: Option<Map>,
}

impl AmqpError {
    pub fn new(condition: &str, description: Option<&str>) -> Self {
        AmqpError {
            condition: Symbol::from(condition),
            description: description.map(Str::from),
            info: None,
        }
    }
}

impl From<&AmqpCodecError> for AmqpError {
    fn from(e: &AmqpCodecError) -> Self {
        AmqpError::new(e.condition(), Some(&e.to_string()))
    }
}

composite! {
    AmqpError = 0x1d, "error" {
        condition = "condition": req,
        description = "description": opt,
        info = "info": opt,
    }
}

/// Link role: the wire value is a boolean (false = sender).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Sender,
    Receiver,
}

impl Role {
    pub fn from_bool(b: bool) -> Self {
        if b {
            Role::Receiver
        } else {
            Role::Sender
        }
    }
    pub fn as_bool(self) -> bool {
        self == Role::Receiver
    }

    /// The mandatory `role` field of attach and disposition.
    #[inline]
    pub(crate) fn read(r: &mut FieldReader<'_>) -> Result<Self> {
        Ok(Role::from_bool(r.req("role")?))
    }

    #[inline]
    pub(crate) fn write(&self, w: &mut ListWriter<'_>) {
        w.boolean(Some(self.as_bool()));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SenderSettleMode {
    Unsettled = 0,
    Settled = 1,
    #[default]
    Mixed = 2,
}

impl SenderSettleMode {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => SenderSettleMode::Unsettled,
            1 => SenderSettleMode::Settled,
            2 => SenderSettleMode::Mixed,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReceiverSettleMode {
    #[default]
    First = 0,
    Second = 1,
}

impl ReceiverSettleMode {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => ReceiverSettleMode::First,
            1 => ReceiverSettleMode::Second,
            _ => return None,
        })
    }
}

pub(crate) fn read_rcv_settle_mode(
    r: &mut FieldReader<'_>,
    composite: &'static str,
) -> Result<Option<ReceiverSettleMode>> {
    r.get::<u8>("rcv-settle-mode")?
        .map(|v| ReceiverSettleMode::from_u8(v).ok_or(invalid(composite, "rcv-settle-mode")))
        .transpose()
}

/// Delivery states and outcomes (messaging and transactions sections).
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryState {
    Received {
        section_number: u32,
        section_offset: u64,
    },
    Accepted,
    Rejected {
        error: Option<AmqpError>,
    },
    Released,
    Modified {
        delivery_failed: bool,
        undeliverable_here: bool,
        message_annotations: Option<Map>,
    },
    Declared {
        txn_id: Bytes,
    },
    TransactionalState {
        txn_id: Bytes,
        outcome: Option<Box<DeliveryState>>,
    },
}

// Written by hand, not with `composite!`: one enum over seven composites (a
// descriptor each), so the descriptor picks the variant and its fields, which
// a per-struct field list cannot say.
impl DeliveryState {
    /// Decodes the fields of the delivery state with descriptor `code`.
    pub(crate) fn decode_fields(code: u64, r: &mut FieldReader<'_>) -> Result<Self> {
        Ok(match code {
            0x23 => DeliveryState::Received {
                section_number: r.req("section-number")?,
                section_offset: r.req("section-offset")?,
            },
            0x24 => DeliveryState::Accepted,
            0x25 => DeliveryState::Rejected {
                error: r.composite("error")?,
            },
            0x26 => DeliveryState::Released,
            0x27 => DeliveryState::Modified {
                delivery_failed: r.get_or("delivery-failed", false)?,
                undeliverable_here: r.get_or("undeliverable-here", false)?,
                message_annotations: r.get("message-annotations")?,
            },
            0x33 => DeliveryState::Declared {
                txn_id: r.req("txn-id")?,
            },
            0x34 => DeliveryState::TransactionalState {
                txn_id: r.req("txn-id")?,
                outcome: r
                    .described("outcome", |c, r| match c {
                        0x24..=0x27 | 0x33 => DeliveryState::decode_fields(c, r),
                        _ => Err(AmqpCodecError::UnknownDescriptor(Descriptor::Code(c))),
                    })?
                    .map(Box::new),
            },
            _ => return Err(AmqpCodecError::UnknownDescriptor(Descriptor::Code(code))),
        })
    }

    /// A field holding a delivery state.
    pub(crate) fn read(r: &mut FieldReader<'_>, field: &'static str) -> Result<Option<Self>> {
        r.described(field, DeliveryState::decode_fields)
    }

    /// Writes a field holding a delivery state.
    #[inline]
    pub(crate) fn write(state: &Option<Self>, w: &mut ListWriter<'_>) {
        w.opt(state.as_ref(), |s, b| s.encode(b));
    }

    pub fn code(&self) -> u64 {
        match self {
            DeliveryState::Received { .. } => 0x23,
            DeliveryState::Accepted => 0x24,
            DeliveryState::Rejected { .. } => 0x25,
            DeliveryState::Released => 0x26,
            DeliveryState::Modified { .. } => 0x27,
            DeliveryState::Declared { .. } => 0x33,
            DeliveryState::TransactionalState { .. } => 0x34,
        }
    }

    pub fn encode(&self, buf: &mut BytesMut) {
        let mut w = ListWriter::begin(buf, self.code());
        match self {
            DeliveryState::Received {
                section_number,
                section_offset,
            } => {
                w.uint(Some(*section_number));
                w.ulong(Some(*section_offset));
            }
            DeliveryState::Accepted | DeliveryState::Released => {}
            DeliveryState::Rejected { error } => w.composite(error.as_ref()),
            DeliveryState::Modified {
                delivery_failed,
                undeliverable_here,
                message_annotations,
            } => {
                w.bool_default(*delivery_failed, false);
                w.bool_default(*undeliverable_here, false);
                w.map(message_annotations.as_ref());
            }
            DeliveryState::Declared { txn_id } => w.binary(Some(txn_id)),
            DeliveryState::TransactionalState { txn_id, outcome } => {
                w.binary(Some(txn_id));
                w.opt(outcome.as_deref(), |o, b| o.encode(b));
            }
        }
        w.finish();
    }

    /// Decodes a delivery state from the front of `buf`, advancing it.
    pub fn decode(buf: &mut Bytes) -> Result<Self> {
        let base = buf.clone();
        let cx = super::types::Ctx::new(&base);
        let (rest, d, mut r) = super::described::read_described(cx, &base, 0, "delivery-state")?;
        let code = d.code().ok_or(AmqpCodecError::UnknownDescriptor(d))?;
        let v = DeliveryState::decode_fields(code, &mut r)?;
        let used = base.len() - rest.len();
        let _ = buf.split_to(used);
        Ok(v)
    }
}

/// terminus-durability (uint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TerminusDurability {
    #[default]
    None = 0,
    Configuration = 1,
    UnsettledState = 2,
}

fn read_durability(r: &mut FieldReader<'_>, composite: &'static str) -> Result<TerminusDurability> {
    Ok(match r.get::<u32>("durable")? {
        None | Some(0) => TerminusDurability::None,
        Some(1) => TerminusDurability::Configuration,
        Some(2) => TerminusDurability::UnsettledState,
        Some(_) => return Err(invalid(composite, "durable")),
    })
}

/// terminus-expiry-policy (symbol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExpiryPolicy {
    LinkDetach,
    #[default]
    SessionEnd,
    ConnectionClose,
    Never,
}

impl ExpiryPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ExpiryPolicy::LinkDetach => "link-detach",
            ExpiryPolicy::SessionEnd => "session-end",
            ExpiryPolicy::ConnectionClose => "connection-close",
            ExpiryPolicy::Never => "never",
        }
    }
}

fn read_expiry(r: &mut FieldReader<'_>, composite: &'static str) -> Result<ExpiryPolicy> {
    let Some(s) = r.get::<Symbol>("expiry-policy")? else {
        return Ok(ExpiryPolicy::SessionEnd);
    };
    Ok(match s.as_str() {
        "link-detach" => ExpiryPolicy::LinkDetach,
        "session-end" => ExpiryPolicy::SessionEnd,
        "connection-close" => ExpiryPolicy::ConnectionClose,
        "never" => ExpiryPolicy::Never,
        _ => return Err(invalid(composite, "expiry-policy")),
    })
}

fn write_durability(d: &TerminusDurability, w: &mut ListWriter<'_>) {
    w.uint_default(*d as u32, 0);
}

fn write_expiry(e: &ExpiryPolicy, w: &mut ListWriter<'_>) {
    w.opt((*e != ExpiryPolicy::SessionEnd).then_some(*e), |e, b| {
        Value::Symbol(Symbol::from_static(e.as_str())).encode(b)
    });
}

/// The source terminus of a link.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Source {
    pub address: Option<Str>,
    pub durable: TerminusDurability,
    pub expiry_policy: ExpiryPolicy,
    pub timeout: u32,
    pub dynamic: bool,
    pub dynamic_node_properties: Option<Map>,
    pub distribution_mode: Option<Symbol>,
    /// filter-set: symbol keys to (usually described) filters, e.g. JMS selectors.
    pub filter: Option<Map>,
    pub default_outcome: Option<DeliveryState>,
    pub outcomes: Vec<Symbol>,
    pub capabilities: Vec<Symbol>,
}

composite! {
    Source = 0x28, "source" {
        address: with(|r| read_address(r, Source::NAME), ToField::put_opt),
        durable: with(|r| read_durability(r, Source::NAME), write_durability),
        expiry_policy: with(|r| read_expiry(r, Source::NAME), write_expiry),
        timeout = "timeout": default(0),
        dynamic = "dynamic": default(false),
        dynamic_node_properties = "dynamic-node-properties": opt,
        distribution_mode = "distribution-mode": opt,
        filter = "filter": opt,
        default_outcome: with(|r| DeliveryState::read(r, "default-outcome"), DeliveryState::write),
        outcomes = "outcomes": symbols,
        capabilities = "capabilities": symbols,
    }
}

/// The target terminus of a link.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Target {
    pub address: Option<Str>,
    pub durable: TerminusDurability,
    pub expiry_policy: ExpiryPolicy,
    pub timeout: u32,
    pub dynamic: bool,
    pub dynamic_node_properties: Option<Map>,
    pub capabilities: Vec<Symbol>,
}

composite! {
    Target = 0x29, "target" {
        address: with(|r| read_address(r, Target::NAME), ToField::put_opt),
        durable: with(|r| read_durability(r, Target::NAME), write_durability),
        expiry_policy: with(|r| read_expiry(r, Target::NAME), write_expiry),
        timeout = "timeout": default(0),
        dynamic = "dynamic": default(false),
        dynamic_node_properties = "dynamic-node-properties": opt,
        capabilities = "capabilities": symbols,
    }
}

/// The transaction coordinator target (a link whose target is this declares transactions).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Coordinator {
    pub capabilities: Vec<Symbol>,
}

composite! {
    Coordinator = 0x30, "coordinator" {
        capabilities = "capabilities": symbols,
    }
}

/// What an attach's target field holds.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetKind {
    Target(Target),
    Coordinator(Coordinator),
}

impl TargetKind {
    pub(crate) fn read(r: &mut FieldReader<'_>) -> Result<Option<Self>> {
        r.described("target", |c, r| match c {
            Target::CODE => Target::decode_fields(r).map(TargetKind::Target),
            Coordinator::CODE => Coordinator::decode_fields(r).map(TargetKind::Coordinator),
            _ => Err(AmqpCodecError::UnexpectedDescriptor {
                expected: "target",
                found: Descriptor::Code(c),
            }),
        })
    }

    pub(crate) fn write(target: &Option<Self>, w: &mut ListWriter<'_>) {
        w.opt(target.as_ref(), |t, b| t.encode(b));
    }

    pub fn encode(&self, buf: &mut BytesMut) {
        match self {
            TargetKind::Target(t) => t.encode(buf),
            TargetKind::Coordinator(c) => c.encode(buf),
        }
    }
}

/// Transaction declare (the amqp-value body of a message sent to the coordinator).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Declare {
    pub global_id: Option<Value>,
}

composite! {
    Declare = 0x31, "declare" {
        // Any value (global transaction ids are not supported, but read).
        global_id: with(
            FieldReader::value,
            |v: &Option<Value>, w: &mut ListWriter<'_>| w.value(v.as_ref().unwrap_or(&Value::Null))
        ),
    }
}

/// Transaction discharge (commit, or rollback when `fail`).
#[derive(Debug, Clone, PartialEq)]
pub struct Discharge {
    pub txn_id: Bytes,
    pub fail: bool,
}

composite! {
    Discharge = 0x32, "discharge" {
        txn_id = "txn-id": req,
        fail = "fail": default(false),
    }
}
