//! The nine AMQP frame bodies (transport section 2.7).

use bytes::{Buf, Bytes, BytesMut};

use super::composite::composite;
use super::definitions::{
    read_rcv_settle_mode, AmqpError, DeliveryState, ReceiverSettleMode, Role, SenderSettleMode,
    Source, TargetKind,
};
use super::described::{read_described, Composite, FieldReader, ListWriter};
use super::error::{AmqpCodecError, Result};
use super::types::{code, encode, Ctx, Map, Str, Symbol};

fn invalid(composite: &'static str, field: &'static str) -> AmqpCodecError {
    AmqpCodecError::InvalidField { composite, field }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Open {
    pub container_id: Str,
    pub hostname: Option<Str>,
    pub max_frame_size: u32,
    pub channel_max: u16,
    /// Milliseconds; `None` means no idle timeout.
    pub idle_time_out: Option<u32>,
    pub outgoing_locales: Vec<Symbol>,
    pub incoming_locales: Vec<Symbol>,
    pub offered_capabilities: Vec<Symbol>,
    pub desired_capabilities: Vec<Symbol>,
    pub properties: Option<Map>,
}

impl Open {
    pub fn new(container_id: &str) -> Self {
        Open {
            container_id: Str::from(container_id),
            hostname: None,
            max_frame_size: u32::MAX,
            channel_max: u16::MAX,
            idle_time_out: None,
            outgoing_locales: Vec::new(),
            incoming_locales: Vec::new(),
            offered_capabilities: Vec::new(),
            desired_capabilities: Vec::new(),
            properties: None,
        }
    }
}

composite! {
    Open = 0x10, "open" {
        container_id = "container-id": req,
        hostname = "hostname": opt,
        max_frame_size = "max-frame-size": default(u32::MAX),
        channel_max = "channel-max": default(u16::MAX),
        idle_time_out = "idle-time-out": opt,
        outgoing_locales = "outgoing-locales": symbols,
        incoming_locales = "incoming-locales": symbols,
        offered_capabilities = "offered-capabilities": symbols,
        desired_capabilities = "desired-capabilities": symbols,
        properties = "properties": opt,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Begin {
    pub remote_channel: Option<u16>,
    pub next_outgoing_id: u32,
    pub incoming_window: u32,
    pub outgoing_window: u32,
    pub handle_max: u32,
    pub offered_capabilities: Vec<Symbol>,
    pub desired_capabilities: Vec<Symbol>,
    pub properties: Option<Map>,
}

composite! {
    Begin = 0x11, "begin" {
        remote_channel = "remote-channel": opt,
        next_outgoing_id = "next-outgoing-id": req,
        incoming_window = "incoming-window": req,
        outgoing_window = "outgoing-window": req,
        handle_max = "handle-max": default(u32::MAX),
        offered_capabilities = "offered-capabilities": symbols,
        desired_capabilities = "desired-capabilities": symbols,
        properties = "properties": opt,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attach {
    pub name: Str,
    pub handle: u32,
    pub role: Role,
    pub snd_settle_mode: SenderSettleMode,
    pub rcv_settle_mode: ReceiverSettleMode,
    pub source: Option<Source>,
    pub target: Option<TargetKind>,
    pub unsettled: Option<Map>,
    pub incomplete_unsettled: bool,
    pub initial_delivery_count: Option<u32>,
    pub max_message_size: Option<u64>,
    pub offered_capabilities: Vec<Symbol>,
    pub desired_capabilities: Vec<Symbol>,
    pub properties: Option<Map>,
}

impl Attach {
    pub fn new(name: &str, handle: u32, role: Role) -> Self {
        Attach {
            name: Str::from(name),
            handle,
            role,
            snd_settle_mode: SenderSettleMode::Mixed,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: None,
            target: None,
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: None,
            max_message_size: None,
            offered_capabilities: Vec::new(),
            desired_capabilities: Vec::new(),
            properties: None,
        }
    }
}

composite! {
    Attach = 0x12, "attach" {
        name = "name": req,
        handle = "handle": req,
        role: with(Role::read, Role::write),
        snd_settle_mode: with(read_snd_settle_mode, write_snd_settle_mode),
        rcv_settle_mode: with(
            |r| read_rcv_settle_mode(r, Attach::NAME).map(Option::unwrap_or_default),
            |m: &ReceiverSettleMode, w: &mut ListWriter<'_>| {
                w.ubyte((*m != ReceiverSettleMode::First).then_some(*m as u8))
            }
        ),
        source = "source": composite,
        target: with(TargetKind::read, TargetKind::write),
        unsettled = "unsettled": opt,
        incomplete_unsettled = "incomplete-unsettled": default(false),
        initial_delivery_count = "initial-delivery-count": opt,
        max_message_size = "max-message-size": opt,
        offered_capabilities = "offered-capabilities": symbols,
        desired_capabilities = "desired-capabilities": symbols,
        properties = "properties": opt,
    }
}

fn read_snd_settle_mode(r: &mut FieldReader<'_>) -> Result<SenderSettleMode> {
    Ok(match r.get::<u8>("snd-settle-mode")? {
        None => SenderSettleMode::Mixed,
        Some(v) => SenderSettleMode::from_u8(v).ok_or(invalid(Attach::NAME, "snd-settle-mode"))?,
    })
}

fn write_snd_settle_mode(m: &SenderSettleMode, w: &mut ListWriter<'_>) {
    w.ubyte((*m != SenderSettleMode::Mixed).then_some(*m as u8));
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Flow {
    pub next_incoming_id: Option<u32>,
    pub incoming_window: u32,
    pub next_outgoing_id: u32,
    pub outgoing_window: u32,
    pub handle: Option<u32>,
    pub delivery_count: Option<u32>,
    pub link_credit: Option<u32>,
    pub available: Option<u32>,
    pub drain: bool,
    pub echo: bool,
    pub properties: Option<Map>,
}

composite! {
    Flow = 0x13, "flow" {
        next_incoming_id = "next-incoming-id": opt,
        incoming_window = "incoming-window": req,
        next_outgoing_id = "next-outgoing-id": req,
        outgoing_window = "outgoing-window": req,
        handle = "handle": opt,
        delivery_count = "delivery-count": opt,
        link_credit = "link-credit": opt,
        available = "available": opt,
        drain = "drain": default(false),
        echo = "echo": default(false),
        properties = "properties": opt,
    }
}

/// A transfer performative; the message bytes travel beside it in [`super::codec::Frame`].
/// `settled` and `rcv_settle_mode` stay optional: on continuation transfers absence means
/// "as on the first transfer", which only the link layer knows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Transfer {
    pub handle: u32,
    pub delivery_id: Option<u32>,
    pub delivery_tag: Option<Bytes>,
    pub message_format: Option<u32>,
    pub settled: Option<bool>,
    pub more: bool,
    pub rcv_settle_mode: Option<ReceiverSettleMode>,
    pub state: Option<DeliveryState>,
    pub resume: bool,
    pub aborted: bool,
    pub batchable: bool,
}

composite! {
    Transfer = 0x14, "transfer" {
        handle = "handle": req,
        delivery_id = "delivery-id": opt,
        delivery_tag = "delivery-tag": opt,
        message_format = "message-format": opt,
        settled = "settled": opt,
        more = "more": default(false),
        // Absent on a continuation means "as on the first transfer": no default here.
        rcv_settle_mode: with(
            |r| read_rcv_settle_mode(r, Transfer::NAME),
            |m: &Option<ReceiverSettleMode>, w: &mut ListWriter<'_>| {
                w.ubyte(m.map(|m| m as u8))
            }
        ),
        state: with(|r| DeliveryState::read(r, "state"), DeliveryState::write),
        resume = "resume": default(false),
        aborted = "aborted": default(false),
        batchable = "batchable": default(false),
    }
}

/// Appends the transfer that opens a delivery the broker sends: what
/// [`Composite::encode`] writes for a `Transfer` with this handle, delivery id,
/// `settled`, message format 0 and the delivery id (big-endian) as its tag,
/// without building one (the tag is written from the stack, not a `Bytes`).
pub fn encode_delivery_start(buf: &mut BytesMut, handle: u32, delivery_id: u32, settled: bool) {
    // Laid out by hand in one stack buffer and appended once: this runs for every
    // message sent, and the list writer's capacity checks, list32 header shrunk to
    // list8 afterwards (a move) and per-field calls were most of its cost.
    let mut out = [0u8; 26];
    out[..4].copy_from_slice(&[
        code::DESCRIBED,
        code::SMALLULONG,
        Transfer::CODE as u8,
        code::LIST8,
    ]);
    // out[4] is the list's size, out[5] its count: handle, delivery-id, tag, format, settled.
    out[5] = 5;
    let mut at = encode::uint_at(&mut out, 6, handle);
    at = encode::uint_at(&mut out, at, delivery_id);
    out[at] = code::VBIN8;
    out[at + 1] = 4;
    out[at + 2..at + 6].copy_from_slice(&delivery_id.to_be_bytes());
    out[at + 6] = code::UINT0;
    out[at + 7] = if settled { code::TRUE } else { code::FALSE };
    at += 8;
    // The size counts the count byte and the fields: everything after itself.
    out[4] = (at - 5) as u8;
    buf.extend_from_slice(&out[..at]);
}

/// A sending link's credit after a flow (transport 2.6.7): the receiver's
/// delivery-count plus its link-credit minus the sender's own delivery-count.
/// A receiver count ahead of the sender's is nonsense: the link-credit alone counts then.
pub fn sender_credit(their_delivery_count: u32, link_credit: u32, our_delivery_count: u32) -> u32 {
    their_delivery_count
        .wrapping_add(link_credit)
        .wrapping_sub(our_delivery_count)
        .min(link_credit)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Disposition {
    pub role: Role,
    pub first: u32,
    pub last: Option<u32>,
    pub settled: bool,
    pub state: Option<DeliveryState>,
    pub batchable: bool,
}

impl Disposition {
    /// A receiver settling deliveries `first..=last` as accepted, in one frame.
    pub fn accepted(first: u32, last: u32) -> Disposition {
        Disposition {
            role: Role::Receiver,
            first,
            last: (last != first).then_some(last),
            settled: true,
            state: Some(DeliveryState::Accepted),
            batchable: false,
        }
    }
}

composite! {
    Disposition = 0x15, "disposition" {
        role: with(Role::read, Role::write),
        first = "first": req,
        last = "last": opt,
        settled = "settled": default(false),
        state: with(|r| DeliveryState::read(r, "state"), DeliveryState::write),
        batchable = "batchable": default(false),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Detach {
    pub handle: u32,
    pub closed: bool,
    pub error: Option<AmqpError>,
}

composite! {
    Detach = 0x16, "detach" {
        handle = "handle": req,
        closed = "closed": default(false),
        error = "error": composite,
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct End {
    pub error: Option<AmqpError>,
}

composite! {
    End = 0x17, "end" {
        error = "error": composite,
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Close {
    pub error: Option<AmqpError>,
}

composite! {
    Close = 0x18, "close" {
        error = "error": composite,
    }
}

/// The body of an AMQP (type 0) frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Performative {
    /// Boxed: open and attach are large and rare; transfer and flow stay inline.
    Open(Box<Open>),
    Begin(Begin),
    Attach(Box<Attach>),
    Flow(Flow),
    Transfer(Transfer),
    Disposition(Disposition),
    Detach(Detach),
    End(End),
    Close(Close),
}

impl Performative {
    pub fn name(&self) -> &'static str {
        match self {
            Performative::Open(_) => Open::NAME,
            Performative::Begin(_) => Begin::NAME,
            Performative::Attach(_) => Attach::NAME,
            Performative::Flow(_) => Flow::NAME,
            Performative::Transfer(_) => Transfer::NAME,
            Performative::Disposition(_) => Disposition::NAME,
            Performative::Detach(_) => Detach::NAME,
            Performative::End(_) => End::NAME,
            Performative::Close(_) => Close::NAME,
        }
    }

    pub fn encode(&self, buf: &mut BytesMut) {
        match self {
            Performative::Open(p) => p.encode(buf),
            Performative::Begin(p) => p.encode(buf),
            Performative::Attach(p) => p.encode(buf),
            Performative::Flow(p) => p.encode(buf),
            Performative::Transfer(p) => p.encode(buf),
            Performative::Disposition(p) => p.encode(buf),
            Performative::Detach(p) => p.encode(buf),
            Performative::End(p) => p.encode(buf),
            Performative::Close(p) => p.encode(buf),
        }
    }

    /// Decodes a performative from the front of `buf`, advancing it past the performative
    /// (for a transfer, what remains is the message payload).
    #[inline]
    pub fn decode(buf: &mut Bytes) -> Result<Self> {
        // Read where it lies and then advanced past: no reference count up and down
        // per frame for a clone or a split of the buffer.
        if let Some((transfer, used)) = super::quick_transfer::decode(&Ctx::new(buf), buf) {
            buf.advance(used);
            return Ok(Performative::Transfer(transfer));
        }
        Self::decode_in_full(buf)
    }

    /// [`decode`](Self::decode) through the field reader for every performative:
    /// what the quick transfer path is held to.
    pub(super) fn decode_in_full(buf: &mut Bytes) -> Result<Self> {
        let cx = Ctx::new(buf);
        let (rest, d, mut r) = read_described(cx, buf, 0, "performative")?;
        let p = match d.code() {
            Some(Open::CODE) => Performative::Open(Box::new(Open::decode_fields(&mut r)?)),
            Some(Begin::CODE) => Performative::Begin(Begin::decode_fields(&mut r)?),
            Some(Attach::CODE) => Performative::Attach(Box::new(Attach::decode_fields(&mut r)?)),
            Some(Flow::CODE) => Performative::Flow(Flow::decode_fields(&mut r)?),
            Some(Transfer::CODE) => Performative::Transfer(Transfer::decode_fields(&mut r)?),
            Some(Disposition::CODE) => {
                Performative::Disposition(Disposition::decode_fields(&mut r)?)
            }
            Some(Detach::CODE) => Performative::Detach(Detach::decode_fields(&mut r)?),
            Some(End::CODE) => Performative::End(End::decode_fields(&mut r)?),
            Some(Close::CODE) => Performative::Close(Close::decode_fields(&mut r)?),
            _ => return Err(AmqpCodecError::UnknownDescriptor(d)),
        };
        let used = buf.len() - rest.len();
        buf.advance(used);
        Ok(p)
    }
}

macro_rules! into_performative {
    ($($t:ident),*) => {$(
        impl From<$t> for Performative {
            fn from(p: $t) -> Self {
                Performative::$t(p)
            }
        }
    )*};
}
into_performative!(Begin, Flow, Transfer, Disposition, Detach, End, Close);

impl From<Open> for Performative {
    fn from(p: Open) -> Self {
        Performative::Open(Box::new(p))
    }
}

impl From<Attach> for Performative {
    fn from(p: Attach) -> Self {
        Performative::Attach(Box::new(p))
    }
}

#[cfg(test)]
mod tests;
