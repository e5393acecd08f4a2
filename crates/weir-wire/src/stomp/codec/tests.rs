use super::*;
use proptest::prelude::*;

fn codec(version: Version) -> StompCodec {
    let mut codec = StompCodec::default();
    codec.set_version(version);
    codec
}

/// Decodes everything in `input` at once; panics (test only) on an error.
fn decode_all(codec: &mut StompCodec, input: &[u8]) -> Vec<Inbound> {
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    while let Some(item) = codec.decode(&mut buf).unwrap() {
        out.push(item);
    }
    out
}

fn frames(items: Vec<Inbound>) -> Vec<Frame> {
    items
        .into_iter()
        .filter_map(|item| match item {
            Inbound::Frame(frame) => Some(frame),
            Inbound::Heartbeat => None,
        })
        .collect()
}

fn one_frame(version: Version, input: &[u8]) -> Frame {
    let mut decoded = frames(decode_all(&mut codec(version), input));
    assert_eq!(decoded.len(), 1, "{decoded:?}");
    decoded.remove(0)
}

fn decode_err(codec: &mut StompCodec, input: &[u8]) -> StompError {
    let mut buf = BytesMut::from(input);
    loop {
        match codec.decode(&mut buf) {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("no error for {input:?}"),
            Err(err) => return err,
        }
    }
}

fn encode(version: Version, frame: Frame) -> Result<Vec<u8>, StompError> {
    let mut dst = BytesMut::new();
    codec(version).encode(frame, &mut dst)?;
    Ok(dst.to_vec())
}

fn headers(frame: &Frame) -> Vec<(&str, &str)> {
    frame.headers.iter().collect()
}

fn limits(max_frame_size: usize, max_headers: usize, max_header_length: usize) -> StompCodec {
    StompCodec::new(Limits {
        max_frame_size,
        max_headers,
        max_header_length,
    })
}

// ---- decoding ----

#[test]
fn decodes_content_length_body_with_nuls() {
    let frame = one_frame(
        Version::V1_2,
        b"SEND\ndestination:/queue/a\ncontent-length:5\n\na\0b\0c\0",
    );
    assert_eq!(frame.command, Command::Send);
    assert_eq!(frame.header("destination"), Some("/queue/a"));
    assert_eq!(&frame.body[..], b"a\0b\0c");
}

#[test]
fn decodes_body_up_to_first_nul_without_content_length() {
    let decoded = frames(decode_all(
        &mut codec(Version::V1_2),
        b"SEND\ndestination:a\n\nhello\0MESSAGE\n\n\0",
    ));
    assert_eq!(decoded.len(), 2);
    assert_eq!(&decoded[0].body[..], b"hello");
    assert_eq!(decoded[1].command, Command::Message);
    assert!(decoded[1].body.is_empty());
    assert!(decoded[1].headers.is_empty());
}

#[test]
fn repeated_headers_are_kept_in_order_and_first_wins() {
    let frame = one_frame(Version::V1_2, b"MESSAGE\nfoo:World\nfoo:Hello\nbar:1\n\n\0");
    assert_eq!(frame.header("foo"), Some("World"));
    assert_eq!(
        headers(&frame),
        [("foo", "World"), ("foo", "Hello"), ("bar", "1")]
    );
}

#[test]
fn first_content_length_wins() {
    let frame = one_frame(
        Version::V1_2,
        b"SEND\ncontent-length:2\ncontent-length:x\n\nab\0",
    );
    assert_eq!(&frame.body[..], b"ab");
}

#[test]
fn accepts_crlf_line_endings() {
    let frame = one_frame(
        Version::V1_2,
        b"SEND\r\ndestination:/queue/a\r\nreceipt:7\r\n\r\nbody\0",
    );
    assert_eq!(frame.command, Command::Send);
    assert_eq!(
        headers(&frame),
        [("destination", "/queue/a"), ("receipt", "7")]
    );
    assert_eq!(&frame.body[..], b"body");
}

#[test]
fn values_are_kept_verbatim() {
    let frame = one_frame(Version::V1_0, b"SEND\nkey: spaced value \nurl:a:b:c\n\n\0");
    assert_eq!(
        headers(&frame),
        [("key", " spaced value "), ("url", "a:b:c")]
    );
    let frame = one_frame(Version::V1_2, b"SEND\nempty:\n\n\0");
    assert_eq!(frame.header("empty"), Some(""));
}

