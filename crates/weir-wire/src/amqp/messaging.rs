//! Message sections (messaging section 3.2) and [`MessageView`], which parses a complete
//! message payload while remembering where each section lies, so the broker can forward
//! the bare message untouched and re-emit only the header and annotations it changed.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use super::composite::{composite, ToField};
use super::described::{list_fields, Composite, FieldReader, ListWriter};
use super::error::{AmqpCodecError, Result};
use super::types::decode::{
    compound_header, descriptor_after_marker, encoded_len, finish, value as decode_value,
    variable_slice,
};
use super::types::{code, encode, Ctx, Descriptor, Map, Str, Symbol, Value};

pub const HEADER: u64 = 0x70;
pub const DELIVERY_ANNOTATIONS: u64 = 0x71;
pub const MESSAGE_ANNOTATIONS: u64 = 0x72;
pub const PROPERTIES: u64 = 0x73;
pub const APPLICATION_PROPERTIES: u64 = 0x74;
pub const DATA: u64 = 0x75;
pub const AMQP_SEQUENCE: u64 = 0x76;
pub const AMQP_VALUE: u64 = 0x77;
pub const FOOTER: u64 = 0x78;

/// The header section: transport-level delivery information the broker may rewrite.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub durable: bool,
    pub priority: u8,
    /// Milliseconds.
    pub ttl: Option<u32>,
    pub first_acquirer: bool,
    pub delivery_count: u32,
}

impl Default for Header {
    fn default() -> Self {
        Header {
            durable: false,
            priority: 4,
            ttl: None,
            first_acquirer: false,
            delivery_count: 0,
        }
    }
}

composite! {
    Header = HEADER, "header" {
        durable = "durable": default(false),
        priority = "priority": default(4),
        ttl = "ttl": opt,
        first_acquirer = "first-acquirer": default(false),
        delivery_count = "delivery-count": default(0),
    }
    extra {
        /// What `encode_fields` writes, laid out on the stack and appended once: every
        /// message the broker sends over AMQP gets a fresh header.
        fn encode(&self, buf: &mut BytesMut) {
            let mut out = [code::NULL; 20];
            out[..4].copy_from_slice(&[code::DESCRIBED, code::SMALLULONG, HEADER as u8, code::LIST8]);
            // Fields at defaults are nulls; trailing nulls are left off. `end` is where
            // the last field that is not ends, and how many fields that makes.
            let mut at = 6;
            let mut end = (at, 0u8);
            if self.durable {
                out[at] = code::TRUE;
                end = (at + 1, 1);
            }
            at += 1;
            if self.priority != 4 {
                out[at] = code::UBYTE;
                out[at + 1] = self.priority;
                at += 2;
                end = (at, 2);
            } else {
                at += 1;
            }
            match self.ttl {
                Some(ttl) => {
                    at = encode::uint_at(&mut out, at, ttl);
                    end = (at, 3);
                }
                None => at += 1,
            }
            if self.first_acquirer {
                out[at] = code::TRUE;
                end = (at + 1, 4);
            }
            at += 1;
            if self.delivery_count != 0 {
                end = (encode::uint_at(&mut out, at, self.delivery_count), 5);
            }
            match end {
                (_, 0) => buf.extend_from_slice(&[
                    code::DESCRIBED,
                    code::SMALLULONG,
                    HEADER as u8,
                    code::LIST0,
                ]),
                (len, count) => {
                    // A list8's size counts its count byte and fields: all after itself.
                    out[4] = (len - 5) as u8;
                    out[5] = count;
                    buf.extend_from_slice(&out[..len]);
                }
            }
        }
    }
}

/// message-id / correlation-id: one of four types.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MessageId {
    Ulong(u64),
    Uuid([u8; 16]),
    Binary(Bytes),
    String(Str),
}

impl MessageId {
    fn read(r: &mut FieldReader<'_>, field: &'static str) -> Result<Option<Self>> {
        Ok(match r.value()? {
            None => None,
            Some(Value::Ulong(v)) => Some(MessageId::Ulong(v)),
            Some(Value::Uuid(v)) => Some(MessageId::Uuid(v)),
            Some(Value::Binary(v)) => Some(MessageId::Binary(v)),
            Some(Value::String(v)) => Some(MessageId::String(v)),
            Some(_) => {
                return Err(AmqpCodecError::InvalidField {
                    composite: Properties::NAME,
                    field,
                })
            }
        })
    }

