//! `[limits]`: connection, session and transaction bounds and timeouts.

use std::time::Duration;

use super::{duration_or, ranged, ranged_size, to_usize, GIB, MIB};
use crate::config::error::{ConfigError, KeyPath, Problem};
use crate::config::raw::{RawDuration, RawLimits};
use crate::config::Limits;

pub(super) fn limits(raw: &RawLimits) -> Result<Limits, ConfigError> {
    let key = KeyPath::root("limits");
    let max_frame_size = ranged_size(
        raw.max_frame_size.as_ref(),
        10 * MIB,
        1024,
        GIB,
        &key.field("max_frame_size"),
    )?;
    let header_key = key.field("max_header_length");
    // The default follows a small max_frame_size down rather than clash with it.
    let max_header_length = ranged_size(
        raw.max_header_length.as_ref(),
        (10 * 1024).min(max_frame_size),
        64,
        MIB,
        &header_key,
    )?;
    if max_header_length > max_frame_size {
        return Err(ConfigError::key(
            header_key,
            Problem::Exceeds {
                value: max_header_length.to_string(),
                other: "max_frame_size",
                other_value: max_frame_size.to_string(),
            },
        ));
    }
    let heartbeat_key = key.field("heartbeat");
    let heartbeat = duration_or(
        raw.heartbeat.as_ref(),
        Duration::from_secs(10),
        &heartbeat_key,
    )?;
    let (hb_min, hb_max) = (Duration::from_millis(100), Duration::from_secs(3_600));
    if !heartbeat.is_zero() && !(hb_min..=hb_max).contains(&heartbeat) {
        return Err(ConfigError::key(
            heartbeat_key,
            Problem::DurationOutOfRange {
                min: hb_min,
                max: hb_max,
                zero_allowed: true,
            },
        ));
    }
    Ok(Limits {
        max_frame_size: to_usize(max_frame_size),
        max_headers: to_usize(ranged(
            raw.max_headers,
            1_000,
            1,
            100_000,
            &key.field("max_headers"),
        )?),
        max_header_length: to_usize(max_header_length),
        max_message_size: to_usize(ranged_size(
            raw.max_message_size.as_ref(),
            10 * MIB,
            1024,
            GIB,
            &key.field("max_message_size"),
        )?),
        max_connections: to_usize(ranged(
            raw.max_connections,
            10_000,
            1,
            1_000_000,
            &key.field("max_connections"),
        )?),
        heartbeat,
        default_prefetch: u32::try_from(ranged(
            raw.default_prefetch,
            1_000,
            1,
            1_000_000,
            &key.field("default_prefetch"),
        )?)
        .unwrap_or(u32::MAX),
        max_transaction_ops: to_usize(ranged(
            raw.max_transaction_ops,
            100_000,
            1,
            100_000_000,
            &key.field("max_transaction_ops"),
        )?),
        max_transaction_bytes: to_usize(ranged_size(
            raw.max_transaction_bytes.as_ref(),
            64 * MIB,
            1024,
            64 * GIB,
            &key.field("max_transaction_bytes"),
        )?),
        max_open_transactions: to_usize(ranged(
            raw.max_open_transactions,
            64,
            1,
            1_000_000,
            &key.field("max_open_transactions"),
        )?),
        max_connections_per_user: to_usize(ranged(
            raw.max_connections_per_user,
            0,
            0,
            1_000_000,
            &key.field("max_connections_per_user"),
        )?),
        max_connections_per_address: to_usize(ranged(
            raw.max_connections_per_address,
            0,
            0,
            1_000_000,
            &key.field("max_connections_per_address"),
        )?),
        connect_timeout: timeout(
            raw.connect_timeout.as_ref(),
            Duration::from_secs(30),
            false,
            &key.field("connect_timeout"),
        )?,
        amqp_open_timeout: timeout(
            raw.amqp_open_timeout.as_ref(),
            Duration::from_secs(10),
            false,
            &key.field("amqp_open_timeout"),
        )?,
        sasl_timeout: timeout(
            raw.sasl_timeout.as_ref(),
            Duration::from_secs(10),
            false,
            &key.field("sasl_timeout"),
        )?,
        frame_timeout: timeout(
            raw.frame_timeout.as_ref(),
            Duration::from_secs(60),
            true,
            &key.field("frame_timeout"),
        )?,
        max_subscriptions_per_connection: to_usize(ranged(
            raw.max_subscriptions_per_connection,
            10_000,
            1,
            10_000_000,
            &key.field("max_subscriptions_per_connection"),
        )?),
        max_sessions_per_connection: to_usize(ranged(
            raw.max_sessions_per_connection,
            256,
            1,
            65_536,
            &key.field("max_sessions_per_connection"),
        )?),
        max_links_per_session: to_usize(ranged(
            raw.max_links_per_session,
            1_000,
            1,
            1_000_000,
            &key.field("max_links_per_session"),
        )?),
        max_unsettled_per_link: to_usize(ranged(
            raw.max_unsettled_per_link,
            10_000,
            1,
            1_000_000,
            &key.field("max_unsettled_per_link"),
        )?),
        max_queues_per_user: to_usize(ranged(
            raw.max_queues_per_user,
            0,
            0,
            1_000_000,
            &key.field("max_queues_per_user"),
        )?),
    })
}

/// A timeout between 100ms and 1h (or zero, where `zero_allowed`: no limit).
pub(super) fn timeout(
    raw: Option<&RawDuration>,
    default: Duration,
    zero_allowed: bool,
    key: &KeyPath,
) -> Result<Duration, ConfigError> {
    let value = duration_or(raw, default, key)?;
    let (min, max) = (Duration::from_millis(100), Duration::from_secs(3_600));
    if (value.is_zero() && zero_allowed) || (min..=max).contains(&value) {
        return Ok(value);
    }
    Err(ConfigError::key(
        key.clone(),
        Problem::DurationOutOfRange {
            min,
            max,
            zero_allowed,
        },
    ))
}