#[test]
fn eols_between_frames_are_heartbeats() {
    let items = decode_all(
        &mut codec(Version::V1_2),
        b"\n\r\n\nSEND\n\nx\0\n\nACK\nid:1\n\n\0\r\n",
    );
    assert!(matches!(
        items.as_slice(),
        [
            Inbound::Heartbeat,
            Inbound::Frame(_),
            Inbound::Heartbeat,
            Inbound::Frame(_),
            Inbound::Heartbeat
        ]
    ));
}

#[test]
fn lone_cr_waits_for_its_lf() {
    let mut codec = codec(Version::V1_2);
    let mut buf = BytesMut::from(&b"\r"[..]);
    assert!(codec.decode(&mut buf).unwrap().is_none());
    buf.extend_from_slice(b"\n");
    assert_eq!(codec.decode(&mut buf).unwrap(), Some(Inbound::Heartbeat));
    assert!(buf.is_empty());
}

#[test]
fn frame_fed_byte_by_byte_yields_exactly_the_frame() {
    for input in [
        &b"SEND\r\ndestination:/q\\c1\r\ncontent-length:3\r\n\r\na\0b\0"[..],
        b"MESSAGE\nsubscription:0\n\nhello world\0",
    ] {
        let expected = one_frame(Version::V1_2, input);
        let mut codec = codec(Version::V1_2);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for (i, &byte) in input.iter().enumerate() {
            buf.extend_from_slice(&[byte]);
            match codec.decode(&mut buf).unwrap() {
                Some(item) => {
                    assert_eq!(i, input.len() - 1, "frame before its last byte");
                    got.push(item);
                }
                None => assert!(i < input.len() - 1),
            }
        }
        assert_eq!(got, [Inbound::Frame(expected)]);
        assert!(buf.is_empty());
        assert!(codec.decode(&mut buf).unwrap().is_none());
    }
}

#[test]
fn several_frames_in_one_buffer() {
    let mut input = Vec::new();
    for i in 0..10 {
        input.extend_from_slice(format!("SEND\ndestination:/q/{i}\n\nbody {i}\0").as_bytes());
    }
    let decoded = frames(decode_all(&mut codec(Version::V1_1), &input));
    assert_eq!(decoded.len(), 10);
    for (i, frame) in decoded.iter().enumerate() {
        assert_eq!(
            frame.header("destination"),
            Some(format!("/q/{i}").as_str())
        );
        assert_eq!(frame.body, format!("body {i}").as_bytes());
    }
}

#[test]
fn body_and_plain_headers_are_slices_of_the_read_buffer() {
    let mut buf = BytesMut::from(&b"SEND\ndestination:/queue/a\n\npayload\0"[..]);
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
    let Some(Inbound::Frame(frame)) = codec(Version::V1_2).decode(&mut buf).unwrap() else {
        panic!("no frame");
    };
    assert!(range.contains(&(frame.body.as_ptr() as usize)));
    let (name, value) = &frame.headers.entries()[0];
    assert!(range.contains(&(name.as_bytes().as_ptr() as usize)));
    assert!(range.contains(&(value.as_bytes().as_ptr() as usize)));
}

// ---- escaping on decode ----

#[test]
fn unescapes_every_sequence_in_1_2() {
    let frame = one_frame(
        Version::V1_2,
        b"SEND\na\\cb:1\\r2\\n3\\c4\\\\5\nplain:text\n\n\0",
    );
    assert_eq!(
        headers(&frame),
        [("a:b", "1\r2\n3:4\\5"), ("plain", "text")]
    );
}

#[test]
fn unescapes_in_1_1() {
    let frame = one_frame(Version::V1_1, b"MESSAGE\nk:a\\nb\\cc\\\\d\n\n\0");
    assert_eq!(frame.header("k"), Some("a\nb:c\\d"));
}

#[test]
fn version_1_0_does_not_unescape() {
    let frame = one_frame(Version::V1_0, b"SEND\nk:a\\nb\\tc\\\n\n\0");
    assert_eq!(frame.header("k"), Some("a\\nb\\tc\\"));
}

#[test]
fn connect_and_connected_are_never_unescaped() {
    for command in ["CONNECT", "STOMP", "CONNECTED"] {
        let input = format!("{command}\npasscode:a\\cb\\t\n\n\0");
        let frame = one_frame(Version::V1_2, input.as_bytes());
        assert_eq!(frame.header("passcode"), Some("a\\cb\\t"));
    }
}