    fn write(id: &Option<Self>, w: &mut ListWriter<'_>) {
        w.opt(id.as_ref(), |m, b| m.to_value().encode(b));
    }

    pub fn to_value(&self) -> Value {
        match self {
            MessageId::Ulong(v) => Value::Ulong(*v),
            MessageId::Uuid(v) => Value::Uuid(*v),
            MessageId::Binary(v) => Value::Binary(v.clone()),
            MessageId::String(v) => Value::String(v.clone()),
        }
    }
}

/// The immutable properties of the bare message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Properties {
    pub message_id: Option<MessageId>,
    pub user_id: Option<Bytes>,
    pub to: Option<Str>,
    pub subject: Option<Str>,
    pub reply_to: Option<Str>,
    pub correlation_id: Option<MessageId>,
    pub content_type: Option<Symbol>,
    pub content_encoding: Option<Symbol>,
    /// Milliseconds since the epoch.
    pub absolute_expiry_time: Option<i64>,
    pub creation_time: Option<i64>,
    pub group_id: Option<Str>,
    /// A uint on the wire. Qpid JMS maps JMSXGroupSeq -1 to 4294967295, so the full u32
    /// range is meaningful.
    pub group_sequence: Option<u32>,
    pub reply_to_group_id: Option<Str>,
}

fn read_address(r: &mut FieldReader<'_>) -> Result<Option<Str>> {
    super::definitions::read_address(r, Properties::NAME)
}

composite! {
    Properties = PROPERTIES, "properties" {
        message_id: with(|r| MessageId::read(r, "message-id"), MessageId::write),
        user_id = "user-id": opt,
        to: with(read_address, ToField::put_opt),
        subject = "subject": opt,
        reply_to: with(read_address, ToField::put_opt),
        correlation_id: with(|r| MessageId::read(r, "correlation-id"), MessageId::write),
        content_type = "content-type": opt,
        content_encoding = "content-encoding": opt,
        absolute_expiry_time = "absolute-expiry-time": timestamp,
        creation_time = "creation-time": timestamp,
        group_id = "group-id": opt,
        group_sequence: with(read_group_sequence, ToField::put_opt),
        reply_to_group_id = "reply-to-group-id": opt,
    }
}

/// A uint, but a signed int from sloppy clients is tolerated (-1 becomes
/// 4294967295, as in JMS).
#[inline]
fn read_group_sequence(r: &mut FieldReader<'_>) -> Result<Option<u32>> {
    Ok(match r.value()? {
        None => None,
        Some(Value::Uint(v)) => Some(v),
        Some(Value::Int(v)) => Some(v as u32),
        Some(_) => {
            return Err(AmqpCodecError::InvalidField {
                composite: Properties::NAME,
                field: "group-sequence",
            })
        }
    })
}

/// The body: data sections, amqp-sequence sections, or one amqp-value.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Body {
    #[default]
    Empty,
    Data(Vec<Bytes>),
    Sequence(Vec<Vec<Value>>),
    Value(Value),
}

/// A message as typed parts (for building one, e.g. from a STOMP frame).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Message {
    pub header: Option<Header>,
    pub delivery_annotations: Option<Map>,
    pub message_annotations: Option<Map>,
    pub properties: Option<Properties>,
    pub application_properties: Option<Map>,
    pub body: Body,
    pub footer: Option<Map>,
}

fn encode_map_section(code: u64, m: &Map, buf: &mut BytesMut) {
    section_marker(code, buf);
    encode::map(m, buf);
}

fn section_marker(code: u64, buf: &mut BytesMut) {
    encode::descriptor(&Descriptor::Code(code), buf);
}

impl Message {
    pub fn with_data(data: Bytes) -> Self {
        Message {
            body: Body::Data(vec![data]),
            ..Message::default()
        }
    }

    /// Appends header, delivery-annotations and message-annotations (the parts a broker
    /// may rewrite).
    fn encode_annotations(
        header: Option<&Header>,
        delivery_annotations: Option<&Map>,
        message_annotations: Option<&Map>,
        buf: &mut BytesMut,
    ) {
        if let Some(h) = header {
            h.encode(buf);
        }
        if let Some(m) = delivery_annotations {
            encode_map_section(DELIVERY_ANNOTATIONS, m, buf);
        }
        if let Some(m) = message_annotations {
            encode_map_section(MESSAGE_ANNOTATIONS, m, buf);
        }
    }