#[test]
fn undefined_escape_is_an_error() {
    for input in [
        &b"SEND\nk:a\\tb\n\n\0"[..],
        b"SEND\nk\\x:v\n\n\0",
        b"SEND\nk:trailing\\\n\n\0",
    ] {
        let err = decode_err(&mut codec(Version::V1_2), input);
        assert!(matches!(err, StompError::InvalidEscape(_)), "{err}");
    }
}

// ---- errors ----

#[test]
fn unknown_command_names_it() {
    let err = decode_err(&mut codec(Version::V1_2), b"PUBLISH\n\n\0");
    assert!(matches!(&err, StompError::UnknownCommand(name) if name == "PUBLISH"));
    assert_eq!(err.to_string(), "unknown command \"PUBLISH\"");
    // Commands are case-sensitive.
    assert!(matches!(
        decode_err(&mut codec(Version::V1_2), b"send\n\n\0"),
        StompError::UnknownCommand(_)
    ));
}

#[test]
fn long_garbage_is_refused_before_a_line_end() {
    let mut buf = BytesMut::from(&b"GET / HTTP/1.1"[..]);
    let err = codec(Version::V1_0).decode(&mut buf).unwrap_err();
    assert!(matches!(err, StompError::UnknownCommand(_)));
    // A prefix of a command may still become one.
    let mut buf = BytesMut::from(&b"UNSUBSCRIBE\r"[..]);
    assert!(codec(Version::V1_0).decode(&mut buf).unwrap().is_none());
}

#[test]
fn malformed_header_lines() {
    let err = decode_err(&mut codec(Version::V1_2), b"SEND\nno-colon\n\n\0");
    assert!(matches!(
        err,
        StompError::Malformed(Malformed::MissingColon)
    ));
    let err = decode_err(&mut codec(Version::V1_2), b"SEND\n:value\n\n\0");
    assert!(matches!(
        err,
        StompError::Malformed(Malformed::EmptyHeaderName)
    ));
}

#[test]
fn invalid_utf8_in_name_or_value() {
    for input in [&b"SEND\nk\xff:v\n\n\0"[..], b"SEND\nk:\xc3\x28\n\n\0"] {
        for version in Version::ALL {
            let err = decode_err(&mut codec(version), input);
            assert!(matches!(err, StompError::InvalidUtf8), "{err}");
        }
    }
    // UTF-8 is fine, escaped or not.
    let frame = one_frame(Version::V1_2, "SEND\nclé:välue\\c✓\n\n\0".as_bytes());
    assert_eq!(frame.header("clé"), Some("välue:✓"));
}

#[test]
fn bad_content_length() {
    for value in ["abc", "-1", "+1", " 1", "1 ", "", "99999999999999999999999"] {
        let input = format!("SEND\ncontent-length:{value}\n\n\0");
        let err = decode_err(&mut codec(Version::V1_2), input.as_bytes());
        assert!(
            matches!(err, StompError::InvalidContentLength(_)),
            "{value}: {err}"
        );
    }
}

#[test]
fn body_longer_than_content_length_lacks_its_nul() {
    let err = decode_err(
        &mut codec(Version::V1_2),
        b"SEND\ncontent-length:2\n\nabc\0",
    );
    assert!(matches!(err, StompError::Malformed(Malformed::MissingNul)));
}

#[test]
fn eof_inside_a_frame_is_truncation() {
    let mut codec = codec(Version::V1_2);
    let mut buf = BytesMut::from(&b"SEND\ndestination:a\n\nhalf"[..]);
    assert!(codec.decode(&mut buf).unwrap().is_none());
    let err = codec.decode_eof(&mut buf).unwrap_err();
    assert!(matches!(err, StompError::Malformed(Malformed::Truncated)));
    let mut empty = BytesMut::new();
    assert!(codec.decode_eof(&mut empty).unwrap().is_none());
}

#[test]
fn error_messages_are_single_lines() {
    let err = decode_err(&mut codec(Version::V1_2), b"BAD\r\nCOMMAND\n");
    let message = err.to_string();
    assert!(
        !message.contains('\n') && !message.contains('\r'),
        "{message}"
    );
}

// ---- limits ----

#[test]
fn frame_size_limit_counts_the_whole_frame() {
    // "SEND\n\n" + 4 + NUL = 11 bytes.
    let input = b"SEND\n\nabcd\0";
    assert_eq!(frames(decode_all(&mut limits(11, 10, 100), input)).len(), 1);
    let err = decode_err(&mut limits(10, 10, 100), input);
    assert!(matches!(err, StompError::FrameTooLarge { limit: 10 }));
}

#[test]
fn oversized_content_length_is_refused_before_the_body_arrives() {
    let mut codec = limits(1000, 10, 100);
    let mut buf = BytesMut::from(&b"SEND\ncontent-length:5000\n\n"[..]);
    let err = codec.decode(&mut buf).unwrap_err();
    assert!(matches!(err, StompError::FrameTooLarge { limit: 1000 }));
}

#[test]
fn endless_body_is_refused_once_the_buffer_reaches_the_limit() {
    let mut codec = limits(1000, 10, 100);
    let mut buf = BytesMut::from(&b"SEND\n\n"[..]);
    assert!(codec.decode(&mut buf).unwrap().is_none());
    loop {
        buf.extend_from_slice(&[b'x'; 100]);
        match codec.decode(&mut buf) {
            Ok(None) => assert!(buf.len() < 1000),
            Err(StompError::FrameTooLarge { limit: 1000 }) => break,
            other => panic!("{other:?}"),
        }
    }
    assert!(buf.len() <= 1100);
}

#[test]
fn endless_headers_are_refused_at_the_frame_limit() {
    let mut codec = limits(1000, 1000, 100);
    let mut buf = BytesMut::from(&b"SEND\n"[..]);
    let err = loop {
        buf.extend_from_slice(b"header:value\n");
        match codec.decode(&mut buf) {
            Ok(None) => assert!(buf.len() < 1100),
            Ok(Some(item)) => panic!("{item:?}"),
            Err(err) => break err,
        }
    };
    assert!(matches!(err, StompError::FrameTooLarge { limit: 1000 }));
}

#[test]
fn too_many_headers() {
    let ok = b"SEND\na:1\nb:2\n\n\0";
    assert_eq!(frames(decode_all(&mut limits(1000, 2, 100), ok)).len(), 1);
    let err = decode_err(&mut limits(1000, 2, 100), b"SEND\na:1\nb:2\nc:3\n\n\0");
    assert!(matches!(err, StompError::TooManyHeaders { limit: 2 }));
}

#[test]
fn header_line_limit_excludes_the_eol() {
    let ok = b"SEND\nkey:12345\r\n\n\0"; // "key:12345" is 9 bytes
    assert_eq!(frames(decode_all(&mut limits(1000, 10, 9), ok)).len(), 1);
    let err = decode_err(&mut limits(1000, 10, 8), ok);
    assert!(matches!(err, StompError::HeaderTooLong { limit: 8 }));
}

#[test]
fn long_header_line_is_refused_before_its_end() {
    let mut codec = limits(100_000, 10, 50);
    let mut buf = BytesMut::from(&b"SEND\nkey:"[..]);
    buf.extend_from_slice(&[b'v'; 60]);
    let err = codec.decode(&mut buf).unwrap_err();
    assert!(matches!(err, StompError::HeaderTooLong { limit: 50 }));
}

#[test]
fn codec_is_usable_after_a_limit_error_reset() {
    let mut codec = limits(1000, 1, 100);
    let err = decode_err(&mut codec, b"SEND\na:1\nb:2\n\n\0");
    assert!(matches!(err, StompError::TooManyHeaders { .. }));
    assert_eq!(frames(decode_all(&mut codec, b"ACK\nid:1\n\n\0")).len(), 1);
}

// ---- encoding ----

#[test]
fn encodes_a_frame_with_content_length() {
    let frame = Frame::new(Command::Message)
        .with_header("destination", "/queue/a")
        .with_body(Bytes::from_static(b"a\0b"));
    assert_eq!(
        encode(Version::V1_2, frame).unwrap(),
        b"MESSAGE\ndestination:/queue/a\ncontent-length:3\n\na\0b\0"
    );
}

#[test]
fn empty_body_gets_no_content_length() {
    let frame = Frame::new(Command::Receipt).with_header("receipt-id", "7");
    assert_eq!(
        encode(Version::V1_2, frame).unwrap(),
        b"RECEIPT\nreceipt-id:7\n\n\0"
    );
}

#[test]
fn callers_content_length_is_kept_and_checked() {
    let frame = Frame::new(Command::Send)
        .with_header("content-length", "2")
        .with_body(Bytes::from_static(b"ab"));
    assert_eq!(
        encode(Version::V1_2, frame).unwrap(),
        b"SEND\ncontent-length:2\n\nab\0"
    );
    let wrong = Frame::new(Command::Send)
        .with_header("content-length", "3")
        .with_body(Bytes::from_static(b"ab"));
    assert!(matches!(
        encode(Version::V1_2, wrong),
        Err(StompError::InvalidContentLength(_))
    ));
}