    pub fn encode(&self, buf: &mut BytesMut) {
        Self::encode_annotations(
            self.header.as_ref(),
            self.delivery_annotations.as_ref(),
            self.message_annotations.as_ref(),
            buf,
        );
        if let Some(p) = &self.properties {
            p.encode(buf);
        }
        if let Some(m) = &self.application_properties {
            encode_map_section(APPLICATION_PROPERTIES, m, buf);
        }
        match &self.body {
            Body::Empty => {}
            Body::Data(chunks) => {
                for c in chunks {
                    section_marker(DATA, buf);
                    encode::variable(code::VBIN8, code::VBIN32, c, buf);
                }
            }
            Body::Sequence(seqs) => {
                for s in seqs {
                    section_marker(AMQP_SEQUENCE, buf);
                    encode::list(s, buf);
                }
            }
            Body::Value(v) => {
                section_marker(AMQP_VALUE, buf);
                v.encode(buf);
            }
        }
        if let Some(m) = &self.footer {
            encode_map_section(FOOTER, m, buf);
        }
    }

    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        b.freeze()
    }
}

/// Byte ranges of each section within the raw payload.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SectionRanges {
    pub header: Option<Range<usize>>,
    pub delivery_annotations: Option<Range<usize>>,
    pub message_annotations: Option<Range<usize>>,
    pub properties: Option<Range<usize>>,
    pub application_properties: Option<Range<usize>>,
    /// From the first body section to the end of the last one.
    pub body: Option<Range<usize>>,
    pub footer: Option<Range<usize>>,
    /// The bare message: properties, application-properties and body (immutable in transit).
    pub bare: Range<usize>,
}

/// A parsed message payload that keeps the original bytes.
///
/// The application properties are not decoded up front: the broker reads each of them once,
/// straight from the payload ([`MessageView::application_property_entries`]); building them
/// as a map first was a tenth of its CPU under AMQP load.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageView {
    raw: Bytes,
    /// Every section but the application properties (always `None` here).
    message: Message,
    ranges: SectionRanges,
    /// Where the application-properties map (or null) lies, after its descriptor.
    application_properties: Option<Range<usize>>,
    /// A body of data sections is kept as where they lie, not as `Body::Data`
    /// (a vector allocated and freed per message, and a reference count per
    /// section); [`MessageView::body`] builds that only when asked.
    data: DataSections,
    data_body: std::sync::OnceLock<Body>,
}

/// Where a body's data sections lie (their binary contents, constructor excluded).
#[derive(Debug, Clone, Default, PartialEq)]
struct DataSections {
    first: Option<Range<usize>>,
    /// Any after the first (rare).
    more: Vec<Range<usize>>,
}

impl DataSections {
    fn push(&mut self, range: Range<usize>) {
        match self.first {
            None => self.first = Some(range),
            Some(_) => self.more.push(range),
        }
    }
}

/// Steps over a data section's value, which must be a binary; returns where its
/// contents lie within `i`.
fn data_section(i: &[u8]) -> Result<(&[u8], Range<usize>)> {
    let (head, wide) = match i.first() {
        Some(&code::VBIN8) => (2, false),
        Some(&code::VBIN32) => (5, true),
        _ => return Err(invalid_body("data")),
    };
    let (rest, contents) = finish(variable_slice(&i[1..], wide))?;
    Ok((rest, head..head + contents.len()))
}

/// Checks the bounds of an application-properties value (a map or null) and steps over it;
/// its entries are checked when read.
fn skip_map_value(i: &[u8]) -> Result<&[u8]> {
    let section = || AmqpCodecError::InvalidField {
        composite: "application-properties",
        field: "map",
    };
    let (&c, rest) = i.split_first().ok_or(AmqpCodecError::Truncated)?;
    match c {
        code::NULL => Ok(rest),
        code::MAP8 | code::MAP32 => {
            let (rest, (_, count)) = finish(compound_header(rest, c == code::MAP32))?;
            if count % 2 == 0 {
                Ok(rest)
            } else {
                Err(AmqpCodecError::InvalidValue("map (odd element count)"))
            }
        }
        _ => Err(section()),
    }
}