#[test]
fn encodes_every_escape_in_1_2() {
    let frame = Frame::new(Command::Message).with_header("a:b", "1\r2\n3:4\\5");
    assert_eq!(
        encode(Version::V1_2, frame).unwrap(),
        b"MESSAGE\na\\cb:1\\r2\\n3\\c4\\\\5\n\n\0"
    );
}

#[test]
fn version_1_0_does_not_escape() {
    let frame = Frame::new(Command::Message).with_header("k", "a:b\\c");
    assert_eq!(
        encode(Version::V1_0, frame).unwrap(),
        b"MESSAGE\nk:a:b\\c\n\n\0"
    );
}

#[test]
fn connected_is_never_escaped() {
    let frame = Frame::new(Command::Connected).with_header("server", "weir:1\\0");
    assert_eq!(
        encode(Version::V1_2, frame).unwrap(),
        b"CONNECTED\nserver:weir:1\\0\n\n\0"
    );
}

#[test]
fn unescapable_headers_are_refused() {
    for frame in [
        Frame::new(Command::Connected).with_header("k", "a\nb"),
        Frame::new(Command::Connected).with_header("k:x", "v"),
        Frame::new(Command::Connect).with_header("k", "a\r"),
    ] {
        assert!(matches!(
            encode(Version::V1_2, frame),
            Err(StompError::Malformed(Malformed::Unescapable))
        ));
    }
    let frame = Frame::new(Command::Error).with_header("message", "line\nbreak");
    assert!(encode(Version::V1_0, frame).is_err());
    let frame = Frame::new(Command::Error).with_header(String::new(), "v");
    assert!(matches!(
        encode(Version::V1_2, frame),
        Err(StompError::Malformed(Malformed::EmptyHeaderName))
    ));
}

#[test]
fn heartbeat_is_one_eol() {
    let mut dst = BytesMut::new();
    codec(Version::V1_2)
        .encode(Outbound::Heartbeat, &mut dst)
        .unwrap();
    assert_eq!(&dst[..], b"\n");
}

#[test]
fn encode_reserves_exactly_once() {
    let frame = Frame::new(Command::Message)
        .with_header("destination", "/q\\c:1")
        .with_header("message-id", String::from("id\n7"))
        .with_body(vec![7u8; 1000]);
    let mut dst = BytesMut::new();
    codec(Version::V1_2).encode(&frame, &mut dst).unwrap();
    assert_eq!(dst.len(), dst.capacity());
}

#[test]
fn large_body_round_trip() {
    let body = Bytes::from((0..200_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>());
    let frame = Frame::new(Command::Send)
        .with_header("destination", "/queue/big")
        .with_body(body.clone());
    let wire = encode(Version::V1_2, frame).unwrap();
    let decoded = one_frame(Version::V1_2, &wire);
    assert_eq!(decoded.body, body);
    assert_eq!(decoded.header("content-length"), Some("200000"));
}

// ---- properties ----

fn header_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z:\\\\\r\n]{0,8}",
        proptest::string::string_regex("[\\PC]{0,12}").unwrap(),
    ]
}

fn escaping_command() -> impl Strategy<Value = Command> {
    proptest::sample::select(
        Command::ALL
            .into_iter()
            .filter(|c| c.escapes_headers())
            .collect::<Vec<_>>(),
    )
}

fn frame_with(
    headers: impl Strategy<Value = Vec<(String, String)>>,
) -> impl Strategy<Value = Frame> {
    (
        escaping_command(),
        headers,
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(command, headers, body)| {
            let mut frame = Frame::new(command).with_body(body);
            for (name, value) in headers {
                frame.add_header(name, value);
            }
            frame
        })
}

fn escapable_headers() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec(
        (
            header_text().prop_filter("named", |n| !n.is_empty() && n != CONTENT_LENGTH),
            header_text(),
        ),
        0..8,
    )
}

fn plain_headers() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec(
        (
            "[^:\r\n]{1,10}".prop_filter("not content-length", |n| n != CONTENT_LENGTH),
            "[^\r\n]{0,10}",
        ),
        0..8,
    )
}

/// Feeds `wire` in chunks of the given sizes (cycled), collecting all items.
fn decode_chunked(codec: &mut StompCodec, wire: &[u8], chunks: &[usize]) -> Vec<Inbound> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut rest = wire;
    let mut sizes = chunks.iter().cycle();
    while !rest.is_empty() {
        let take = sizes.next().copied().unwrap_or(1).clamp(1, rest.len());
        let (chunk, tail) = rest.split_at(take);
        buf.extend_from_slice(chunk);
        rest = tail;
        while let Some(item) = codec.decode(&mut buf).unwrap() {
            out.push(item);
        }
    }
    assert!(buf.is_empty());
    out
}

fn expected_after_round_trip(mut frame: Frame) -> Frame {
    if !frame.body.is_empty() {
        let len = frame.body.len().to_string();
        frame.add_header(CONTENT_LENGTH, len);
    }
    frame
}

/// Byte strings made of STOMP's building blocks, so that they often get deep
/// into the decoder.
fn stomp_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let pieces: Vec<&'static [u8]> = vec![
        b"SEND",
        b"CONNECT",
        b"\n",
        b"\r\n",
        b"\r",
        b":",
        b"\\",
        b"\0",
        b"content-length:",
        b"c",
        b"3",
        b"\xff",
    ];
    proptest::collection::vec(proptest::sample::select(pieces), 0..64)
        .prop_map(|pieces| pieces.concat())
}

proptest! {
    #[test]
    fn round_trip_with_escaping(
        frame in frame_with(escapable_headers()),
        version in prop_oneof![Just(Version::V1_1), Just(Version::V1_2)],
        chunks in proptest::collection::vec(1usize..64, 1..8),
    ) {
        let mut codec = codec(version);
        let mut wire = BytesMut::new();
        codec.encode(Outbound::Heartbeat, &mut wire).unwrap();
        codec.encode(&frame, &mut wire).unwrap();
        codec.encode(Outbound::Heartbeat, &mut wire).unwrap();
        let items = decode_chunked(&mut codec, &wire, &chunks);
        prop_assert_eq!(
            items,
            vec![Inbound::Heartbeat, Inbound::Frame(expected_after_round_trip(frame)), Inbound::Heartbeat]
        );
    }

    #[test]
    fn round_trip_without_escaping(
        frame in frame_with(plain_headers()),
        connect in any::<bool>(),
        version in proptest::sample::select(Version::ALL.to_vec()),
    ) {
        let mut frame = frame;
        let version = if connect {
            frame.command = Command::Connected;
            version
        } else {
            Version::V1_0
        };
        let mut codec = codec(version);
        let mut wire = BytesMut::new();
        codec.encode(&frame, &mut wire).unwrap();
        let items = decode_chunked(&mut codec, &wire, &[7]);
        prop_assert_eq!(items, vec![Inbound::Frame(expected_after_round_trip(frame))]);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        input in proptest::collection::vec(any::<u8>(), 0..512),
        chunk in 1usize..64,
        version in proptest::sample::select(Version::ALL.to_vec()),
    ) {
        let mut codec = limits(256, 8, 64);
        codec.set_version(version);
        let mut buf = BytesMut::new();
        'feed: for piece in input.chunks(chunk) {
            buf.extend_from_slice(piece);
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
            prop_assert!(buf.len() < 256 + chunk);
        }
        let _ = codec.decode_eof(&mut buf);
    }

    #[test]
    fn split_reads_decode_like_one_read(
        input in stomp_like_bytes(),
        chunk in 1usize..16,
        version in proptest::sample::select(Version::ALL.to_vec()),
    ) {
        let outcome = |chunk: usize| {
            let mut codec = limits(128, 4, 32);
            codec.set_version(version);
            let mut buf = BytesMut::new();
            let mut items = Vec::new();
            let mut failed = false;
            'feed: for piece in input.chunks(chunk) {
                buf.extend_from_slice(piece);
                loop {
                    match codec.decode(&mut buf) {
                        Ok(Some(item)) => items.push(item),
                        Ok(None) => break,
                        Err(_) => { failed = true; break 'feed; }
                    }
                }
            }
            // EOLs split across reads may be reported as several heart-beats.
            items.dedup_by(|a, b| matches!((a, b), (Inbound::Heartbeat, Inbound::Heartbeat)));
            (items, failed)
        };
        prop_assert_eq!(outcome(chunk), outcome(input.len().max(1)));
    }

    #[test]
    fn stomp_like_bytes_never_panic(
        input in stomp_like_bytes(),
        version in proptest::sample::select(Version::ALL.to_vec()),
    ) {
        let mut codec = limits(128, 4, 32);
        codec.set_version(version);
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(_)) = codec.decode(&mut buf) {}
    }
}