/// The application properties of a [`MessageView`], one entry at a time, read from the
/// payload: the key as text when it is a string or symbol (the spec requires a string),
/// the value as decoded.
pub struct ApplicationProperties<'a> {
    cx: Ctx<'a>,
    rest: &'a [u8],
    entries_left: usize,
}

impl<'a> ApplicationProperties<'a> {
    /// The entries of an encoded map (or null) that `parse` checked:
    /// [`MessageView::application_properties_bytes`].
    pub fn of(map: &'a Bytes) -> Self {
        Self::within(Ctx::new(map), map)
    }

    fn within(cx: Ctx<'a>, value: &'a [u8]) -> Self {
        let empty = ApplicationProperties {
            cx,
            rest: &[],
            entries_left: 0,
        };
        let (wide, after) = match value.split_first() {
            Some((&code::MAP8, after)) => (false, after),
            Some((&code::MAP32, after)) => (true, after),
            _ => return empty,
        };
        match finish(compound_header(after, wide)) {
            Ok((_, (body, count))) => ApplicationProperties {
                rest: body,
                entries_left: count / 2,
                ..empty
            },
            // Checked by `parse`.
            Err(_) => empty,
        }
    }

    fn key(&self, i: &'a [u8]) -> Result<(&'a [u8], Option<&'a str>)> {
        let text = |wide: bool| -> Result<(&'a [u8], Option<&'a str>)> {
            let (rest, text) = finish(variable_slice(&i[1..], wide))?;
            Ok((rest, Some(super::types::text(text)?)))
        };
        match i.first() {
            Some(&(code::STR8 | code::SYM8)) => text(false),
            Some(&(code::STR32 | code::SYM32)) => text(true),
            _ => {
                let (rest, _) = finish(decode_value(&self.cx, i, 2))?;
                Ok((rest, None))
            }
        }
    }

    /// The next entry with its value still encoded (constructor included), for a
    /// caller that reads common scalars in place and [`ApplicationProperties::decode`]s
    /// the rest. Same entries and errors as the iterator.
    pub fn next_encoded(&mut self) -> Option<Result<(Option<&'a str>, &'a [u8])>> {
        if self.entries_left == 0 {
            let trailing = std::mem::take(&mut self.rest).len();
            return (trailing > 0).then_some(Err(AmqpCodecError::TrailingBytes(trailing)));
        }
        self.entries_left -= 1;
        let entry = self.key(self.rest).and_then(|(rest, key)| {
            let Some(len) = encoded_len(rest) else {
                // Not a value: the decoder says what is wrong with it.
                return finish(decode_value(&self.cx, rest, 2))
                    .and_then(|_| Err(AmqpCodecError::Malformed));
            };
            self.rest = &rest[len..];
            Ok((key, &rest[..len]))
        });
        if entry.is_err() {
            self.entries_left = 0;
            self.rest = &[];
        }
        Some(entry)
    }

    /// Decodes a value [`ApplicationProperties::next_encoded`] returned.
    pub fn decode(&self, encoded: &'a [u8]) -> Result<Value> {
        match finish(decode_value(&self.cx, encoded, 2))? {
            ([], value) => Ok(value),
            // Its size fields and its contents disagree.
            _ => Err(AmqpCodecError::Malformed),
        }
    }

    fn entry(&mut self) -> Result<(Option<&'a str>, Value)> {
        let (rest, key) = self.key(self.rest)?;
        let (rest, value) = finish(decode_value(&self.cx, rest, 2))?;
        self.rest = rest;
        Ok((key, value))
    }
}

impl<'a> Iterator for ApplicationProperties<'a> {
    type Item = Result<(Option<&'a str>, Value)>;

    fn size_hint(&self) -> (usize, Option<usize>) {
        // Plus one for a trailing-bytes error.
        (0, Some(self.entries_left + 1))
    }

    fn next(&mut self) -> Option<Self::Item> {
        if self.entries_left == 0 {
            // Bytes the count does not cover make the map malformed.
            let trailing = std::mem::take(&mut self.rest).len();
            return (trailing > 0).then_some(Err(AmqpCodecError::TrailingBytes(trailing)));
        }
        self.entries_left -= 1;
        let entry = self.entry();
        if entry.is_err() {
            self.entries_left = 0;
            self.rest = &[];
        }
        Some(entry)
    }
}

fn map_section(v: Value, name: &'static str) -> Result<Map> {
    match v {
        Value::Map(m) => Ok(m),
        Value::Null => Ok(Map::new()),
        _ => Err(AmqpCodecError::InvalidField {
            composite: name,
            field: "map",
        }),
    }
}

impl MessageView {
    /// Parses a complete message payload (all transfer frames of a delivery joined).
    pub fn parse(raw: Bytes) -> Result<Self> {
        let cx = Ctx::new(&raw);
        let mut i: &[u8] = &raw;
        let mut msg = Message::default();
        let mut ranges = SectionRanges::default();
        // Sections must come in spec order; only data/amqp-sequence may repeat.
        let mut last_code = 0u64;
        let mut bare_start = None;
        let mut bare_end = None;
        let mut application_properties = None;
        let mut data = DataSections::default();
        while !i.is_empty() {
            let start = raw.len() - i.len();
            if i[0] != code::DESCRIBED {
                return Err(AmqpCodecError::NotASection);
            }
            let (rest, d) = finish(descriptor_after_marker(&cx, &i[1..], 0))?;
            let c = d
                .code()
                .filter(|c| (HEADER..=FOOTER).contains(c))
                .ok_or_else(|| AmqpCodecError::UnknownDescriptor(d.clone()))?;
            let repeatable = c == last_code && (c == DATA || c == AMQP_SEQUENCE);
            let body_mix = (DATA..=AMQP_VALUE).contains(&c)
                && (DATA..=AMQP_VALUE).contains(&last_code)
                && c != last_code;
            if (c <= last_code && !repeatable) || body_mix {
                return Err(AmqpCodecError::SectionOrder(section_name(c)));
            }
            last_code = c;
            let rest = match c {
                APPLICATION_PROPERTIES => {
                    let value_at = raw.len() - rest.len();
                    let after = skip_map_value(rest)?;
                    application_properties = Some(value_at..raw.len() - after.len());
                    after
                }
                DATA => {
                    let value_at = raw.len() - rest.len();
                    let (after, contents) = data_section(rest)?;
                    data.push(value_at + contents.start..value_at + contents.end);
                    after
                }
                HEADER | PROPERTIES => {
                    let (rest, mut r) = list_fields(cx, rest, 1, section_name(c))?;
                    if c == HEADER {
                        msg.header = Some(Header::decode_fields(&mut r)?);
                    } else {
                        msg.properties = Some(Properties::decode_fields(&mut r)?);
                    }
                    rest
                }
                _ => {
                    let (rest, v) = finish(decode_value(&cx, rest, 1))?;
                    let name = section_name(c);
                    match c {
                        DELIVERY_ANNOTATIONS => {
                            msg.delivery_annotations = Some(map_section(v, name)?)
                        }
                        MESSAGE_ANNOTATIONS => {
                            msg.message_annotations = Some(map_section(v, name)?)
                        }
                        FOOTER => msg.footer = Some(map_section(v, name)?),
                        AMQP_SEQUENCE => match (&mut msg.body, v) {
                            (Body::Sequence(seqs), Value::List(l)) => seqs.push(l),
                            (body @ Body::Empty, Value::List(l)) => *body = Body::Sequence(vec![l]),
                            _ => return Err(invalid_body(name)),
                        },
                        _ => msg.body = Body::Value(v),
                    }
                    rest
                }
            };
            let end = raw.len() - rest.len();
            let range = Some(start..end);
            match c {
                HEADER => ranges.header = range,
                DELIVERY_ANNOTATIONS => ranges.delivery_annotations = range,
                MESSAGE_ANNOTATIONS => ranges.message_annotations = range,
                PROPERTIES => ranges.properties = range,
                APPLICATION_PROPERTIES => ranges.application_properties = range,
                FOOTER => ranges.footer = range,
                _ => {
                    let body_start = ranges.body.as_ref().map_or(start, |r| r.start);
                    ranges.body = Some(body_start..end);
                }
            }
            if (PROPERTIES..=AMQP_VALUE).contains(&c) {
                bare_start.get_or_insert(start);
                bare_end = Some(end);
            }
            i = rest;
        }
        let at = ranges.footer.as_ref().map_or(raw.len(), |r| r.start);
        ranges.bare = bare_start.unwrap_or(at)..bare_end.unwrap_or(at);
        Ok(MessageView {
            raw,
            message: msg,
            ranges,
            application_properties,
            data,
            data_body: std::sync::OnceLock::new(),
        })
    }

    pub fn raw(&self) -> &Bytes {
        &self.raw
    }
    /// Every section as typed parts, the application properties decoded too.
    pub fn to_message(&self) -> Result<Message> {
        Ok(Message {
            application_properties: self.application_properties()?,
            body: self.body().clone(),
            ..self.message.clone()
        })
    }
    pub fn ranges(&self) -> &SectionRanges {
        &self.ranges
    }
    pub fn header(&self) -> Option<&Header> {
        self.message.header.as_ref()
    }
    pub fn delivery_annotations(&self) -> Option<&Map> {
        self.message.delivery_annotations.as_ref()
    }
    pub fn message_annotations(&self) -> Option<&Map> {
        self.message.message_annotations.as_ref()
    }
    pub fn properties(&self) -> Option<&Properties> {
        self.message.properties.as_ref()
    }
    /// The application properties as a map, decoded now (for rebuilding the message).
    pub fn application_properties(&self) -> Result<Option<Map>> {
        let Some(range) = self.application_properties.clone() else {
            return Ok(None);
        };
        let cx = Ctx::new(&self.raw);
        let (_, v) = finish(decode_value(&cx, &self.raw[range], 1))?;
        map_section(v, "application-properties").map(Some)
    }
    /// The application properties one entry at a time, without building a map.
    pub fn application_property_entries(&self) -> ApplicationProperties<'_> {
        match self.application_properties.clone() {
            Some(range) => ApplicationProperties::within(Ctx::new(&self.raw), &self.raw[range]),
            None => ApplicationProperties::within(Ctx::new(&self.raw), &[]),
        }
    }

    /// The encoded application-properties map (or null), borrowed; empty without one.
    pub fn application_properties_encoded(&self) -> &[u8] {
        match &self.application_properties {
            Some(range) => &self.raw[range.clone()],
            None => &[],
        }
    }

    /// The encoded application-properties map (or null), a slice of the payload.
    pub fn application_properties_bytes(&self) -> Option<Bytes> {
        self.application_properties
            .clone()
            .map(|range| self.raw.slice(range))
    }

    pub fn body(&self) -> &Body {
        let Some(first) = &self.data.first else {
            return &self.message.body;
        };
        self.data_body.get_or_init(|| {
            let chunks = std::iter::once(first)
                .chain(&self.data.more)
                .map(|r| self.raw.slice(r.clone()))
                .collect();
            Body::Data(chunks)
        })
    }

    /// The body when it is a single data section: its contents, without
    /// building a [`Body`].
    pub fn single_data(&self) -> Option<Bytes> {
        match &self.data {
            DataSections {
                first: Some(r),
                more,
            } if more.is_empty() => Some(self.raw.slice(r.clone())),
            _ => None,
        }
    }
    pub fn footer(&self) -> Option<&Map> {
        self.message.footer.as_ref()
    }

    /// The bare message bytes, shared with the payload.
    pub fn bare_message(&self) -> Bytes {
        self.raw.slice(self.ranges.bare.clone())
    }

    /// The bytes after the bare message (the footer, if any), shared with the payload.
    pub fn tail(&self) -> Bytes {
        self.raw.slice(self.ranges.bare.end..)
    }

    /// Re-emits the message with a new header and annotations (`None` = omit the section)
    /// followed by the original bare message and footer bytes.
    pub fn encode_with(
        &self,
        header: Option<&Header>,
        delivery_annotations: Option<&Map>,
        message_annotations: Option<&Map>,
        buf: &mut BytesMut,
    ) {
        Message::encode_annotations(header, delivery_annotations, message_annotations, buf);
        buf.extend_from_slice(&self.raw[self.ranges.bare.start..]);
    }
}

fn invalid_body(name: &'static str) -> AmqpCodecError {
    AmqpCodecError::InvalidField {
        composite: name,
        field: "body",
    }
}

fn section_name(c: u64) -> &'static str {
    match c {
        HEADER => "header",
        DELIVERY_ANNOTATIONS => "delivery-annotations",
        MESSAGE_ANNOTATIONS => "message-annotations",
        PROPERTIES => "properties",
        APPLICATION_PROPERTIES => "application-properties",
        DATA => "data",
        AMQP_SEQUENCE => "amqp-sequence",
        AMQP_VALUE => "amqp-value",
        _ => "footer",
    }
}

#[cfg(test)]
mod tests;
